"""A minimal HTTP/1.1 streaming client for ``ecp bench serve`` that stamps SSE events on arrival.

A load generator that parses each event in a coroutine measures its own
lag: under a few hundred streams on a small machine, events pile up in the
socket while it catches up, then arrive "at once" (ITL ≈ 0) and late (TTFT
too high). Here the parsing runs in the transport's ``data_received``
callback and every event gets the time of the read that delivered it, so
the figures describe the server, as ``vllm-rs bench serve``'s do.

One request per connection (``Connection: close``); ``http://`` only.
Responses may be chunked, have a ``Content-Length`` or end at close.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable
from urllib.parse import urlsplit

from ecp.spec.sse import SseDecoder


class BenchHTTPError(Exception):
    """The server's answer could not be read as an HTTP/1.1 response."""


class _Stream(asyncio.Protocol):
    """Reads one response; calls ``on_event(payload_bytes, t)`` for every ``data:`` event."""

    def __init__(self, on_event: Callable[[bytes, float], None], done: asyncio.Future) -> None:
        self.on_event = on_event
        self.done = done
        self.head = bytearray()
        self.status: int | None = None
        self.mode = ""           # "chunked" | "length" | "close"
        self.remaining = 0       # body bytes left ("length") or in the current chunk ("chunked")
        self.raw = bytearray()   # undecoded chunked framing
        self.events = SseDecoder()  # the de-chunked body, read into events
        self.error_body = bytearray()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        try:
            if self.status is None:
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return
                self._parse_head(bytes(self.head[:end]))
                data = bytes(self.head[end + 4:])
                self.head.clear()
            self._feed(data, now)
        except BenchHTTPError as exc:
            if not self.done.done():
                self.done.set_exception(exc)

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise BenchHTTPError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.mode = "close"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self.mode = "chunked"
            elif name == b"content-length" and self.mode != "chunked":
                self.mode, self.remaining = "length", int(value)

    def _feed(self, data: bytes, now: float) -> None:
        if self.mode == "chunked":
            self.raw += data
            while True:
                if self.remaining == 0:
                    eol = self.raw.find(b"\r\n")
                    if eol < 0:
                        return
                    size = int(bytes(self.raw[:eol]).split(b";")[0] or b"0", 16)
                    if size == 0:
                        self._body(b"", now, last=True)
                        return
                    del self.raw[:eol + 2]
                    self.remaining = size + 2  # the chunk and its CRLF
                take = min(self.remaining, len(self.raw))
                if take == 0:
                    return
                data_left = self.remaining - 2  # of this chunk's payload, before its CRLF
                piece = bytes(self.raw[:take])
                del self.raw[:take]
                self.remaining -= take
                if data_left > 0:
                    self._body(piece[:data_left], now, last=False)
        elif self.mode == "length":
            data = data[:self.remaining]
            self.remaining -= len(data)
            self._body(data, now, last=self.remaining == 0)
        else:
            self._body(data, now, last=False)

    def _body(self, piece: bytes, now: float, last: bool) -> None:
        if self.status != 200:
            self.error_body += piece
        else:
            for data in self.events.data(piece):
                self.on_event(data, now)
        if last and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            if self.mode == "close" or self.status not in (None, 200):
                self.done.set_result(None)
            else:
                self.done.set_exception(BenchHTTPError(f"connection closed mid-response ({exc or 'EOF'})"))


async def stream_post(url: str, path: str, body: bytes, on_event: Callable[[bytes, float], None],
                      timeout: float) -> tuple[int, bytes]:
    """POST ``body`` (JSON) and feed every SSE ``data:`` payload to ``on_event`` with its arrival
    time (``time.perf_counter()``). Returns the status and, for a non-200 answer, its body."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise BenchHTTPError(f"only http://HOST:PORT URLs are supported, got {url!r}")
    host, port = parts.hostname, parts.port or 80
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    proto = _Stream(on_event, done)
    transport, _ = await asyncio.wait_for(loop.create_connection(lambda: proto, host, port), timeout)
    try:
        transport.write(b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                        b"Accept: text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                        % ((parts.path.rstrip("/") + path).encode(), host.encode(), port, len(body), body))
        await asyncio.wait_for(done, timeout)
    finally:
        transport.close()
    return proto.status or 0, bytes(proto.error_body)
