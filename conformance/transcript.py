"""Per-case transcripts: every frame both ways, as hex and decoded, and every HTTP exchange.

The harness records each multipart message it sends or receives together
with the channel (``handshake``, ``input[0]``, ``output[1]`` …) and a decoded
view produced by :mod:`ecp.spec` (or the decode error, with its clause). In
the frontend role it also records every HTTP request it sends the frontend
and every answer (channel ``http``: method, path, status, the head of the
body), in the same time order as the frames. A failing case's transcript
goes into the reports so a peer's author can see exactly what happened.

Arrows are from the harness's side: ``-->`` is what the harness sent (to the
engine under test; in the frontend role, an HTTP request to the frontend or a
frame one of its scripted engines sent it), ``<--`` what it received, ``###``
a note of the harness.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

MAX_HEX_BYTES = 512
#: The channel of HTTP exchanges (no frames: one line each way).
HTTP_CHANNEL = "http"
MAX_DECODED_CHARS = 2000


def hex_preview(frame: bytes, limit: int = MAX_HEX_BYTES) -> str:
    data = bytes(frame)
    if len(data) <= limit:
        return data.hex()
    return f"{data[:limit].hex()}… ({len(data)} bytes)"


@dataclass
class Entry:
    t: float
    direction: str  # "sent" (harness -> peer) | "recv" (peer -> harness) | "note"
    channel: str
    frames_hex: list[str]
    decoded: str

    def to_dict(self) -> dict[str, Any]:
        return {"t": round(self.t, 4), "direction": self.direction, "channel": self.channel,
                "frames_hex": self.frames_hex, "decoded": self.decoded}

    def render(self) -> str:
        arrow = {"sent": "-->", "recv": "<--", "note": "###"}[self.direction]
        head = f"{self.t:8.3f}s {arrow} {self.channel}"
        if self.direction == "note" or self.channel == HTTP_CHANNEL:
            return f"{head} {self.decoded}"
        lines = [head]
        for i, h in enumerate(self.frames_hex):
            lines.append(f"    frame {i}: {h}")
        lines.append(f"    decoded: {self.decoded}")
        return "\n".join(lines)


class Transcript:
    """An append-only log; :meth:`start_case` marks where a case begins."""

    def __init__(self, max_entries: int = 1000) -> None:
        self._t0 = time.monotonic()
        self.entries: list[Entry] = []
        self._case_start = 0
        self._max = max_entries
        #: called with ``(direction, channel, frames)`` for every frame set recorded, past the bound
        #: too (e.g. :class:`~ecp.conformance.release.ReleaseWatch`); it must not raise
        self.observer: Callable[[str, str, Sequence[bytes]], None] | None = None

    def record(self, direction: str, channel: str, frames: Sequence[bytes],
               decode: Callable[[], Any] | None = None) -> None:
        if self.observer is not None and frames:
            self.observer(direction, channel, frames)
        if len(self.entries) - self._case_start >= self._max:
            # bounded: a runaway peer must not exhaust memory or bloat the reports
            if len(self.entries) - self._case_start == self._max:
                self.note(f"transcript truncated after {self._max} entries")
            return
        if decode is None:
            decoded = ""
        else:
            try:
                decoded = _short(repr(decode()))
            except Exception as exc:  # noqa: BLE001 - the transcript shows whatever failed
                decoded = _short(f"<undecodable: {exc}>")
        self.entries.append(Entry(time.monotonic() - self._t0, direction, channel,
                                  [hex_preview(f) for f in frames], decoded))

    def http(self, direction: str, text: str) -> None:
        """One HTTP line: ``sent`` (a request to the frontend) or ``recv`` (its answer), bounded like
        every entry."""
        self.record(direction, HTTP_CHANNEL, (), lambda: _Raw(text))

    def note(self, text: str) -> None:
        self.entries.append(Entry(time.monotonic() - self._t0, "note", "", [], text))

    def start_case(self, case_id: str) -> None:
        self.case_id = case_id
        self._case_start = len(self.entries)
        self.note(f"case {case_id} starts")

    def include(self, entries: Sequence[Entry], why: str) -> None:
        """Copy earlier entries (e.g. the handshake of a shared engine) into the current case."""
        self.note(f"{why}: {len(entries)} earlier entries follow")
        self.entries.extend(entries)

    def mark(self) -> int:
        return len(self.entries)

    def since(self, mark: int) -> list[Entry]:
        return self.entries[mark:]

    def case_entries(self) -> list[Entry]:
        return self.entries[self._case_start:]


def render(entries: Sequence[Entry]) -> str:
    return "\n".join(e.render() for e in entries)


class _Raw(str):
    """Text shown as it is (``record`` shows ``repr`` of decoded values)."""

    def __repr__(self) -> str:
        return str(self)


def _short(text: str) -> str:
    return text if len(text) <= MAX_DECODED_CHARS else text[:MAX_DECODED_CHARS] + "…"
