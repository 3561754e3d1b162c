"""LocatedFinding transcripts: the offending message and the frames around it, as hex and decoded.

Entries use the conformance transcript format (:mod:`ecp.conformance.transcript`):
``-->`` is a message toward the engine, ``<--`` one toward the frontend; the channel
names the engine rank and socket. One file per violation goes to ``--transcripts DIR``
(at most ``--max-transcripts``; later ones are only counted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ecp.conformance.transcript import Entry, hex_preview, render
from ecp.spec import CLAUSES, ProtocolError
from ecp.spec.frames import decode_frames

from .observed import TO_ENGINE, Observed
from .validator import SPEC_DIRECTION, Finding

MAX_DECODED_CHARS = 2000


@dataclass
class LocatedFinding:
    """A finding with where it happened and the messages around it."""

    index: int
    finding: Finding
    msg: Observed | None  # None: found when an engine left or the session ended
    before: list[Observed] = field(default_factory=list)
    after: list[Observed] = field(default_factory=list)

    @property
    def request_id(self) -> str | None:
        return self.finding.request_id

    def summary(self) -> dict:
        out = {"index": self.index, **self.finding.to_dict()}
        if self.msg is not None:
            out.update(seq=self.msg.seq, t=round(self.msg.t, 6), direction=self.msg.direction,
                       rank=self.msg.rank, socket=self.msg.socket, client=self.msg.client)
        return out

    def entries(self) -> list[Entry]:
        out = [entry(m) for m in self.before]
        if self.msg is not None:
            out.append(entry(self.msg))
            out.append(Entry(self.msg.t, "note", "", [], f"^ {self.finding.clause}: {self.finding.message}"))
        out += [entry(m) for m in self.after]
        return out

    def text(self) -> str:
        f = self.finding
        clause = CLAUSES.get(f.clause)
        head = [f"violation {self.index}: [{f.clause} {f.level}] {clause.title if clause else ''}".rstrip(),
                f"  {f.message}"]
        if self.msg is not None:
            head.append(f"  seq {self.msg.seq}, {self.msg.direction}, {self.msg.channel}, t={self.msg.t:.6f}s")
        if f.request_id:
            head.append(f"  request id: {f.request_id}")
        if clause:
            head.append(f"  clause: {clause.text}")
        head.append("  (--> toward the engine, <-- toward the frontend)")
        return "\n".join(head) + "\n\n" + render(self.entries()) + "\n"


def decoded_text(msg: Observed) -> str:
    """The message decoded (named JSON view), or why it does not decode."""
    direction = SPEC_DIRECTION.get((msg.socket, msg.direction))
    if msg.socket == "coordinator_input" and (msg.direction != TO_ENGINE or msg.frames == (b"READY",)):
        return "coordinator gate READY" if msg.frames == (b"READY",) else "ZeroMQ subscription / XSUB frame"
    if direction is None:
        return ""
    try:
        d = decode_frames(msg.frames, direction)
        text = f"{d.kind} " + json.dumps(d.named_value, ensure_ascii=False, default=str)
    except ProtocolError as exc:
        text = f"<undecodable: {exc}>"
    return text if len(text) <= MAX_DECODED_CHARS else text[:MAX_DECODED_CHARS] + "…"


def entry(msg: Observed) -> Entry:
    return Entry(msg.t, "sent" if msg.direction == TO_ENGINE else "recv", f"#{msg.seq} {msg.channel}",
                 [hex_preview(f) for f in msg.frames], decoded_text(msg))


class TranscriptWriter:
    def __init__(self, directory: Path | str, limit: int = 1000) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit = limit
        self.written = 0
        self.skipped = 0

    def write(self, v: LocatedFinding) -> Path | None:
        if self.written >= self.limit:
            self.skipped += 1
            return None
        path = self.directory / f"{v.index:05d}-{v.finding.clause}.txt"
        path.write_text(v.text(), encoding="utf-8")
        self.written += 1
        return path
