"""Read the Python sources of a vLLM tree without importing or unpacking it.

:func:`open_tree` accepts a ``.whl`` file (read in place with :mod:`zipfile`),
an unpacked wheel or a source checkout (a directory holding ``vllm/``, or the
``vllm`` package directory itself). The tree answers ``read("vllm/x/y.py")``
with the file's text, or ``None`` when the file does not exist, and says which
vLLM release it is, as far as the tree records it.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..model import LayoutError


class SourceError(LayoutError):
    """A path that is not a readable vLLM tree (no ``vllm/`` package, a broken wheel)."""


#: how long reading a checkout's commit may take
GIT_TIMEOUT_S = 10
_WHEEL_NAME = re.compile(r"^vllm-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
#: ``__version__ = '0.33.0'``, ``version: str = ...``, and the chained form setuptools-scm and
#: vcs-versioning write into a built tree's ``vllm/_version.py``: ``__version__ = version = '0.33.0'``
_VERSION_ASSIGN = re.compile(
    r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:(?:__version__|version)\s*=\s*)?['"]([^'"]+)['"]""", re.M)


@dataclass
class SourceTree:
    """The ``vllm/`` sources of one tree. ``kind`` is ``wheel``, ``unpacked`` or ``checkout``."""

    origin: str
    kind: str
    version: str | None
    wheel_name: str | None = None
    sha256: str | None = None
    #: a checkout's git commit (short), its name where it records no version
    commit: str | None = None
    _zip: zipfile.ZipFile | None = None
    _root: Path | None = None
    _names: set[str] = field(default_factory=set)

    def read(self, path: str) -> str | None:
        """The text of ``path`` (``vllm/...``, ``/``-separated), or ``None`` if absent."""
        if self._zip is not None:
            if path not in self._names:
                return None
            return self._zip.read(path).decode("utf-8", errors="replace")
        assert self._root is not None
        file = self._root / path
        return file.read_text(encoding="utf-8", errors="replace") if file.is_file() else None

    def exists(self, path: str) -> bool:
        if self._zip is not None:
            return path in self._names
        assert self._root is not None
        return (self._root / path).is_file()

    def python_files(self, under: str) -> list[str]:
        """Every ``.py`` path below the folder ``under`` (``vllm/v1``), sorted."""
        prefix = under.rstrip("/") + "/"
        if self._zip is not None:
            return sorted(n for n in self._names if n.startswith(prefix) and n.endswith(".py"))
        assert self._root is not None
        base = self._root / under
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self._root).as_posix() for p in base.rglob("*.py"))

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _version_from_text(text: str | None) -> str | None:
    if not text:
        return None
    m = _VERSION_ASSIGN.search(text)
    return m.group(1) if m else None


def _metadata_version(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def _open_wheel(path: Path) -> SourceTree:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"{path}: not a readable wheel: {exc}") from None
    names = set(zf.namelist())
    if "vllm/__init__.py" not in names:
        zf.close()
        raise SourceError(f"{path}: the wheel holds no vllm/ package")
    tree = SourceTree(origin=str(path), kind="wheel", version=None, wheel_name=path.name,
                      sha256=_sha256(path), _zip=zf, _names=names)
    metadata = [n for n in names if n.endswith(".dist-info/METADATA")]
    version = _metadata_version(zf.read(metadata[0]).decode(errors="replace")) if metadata else None
    if version is None:
        m = _WHEEL_NAME.match(path.name)
        version = m.group("version") if m else _version_from_text(tree.read("vllm/_version.py"))
    tree.version = version
    return tree


def _open_dir(path: Path) -> SourceTree:
    root = path
    if (path / "__init__.py").is_file() and path.name == "vllm":
        root = path.parent
    if not (root / "vllm" / "__init__.py").is_file():
        raise SourceError(f"{path}: no vllm/ package here (expected a vLLM checkout, an unpacked wheel or a .whl)")
    dist_infos = sorted(root.glob("vllm-*.dist-info"))
    kind = "unpacked" if dist_infos else "checkout"
    version = None
    if dist_infos:
        meta = dist_infos[0] / "METADATA"
        version = _metadata_version(meta.read_text(errors="replace")) if meta.is_file() else None
    elif (root / "PKG-INFO").is_file():  # an unpacked sdist states its version as a wheel's METADATA does
        version = _metadata_version((root / "PKG-INFO").read_text(errors="replace"))
    if version is None:
        version = _version_from_text((root / "vllm" / "_version.py").read_text(errors="replace")
                                     if (root / "vllm" / "_version.py").is_file() else None)
    commit = _git_commit(root) if version is None else None
    return SourceTree(origin=str(path), kind=kind, version=version, commit=commit, _root=root)


def _git_commit(root: Path) -> str | None:
    """The short commit a git checkout rooted at ``root`` is at (``None``: not the root of a checkout
    git can read; a tree inside another repository is not named after that repository's commit)."""
    try:
        proc = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    if proc.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root.resolve():
        return None
    return lines[1] if re.fullmatch(r"[0-9a-f]{7,40}", lines[1]) else None


def open_tree(path: str | Path) -> SourceTree:
    """Open a vLLM ``.whl``, unpacked wheel or source checkout; raises :class:`SourceError`."""
    path = Path(path)
    if path.is_file() and path.suffix == ".whl":
        return _open_wheel(path)
    if path.is_dir():
        return _open_dir(path)
    if path.exists():
        raise SourceError(f"{path}: neither a .whl file nor a directory")
    raise SourceError(f"{path}: no such file or directory")
