"""The ``--record`` capture: every relayed message, in order, re-checkable offline.

The file is the plain capture format ``ecp decode --file`` already reads (one
message per line, frames as hex separated by spaces, ``#`` lines ignored),
with a ``#@ {json}`` line before each message saying where it was seen::

    # ecp monitor capture v1
    #@ {"seq": 1, "t": 0.0012, "dir": "to_frontend", "rank": 0, "socket": "handshake", "client": null}
    83a6737461747573a548454c4c4fa56c6f63616cc2a8686561646c657373c3

An empty frame is written ``0x`` (``ecp decode`` reads it as an empty frame).
Connection events replay needs (an engine leaving) are ``#@`` lines with an
``"event"`` key. ZeroMQ control frames that are not protocol messages (XSUB subscriptions, the
coordinator's ``READY`` gate) carry their frames in the ``#@`` line as
``"raw": [hex, …]`` and have no message line, so ``ecp decode --file`` skips
them and ``ecp monitor --replay`` still sees them.
"""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass
from typing import IO, Iterator, Union

from .observed import Observed

HEADER = "# ecp monitor capture v1: one message per line (hex frames); '#@' lines say where it was seen"
META_PREFIX = "#@ "


@dataclass(frozen=True)
class CaptureEvent:
    """A recorded connection event: ``engine_gone`` of ``rank`` after message ``seq``."""

    event: str
    seq: int
    t: float
    rank: int | None


class CaptureError(Exception):
    """A capture file that ``--replay`` cannot read (not a monitor capture, or damaged)."""


def _hex(frame: bytes) -> str:
    return frame.hex() or "0x"


class CaptureWriter:
    """Appends observed messages to a capture file. Not thread-safe: one writer thread."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._f: IO[str] = open(self.path, "w", encoding="ascii", buffering=1 << 20)
        self._f.write(HEADER + "\n")

    def write(self, msg: Observed, control: bool) -> None:
        meta = msg.meta()
        if control:
            meta["raw"] = [_hex(f) for f in msg.frames]
        self._f.write(META_PREFIX + json.dumps(meta, separators=(", ", ": ")) + "\n")
        if not control:
            self._f.write(" ".join(_hex(f) for f in msg.frames) + "\n")

    def write_event(self, event: str, seq: int, t: float, rank: int | None) -> None:
        """A connection event replay must see too (``engine_gone``)."""
        meta = {"event": event, "seq": seq, "t": round(t, 6), "rank": rank}
        self._f.write(META_PREFIX + json.dumps(meta, separators=(", ", ": ")) + "\n")

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


def _frames(tokens: list[str], where: str) -> tuple[bytes, ...]:
    try:
        return tuple(bytes.fromhex(t[2:] if t.startswith("0x") else t) for t in tokens)
    except ValueError:
        raise CaptureError(f"{where}: not hex frames") from None


def read_capture(path: Path | str) -> Iterator[Union[Observed, CaptureEvent]]:
    """Yield the messages (and connection events) of a capture in recorded order.
    Raises :class:`CaptureError`."""
    path = Path(path)
    try:
        f = open(path, encoding="ascii")
    except (OSError, UnicodeError) as exc:
        raise CaptureError(f"cannot read {path}: {exc}") from None
    with f:
        first = f.readline()
        if not first.startswith("# ecp monitor capture v1"):
            raise CaptureError(f"{path} is not an ecp monitor capture (first line: {first[:60]!r})")
        meta = None
        for no, line in enumerate(f, 2):
            where = f"{path.name}:{no}"
            if line.startswith(META_PREFIX):
                if meta is not None:
                    raise CaptureError(f"{where}: a '#@' line without its message line before it")
                try:
                    meta = json.loads(line[len(META_PREFIX):])
                    if "event" in meta:
                        yield CaptureEvent(str(meta["event"]), int(meta["seq"]), float(meta["t"]), meta["rank"])
                        meta = None
                    elif "raw" in meta:
                        yield _observed(meta, _frames(meta["raw"], where), where)
                        meta = None
                except (ValueError, KeyError, TypeError) as exc:
                    raise CaptureError(f"{where}: bad '#@' line: {exc}") from None
            elif line.startswith("#") or not line.strip():
                continue
            else:
                if meta is None:
                    raise CaptureError(f"{where}: a message line without its '#@' line")
                yield _observed(meta, _frames(line.split(), where), where)
                meta = None
        if meta is not None:
            raise CaptureError(f"{path.name}: ends after a '#@' line (truncated capture)")


def _observed(meta: dict, frames: tuple[bytes, ...], where: str) -> Observed:
    try:
        return Observed(int(meta["seq"]), float(meta["t"]), str(meta["dir"]), meta["rank"],
                        str(meta["socket"]), meta.get("client"), frames)
    except (KeyError, TypeError, ValueError) as exc:
        raise CaptureError(f"{where}: bad '#@' line: {exc!r}") from None
