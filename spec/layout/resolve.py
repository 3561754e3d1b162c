"""Turn a command-line reference into a :class:`~ecp.spec.layout.model.Layout`.

A reference is tried, in this order, as:

1. ``current``: the layout of the installed :mod:`ecp.spec` code, introspected;
2. a path to a layout file;
3. a shipped release name (``vllm-0.33``, ``vllm-0.21``; a trailing ``.0`` is
   accepted): ``spec/layouts/<name>.json`` from the package data;
4. a git ref of the repository around the working directory, read with
   ``git show REF:spec/layouts/vllm-0.33.json``; ``REF:PATH`` names another
   file at that ref (e.g. ``main:spec/layouts/vllm-0.21.json``).

A reference that is none of these raises :class:`LayoutError`, which the
command turns into exit status 2.
"""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path

from .model import Layout, LayoutError, decode_layout
from ..version import VLLM_RELEASE

CURRENT = "current"
#: the file a git ref is read from when the reference names no path
DEFAULT_REF_PATH = f"spec/layouts/vllm-{VLLM_RELEASE}.json"
GIT_TIMEOUT_S = 30


def shipped_names() -> list[str]:
    """Names of the layouts shipped in ``spec/layouts/``, oldest first.

    Numbered releases (``vllm-0.21``) sort by version; layouts named after a
    source revision (``vllm-v1-0015f3f``) describe pre-release engines and
    come first.
    """
    folder = resources.files("ecp.spec").joinpath("layouts")
    names = [p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")]
    return sorted(names, key=_release_key)


def _release_key(name: str) -> tuple:
    parts = name.split("-", 1)[-1].split(".")
    if all(p.isdigit() for p in parts):
        return (1, tuple(int(p) for p in parts), name)
    return (0, (), name)


def load_shipped(name: str) -> Layout:
    """A shipped layout by release name; raises :class:`LayoutError` if there is none."""
    candidates = [name, name[:-2] if name.endswith(".0") else name]
    folder = resources.files("ecp.spec").joinpath("layouts")
    for candidate in candidates:
        entry = folder.joinpath(f"{candidate}.json")
        if entry.is_file():
            return decode_layout(entry.read_bytes(), f"{candidate}.json")
    raise LayoutError(f"no shipped layout named {name!r} (have: {', '.join(shipped_names())})")


def _git_show(ref: str, path: str, cwd: Path) -> bytes:
    try:
        proc = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=cwd, capture_output=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LayoutError(f"cannot run git to read {ref}:{path}: {exc}") from None
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace").strip().splitlines()
        raise LayoutError(f"{ref}:{path} is not readable with git ({reason[-1] if reason else 'no output'})")
    return proc.stdout


def resolve(reference: str, cwd: Path | None = None) -> Layout:
    """Load the layout a reference names (see the module docstring)."""
    cwd = Path.cwd() if cwd is None else cwd
    if reference == CURRENT:
        from .introspect import current_layout

        return current_layout()
    path = cwd / reference
    if path.is_file():
        return decode_layout(path.read_bytes(), reference)
    if reference.startswith("vllm-"):
        try:
            return load_shipped(reference)
        except LayoutError:
            pass  # maybe a git ref that happens to start with "vllm-"
    ref, _, ref_path = reference.partition(":")
    if not ref:
        raise LayoutError(f"{reference!r} names no file, release or git ref")
    try:
        data = _git_show(ref, ref_path or DEFAULT_REF_PATH, cwd)
    except LayoutError as exc:
        raise LayoutError(f"{reference!r} is not a layout file, a shipped release "
                          f"({', '.join(shipped_names())}), 'current' or a git ref: {exc}") from None
    return decode_layout(data, reference)
