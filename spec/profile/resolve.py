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
    from ..layout.vllm import SourceError, extract

    try:
        return build_profile(extract(path).layout)
    except SourceError as exc:
        raise LayoutError(f"{reference}: {exc}") from None


def resolve_profile(reference: str, cwd: Path | None = None) -> Profile:
    """The profile a reference names (see the module docstring)."""
    if _RELEASE.fullmatch(reference):
        return shipped_profile(reference)
    path = ((Path.cwd() if cwd is None else cwd) / reference).resolve()
    if path.exists():
        return _from_path(str(path), path.stat().st_mtime_ns, reference)
    raise LayoutError(f"{reference!r} is neither a shipped release ({', '.join(shipped_releases())}), "
                      f"a layout file nor a vLLM checkout or wheel")
