"""Reproducer files: a minimal failing session, what it broke, and the frames both ways.

One JSON document per finding; ``ecp conformance replay FILE -- COMMAND`` plays its session again.
The frames (hex and decoded, as the harness recorded them) and the end of the peer's output are
evidence for a reader; only the session is replayed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .session import ROLES, Session

FORMAT = "ecp-explore-reproducer/1"


class ReproducerError(ValueError):
    """The file is not a reproducer this version can replay (its message says why)."""


def write(path: Path, *, role: str, session: Session, clause: str, message: str, command: list[str],
          transport: str, engine_count: int, entries: list[Any], recurrence: dict[str, Any],
          peer_log: str = "", engine_lacks: tuple[str, ...] = ()) -> Path:
    doc = {
        "format": FORMAT, "role": role, "clause": clause, "message": message,
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
    return doc
