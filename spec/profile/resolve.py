"""Which profile a command-line reference names: ``--vllm RELEASE|PATH``.

A reference is tried, in this order, as:

1. a shipped release: ``0.32``, ``0.32.0`` or ``vllm-0.32`` (``spec/layouts/``);
2. a layout file (``*.json``, e.g. written by ``ecp spec layout --from-vllm``);
3. a vLLM checkout, an unpacked wheel or a ``.whl``: its layout is extracted
   statically (:mod:`ecp.spec.layout.vllm`; nothing of vLLM is imported), so a
   gate can run against the code under review.

Anything else raises :class:`~ecp.spec.layout.model.LayoutError` listing the
shipped releases. ``auto`` is not a reference: the caller picks a release from
traffic (:mod:`.fingerprint`).
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

from ..layout.model import LayoutError, decode_layout
from ..layout.resolve import load_shipped, shipped_names
from .model import Profile, build_profile

_RELEASE = re.compile(r"(?:vllm-)?(\d+\.\d+)(?:\.0)?")


def shipped_releases() -> list[str]:
    """``0.21`` ... ``0.33``: the releases with a shipped layout, oldest first."""
    return [m.group(1) for n in shipped_names() if (m := _RELEASE.fullmatch(n))]


def shipped_profile(release: str) -> Profile:
    """The profile of a shipped release (``0.32``, ``0.32.0``, ``vllm-0.32``), built once."""
    m = _RELEASE.fullmatch(release)
    if m is None:
        raise LayoutError(f"{release!r} is not a release name (have: {', '.join(shipped_releases())})")
    return _shipped(m.group(1))


@lru_cache(maxsize=None)
def _shipped(release: str) -> Profile:
    return build_profile(load_shipped(f"vllm-{release}"))


@lru_cache(maxsize=8)
def _from_path(path: str, mtime_ns: int, reference: str) -> Profile:
    """A layout file, or a vLLM tree or wheel read statically; built once per file version (a wheel takes
    seconds to read, and a run resolves its ``--vllm`` more than once)."""
    if path.endswith(".json") and Path(path).is_file():
        return build_profile(decode_layout(Path(path).read_bytes(), reference))
    cached = _wheel_cache(path, mtime_ns)
    if cached is not None and cached.is_file():
        try:
            return build_profile(decode_layout(cached.read_bytes(), str(cached)))
        except LayoutError:
            pass  # written by another extractor version, or cut short: extract again
    from ..layout.model import encode_layout
    from ..layout.vllm import SourceError, extract

    try:
        layout = extract(path).layout
    except SourceError as exc:
        raise LayoutError(f"{reference}: {exc}") from None
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(encode_layout(layout))
            tmp.replace(cached)  # whole or not at all: peers of one run read it side by side
        except OSError:
            pass  # a cache that cannot be written costs time, nothing else
    return build_profile(layout)


def _wheel_cache(path: str, mtime_ns: int) -> Path | None:
    """Where the layout read from a ``.whl`` is kept between processes (a wheel takes seconds to read and
    every peer of a run resolves ``--vllm``): ``$ECP_CACHE_DIR`` or ``~/.cache/ecp``, keyed by the wheel's
    path, size and time. A checkout is read every time: its files change under the same directory."""
    if not path.endswith(".whl"):
        return None
    from ..layout.vllm.protocol import EXTRACTOR_VERSION

    root = Path(os.environ.get("ECP_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "ecp")
    key = hashlib.sha256(f"{path}|{os.path.getsize(path)}|{mtime_ns}|{EXTRACTOR_VERSION}".encode()).hexdigest()[:24]
    return root / "layouts" / f"{key}.json"


def resolve_profile(reference: str, cwd: Path | None = None) -> Profile:
    """The profile a reference names (see the module docstring)."""
    if _RELEASE.fullmatch(reference):
        return shipped_profile(reference)
    path = ((Path.cwd() if cwd is None else cwd) / reference).resolve()
    if path.exists():
        return _from_path(str(path), path.stat().st_mtime_ns, reference)
    raise LayoutError(f"{reference!r} is neither a shipped release ({', '.join(shipped_releases())}), "
                      f"a layout file nor a vLLM checkout or wheel")
