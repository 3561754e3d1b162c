"""A minimal HTTP/1.1 streaming client for ``ecp bench serve`` that stamps SSE events on arrival.

A load generator that parses each event in a coroutine measures its own
lag: under a few hundred streams on a small machine, events pile up in the
socket while it catches up, then arrive "at once" (ITL ≈ 0) and late (TTFT
too high). Here the parsing runs in the transport's ``data_received``
callback and every event gets the time of the read that delivered it, so
the figures describe the server, as ``vllm-rs bench serve``'s do.

Connections are kept alive and reused, one request at a time
(:class:`Connection`), as HTTP benchmark clients such as ``vllm-rs bench
serve`` do: a fresh TCP connection per request would put the connect and the
server's accept into every TTFT. ``http://`` only. Responses may be chunked,
have a ``Content-Length`` or end at close.
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
    """One HTTP/1.1 connection; reads one response at a time (:meth:`expect`) and calls
    ``on_event(payload_bytes, t)`` for every ``data:`` event of it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.on_event: Callable[[bytes, float], None] = lambda data, t: None
        self.done: asyncio.Future | None = None
        self._reset()

    def _reset(self) -> None:
        self.head = bytearray()
        self.status: int | None = None
        self.mode = ""           # "chunked" | "length" | "close"
        self.keep_alive = True   # False once the server said Connection: close
        self.remaining = 0       # body bytes left ("length") or in the current chunk ("chunked")
        self.raw = bytearray()   # undecoded chunked framing
        self.events = SseDecoder()  # the de-chunked body, read into events
        self.error_body = bytearray()

    def expect(self, on_event: Callable[[bytes, float], None], done: asyncio.Future) -> None:
        """Read the next response into ``on_event``; ``done`` resolves at its end."""
        self._reset()
        self.on_event, self.done = on_event, done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.done is None or self.done.done():
            return  # between responses: the CRLF that ends a chunked body's (empty) trailer
        try:
            if self.status is None:
                self.head += data
                # a response may be preceded by the last response's trailing CRLF (RFC 9112 2.2)
                while self.head[:2] == b"\r\n":
                    del self.head[:2]
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return
                self._parse_head(bytes(self.head[:end]))
                data = bytes(self.head[end + 4:])
                self.head.clear()
            self._feed(data, now)
        except BenchHTTPError as exc:
            self.keep_alive = False
            if not self.done.done():
                self.done.set_exception(exc)

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise BenchHTTPError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        self.mode = "close"
        self.keep_alive = parts[0] != b"HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self.mode = "chunked"
            elif name == b"content-length" and self.mode != "chunked":
                self.mode, self.remaining = "length", int(value)
            elif name == b"connection" and b"close" in value:
                self.keep_alive = False
        if self.mode == "close":
            self.keep_alive = False
        elif self.mode == "length" and self.remaining == 0:
            self._body(b"", 0.0, last=True)

    def _feed(self, data: bytes, now: float) -> None:
        if self.mode == "chunked":
            self.raw += data
            while True:
                if self.remaining == 0:
                    eol = self.raw.find(b"\r\n")
                    if eol < 0:
                        return
                    try:
                        size = int(bytes(self.raw[:eol]).split(b";")[0] or b"0", 16)
                    except ValueError:
                        raise BenchHTTPError(f"bad chunk size line {bytes(self.raw[:eol])[:40]!r}") from None
                    if size == 0:  # the (empty) trailer's CRLF may follow in a later read
                        self.raw.clear()
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
        if last and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            if self.mode == "close" or (self.status not in (None, 200) and self.mode != "length"):
                self.done.set_result(None)
            else:
                self.done.set_exception(BenchHTTPError(f"connection closed mid-response ({exc or 'EOF'})"))


class Connection:
    """A kept-alive HTTP/1.1 connection to ``url``'s host, opened on first use and
    reopened when the server closed it. One request at a time; :meth:`close` when done."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise BenchHTTPError(f"only http://HOST:PORT URLs are supported, got {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self._proto: _Stream | None = None
        #: TCP connections opened so far
        self.connects = 0

    async def _connected(self, timeout: float) -> _Stream:
        if self._proto is None or self._proto.closed or not self._proto.keep_alive:
            self.close()
            loop = asyncio.get_running_loop()
            _, proto = await asyncio.wait_for(loop.create_connection(_Stream, self.host, self.port), timeout)
            self._proto = proto
            self.connects += 1
        return self._proto

    async def stream_post(self, path: str, body: bytes, on_event: Callable[[bytes, float], None],
                          timeout: float) -> tuple[int, bytes]:
        """POST ``body`` (JSON) and feed every SSE ``data:`` payload to ``on_event`` with its
        arrival time (``time.perf_counter()``). Returns the status and, for a non-200
        answer, its body. The connection stays open for the next request unless the
        response or an error ended it."""
        proto = await self._connected(timeout)
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        proto.expect(on_event, done)
        assert proto.transport is not None
        proto.transport.write(b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                              b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                              % ((self.prefix + path).encode(), self.host.encode(), self.port, len(body), body))
        try:
            await asyncio.wait_for(done, timeout)
        except BaseException:
            self.close()  # a response left half-read cannot be followed on this connection
            raise
        return proto.status or 0, bytes(proto.error_body)

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


async def stream_post(url: str, path: str, body: bytes, on_event: Callable[[bytes, float], None],
                      timeout: float) -> tuple[int, bytes]:
    """One request on a connection of its own (see :meth:`Connection.stream_post`)."""
    conn = Connection(url)
    try:
        return await conn.stream_post(path, body, on_event, timeout)
    finally:
        conn.close()
