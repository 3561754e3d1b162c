"""Reproducer files: a minimal failing session, what it broke, and the frames both ways.

One JSON document per finding; ``ecp conformance replay FILE -- COMMAND`` plays its session again.
The frames (hex and decoded, as the harness recorded them) and the end of the peer's output are
evidence for a reader; only the session is replayed.

A reproducer records the release it was found with: ``vllm``, the ``--vllm`` the exploration was
given (a shipped release, a layout file, a vLLM checkout or wheel), and ``release``, the name that
layout states. Its replay speaks that release unless told another (:func:`release_of_file`); a
file written before releases were recorded was found with vLLM 0.33, the only one the explorer
spoke then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .session import ROLES, Session

FORMAT = "ecp-explore-reproducer/1"
#: the release of a reproducer that records none: the explorer spoke vLLM 0.33 only until it recorded one
UNRECORDED_RELEASE = "0.33"


class ReproducerError(ValueError):
    """The file is not a reproducer this version can replay (its message says why)."""


class UnknownRelease(ReproducerError):
    """The release a reproducer was found with names no release this version can resolve (a layout
    file or vLLM tree that is not there, a release not shipped): pass ``--vllm`` to replay it as one."""


def write(path: Path, *, role: str, session: Session, clause: str, message: str, command: list[str],
          transport: str, engine_count: int, entries: list[Any], recurrence: dict[str, Any],
          peer_log: str = "", engine_lacks: tuple[str, ...] = (), vllm: str = UNRECORDED_RELEASE,
          release: str | None = None) -> Path:
    doc = {
        "format": FORMAT, "role": role, "clause": clause, "message": message,
        # the release the session was drawn for and judged by: its replay speaks it too
        "vllm": vllm, "release": release or vllm,
        "seed": session.seed, "command": command, "transport": transport, "engine_count": engine_count,
        # what the exploration was told the engine lacks: its replay must be told the same
        "engine_lacks": list(engine_lacks),
        "recurrence": recurrence, "session": session.to_dict(),
        "frames": [e.to_dict() for e in entries],
        "peer_log_tail": peer_log,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=repr) + "\n")
    return path


def read(path: Path) -> dict[str, Any]:
    """The reproducer at ``path`` with ``session`` as a :class:`Session`."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ReproducerError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReproducerError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ReproducerError(f"{path} is not a reproducer (format {FORMAT!r} expected)")
    if doc.get("role") not in ROLES:
        raise ReproducerError(f"{path} is for the {doc.get('role')!r} role, not one of {ROLES}")
    try:
        doc["session"] = Session.from_dict({"role": doc["role"], **doc["session"]})
    except (KeyError, ValueError) as exc:
        raise ReproducerError(f"{path}: {exc}") from None
    if not isinstance(doc.get("vllm", UNRECORDED_RELEASE), str):
        raise ReproducerError(f"{path}: vllm must be a string (a release or a path), got {doc['vllm']!r}")
    return doc


def release_of_file(doc: dict[str, Any], path: Path, override: str | None = None) -> Any:
    """The profile (:class:`ecp.spec.profile.Profile`) a reproducer is replayed as: ``override`` (a
    replay's ``--vllm``) or the release the file records. :class:`UnknownRelease` when the file's
    cannot be resolved; ``LayoutError`` when ``override`` cannot (a usage error of the caller)."""
    from ecp.spec.layout.model import LayoutError
    from ecp.spec.profile import resolve_profile

    if override is not None:
        return resolve_profile(override)
    recorded = doc.get("vllm", UNRECORDED_RELEASE)
    try:
        return resolve_profile(recorded)
    except LayoutError as exc:
        named = doc.get("release") or recorded
        raise UnknownRelease(f"{path} was found with vLLM {named} (--vllm {recorded}), which cannot be "
                             f"resolved here: {exc}; pass --vllm RELEASE|PATH to replay it as another") from None
