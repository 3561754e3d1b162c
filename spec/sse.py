"""Server-sent events (``text/event-stream``), read sans-IO: the one SSE reader of the project.

A frontend streams each request's outputs to its HTTP client as SSE (OpenAI's
``stream: true``): one ``data: {json}`` event per delta, ``data: [DONE]`` last.
The reference load generator, the conformance harness and the benchmarks all
read those streams through :class:`SseDecoder`; none splits lines by hand.

Framing follows the WHATWG HTML "event stream interpretation": lines end with
CRLF, LF or CR; a blank line dispatches the event; ``data`` fields of one event
are joined with LF; one space after the colon is dropped; lines starting with
``:`` are comments; other fields (``event``, ``id``, ``retry``) are kept on the
event but carry nothing an OpenAI stream needs.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The payload of the event that ends an OpenAI stream.
DONE = b"[DONE]"


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: its ``data`` (LF-joined ``data`` lines) and ``event`` name."""

    data: bytes
    event: bytes = b"message"


class SseDecoder:
    """Feed body bytes as they arrive; get back every event they complete.

    Bytes may be split anywhere (inside a line, between CR and LF); an event is
    returned once its terminating blank line arrived. Events without a ``data``
    field are not dispatched, as the standard says.
    """

    __slots__ = ("_buffer", "_data", "_event", "_pending_cr")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._event = b""
        self._pending_cr = False   # the last byte fed was a CR: an LF right after it ends no line

    def feed(self, data: bytes) -> list[SseEvent]:
        """Take the next piece of the body; return the events it completed, in order."""
        if self._pending_cr and data[:1] == b"\n":
            data = data[1:]
        self._pending_cr = data[-1:] == b"\r"
        self._buffer += data
        events: list[SseEvent] = []
        while True:
            cr, lf = self._buffer.find(b"\r"), self._buffer.find(b"\n")
            if cr < 0 and lf < 0:
                return events
            end = lf if cr < 0 or (0 <= lf < cr) else cr
            line = bytes(self._buffer[:end])
            skip = 2 if self._buffer[end:end + 2] == b"\r\n" else 1
            del self._buffer[:end + skip]
            event = self._line(line)
            if event is not None:
                events.append(event)

    def data(self, data: bytes) -> list[bytes]:
        """:meth:`feed`, keeping only each event's ``data`` (what an OpenAI stream carries)."""
        return [event.data for event in self.feed(data)]

    def _line(self, line: bytes) -> SseEvent | None:
        if not line:
            if not self._data:
                self._event = b""
                return None
            event = SseEvent(b"\n".join(self._data), self._event or b"message")
            self._data, self._event = [], b""
            return event
        if line.startswith(b":"):
            return None
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        return None
