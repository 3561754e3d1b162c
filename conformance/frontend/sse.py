"""Streaming HTTP responses (server-sent events) on plain asyncio connections.

Each :class:`SseStream` is one HTTP/1.1 connection carrying one streaming
POST. The harness opens thousands of them at once (the burst-abort cases) and
must drop them all in one instant; httpx's connection pool costs about 20 ms
per concurrent stream at that scale (measured: 2,000 streams took 39 s to
open, against 7.5 s here, on the same loaded 2-core machine), and an httpx response cannot be aborted
synchronously. So streams keep their own asyncio sockets; the HTTP/1.1 on them
is h11's (request, status line, headers, chunked / length / close-delimited
body), and the events are read by the one SSE reader, :class:`ecp.spec.sse.SseDecoder`.
Plain requests stay on httpx (:mod:`.http_driver`).
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

import h11

from ecp.spec.sse import DONE as DONE_BYTES
from ecp.spec.sse import SseDecoder

from ..outcomes import CaseTimeout, CaseFailure

DONE = DONE_BYTES.decode()
READ_BYTES = 65536
#: How much of a body a transcript line shows.
BODY_HEAD = 200

#: ``log(direction, text)``: one HTTP line into the case's transcript ("sent": to the frontend).
HttpLog = Callable[[str, str], None]


def body_head(text: str, limit: int = BODY_HEAD) -> str:
    """The start of a body, on one line, for a transcript."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


class HttpProtocolError(CaseFailure):
    """The frontend's HTTP response could not be parsed, or the connection broke mid-body:
    the frontend's doing, so a case that does not catch it FAILs with it as evidence."""


class HttpTimeout(CaseTimeout):
    """The frontend sent no response head within the time allowed."""


@dataclass
class StreamEnd:
    """How a stream ended.

    Attributes:
        events: every JSON event received (``data: {...}``).
        done: ``data: [DONE]`` was received.
        transport_error: the connection failed or was cut before the end of the body.
        timed_out: nothing ended it within the time allowed.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    transport_error: str | None = None
    timed_out: bool = False

    @property
    def finish_reasons(self) -> list[str]:
        return [c.get("finish_reason") for e in self.events for c in e.get("choices") or []
                if c.get("finish_reason")]

    @property
    def error_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if "error" in e]

    @property
    def ended_with_error(self) -> bool:
        """An error event, finish_reason ``error``, or a body cut before ``[DONE]``."""
        return bool(self.error_events) or "error" in self.finish_reasons or (
            not self.done and not self.timed_out)


class SseStream:
    """One open streaming response; read events from it, or drop it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: h11.Connection,
                 status_code: int, headers: dict[str, str], path: str = "", log: HttpLog | None = None) -> None:
        self._reader = reader
        self.path = path
        self._log = log
        self._writer = writer
        self._conn = conn
        self.status_code = status_code
        self.headers = headers
        self.events: list[dict[str, Any]] = []
        self.done = False
        self.closed = False
        self.text = ""   # the body of a non-200 answer
        self._decoder = SseDecoder()
        self._ready: list[bytes] = []   # event payloads decoded but not yet returned
        self._eof = False

    @classmethod
    async def open(cls, host: str, port: int, path: str, body: dict[str, Any],
                   headers: dict[str, str] | None = None, timeout: float = 10.0,
                   log: HttpLog | None = None) -> "SseStream":
        """POST ``body`` as JSON and return once the status line and headers arrived; ``log`` gets
        the request, the answer's head and, later, how the stream ended (the case's transcript).

        Raises :class:`HttpProtocolError` (a FAIL) when the answer is not HTTP or the
        connection closes first, :class:`HttpTimeout` when no head arrives in ``timeout``.
        """
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            raise HttpTimeout(f"POST {path}: no connection within {timeout:g} s") from None
        except OSError as exc:
            raise HttpProtocolError(f"POST {path}: the frontend refused the connection ({exc})") from None
        conn = h11.Connection(h11.CLIENT)
        payload = json.dumps(body).encode()
        if log is not None:
            shown = "".join(f" {k}: {v};" for k, v in (headers or {}).items())
            log("sent", f"POST {path}{shown} {body_head(payload.decode())}")
        fields = [("Host", f"{host}:{port}"), ("Content-Type", "application/json"),
                  ("Accept", "text/event-stream"), ("Content-Length", str(len(payload)))]
        fields += list((headers or {}).items())
        writer.write(conn.send(h11.Request(method="POST", target=path, headers=fields))
                     + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage()))
        try:
            head = await asyncio.wait_for(cls._next(reader, conn), timeout)
            if not isinstance(head, h11.Response):
                raise HttpProtocolError(f"POST {path}: the connection closed without an HTTP response")
        except (asyncio.TimeoutError, TimeoutError):
            writer.transport.abort()
            raise HttpTimeout(f"POST {path}: no HTTP response head within {timeout:g} s") from None
        except HttpProtocolError as exc:
            writer.transport.abort()
            raise HttpProtocolError(f"POST {path}: {exc}") from None
        except BaseException:
            writer.transport.abort()
            raise
        names = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
        stream = cls(reader, writer, conn, head.status_code, names, path, log)
        if head.status_code != 200:
            try:
                body_bytes = await asyncio.wait_for(stream._read_all(), timeout)
            except (asyncio.TimeoutError, TimeoutError):
                stream.drop()
                raise HttpTimeout(f"POST {path}: HTTP {head.status_code} with no end of body "
                                  f"within {timeout:g} s") from None
            stream.text = body_bytes.decode("utf-8", "replace")
        if log is not None:
            log("recv", f"HTTP {head.status_code} POST {path}"
                        + (" (event stream follows)" if head.status_code == 200 else f": {body_head(stream.text)}"))
        return stream

    @staticmethod
    async def _next(reader: asyncio.StreamReader, conn: h11.Connection) -> Any:
        """h11's next event, reading from the socket while it needs data."""
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise HttpProtocolError(f"not a valid HTTP response: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await reader.read(READ_BYTES)
            except ConnectionError as exc:
                raise HttpProtocolError(f"connection cut: {exc!r}") from None
            conn.receive_data(data)   # b"" is the end of the connection

    @property
    def response_id(self) -> str | None:
        for event in self.events:
            if isinstance(event.get("id"), str):
                return event["id"]
        return None

    # -- body ----------------------------------------------------------------------
    async def _next_body_bytes(self) -> bytes | None:
        """The next piece of the body (de-chunked by h11), or ``None`` at its end."""
        while not self._eof:
            event = await self._next(self._reader, self._conn)
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                self._eof = True
            else:   # PAUSED: nothing follows the end of this response on this connection
                self._eof = True
        return None

    async def _read_all(self) -> bytes:
        parts = []
        while (piece := await self._next_body_bytes()) is not None:
            parts.append(piece)
        return b"".join(parts)

    async def next_event(self, timeout: float) -> dict[str, Any] | str | None:
        """The next JSON event, ``"[DONE]"``, or ``None`` at the end of the body."""
        async def read() -> dict[str, Any] | str | None:
            while not self._ready:
                piece = await self._next_body_bytes()
                if piece is None:
                    return None
                self._ready.extend(self._decoder.data(piece))
            data = self._ready.pop(0)
            if data == DONE_BYTES:
                self.done = True
                return DONE
            try:
                event = json.loads(data)
            except ValueError:
                event = {"unparsable": data.decode("utf-8", "replace")}
            if not isinstance(event, dict):
                event = {"unparsable": data.decode("utf-8", "replace")}
            self.events.append(event)
            return event

        return await asyncio.wait_for(read(), timeout)

    async def first_token(self, timeout: float) -> dict[str, Any]:
        """Read until an event with a choice (the first token) or an error; raise if the stream ends."""
        while True:
            event = await self.next_event(timeout)
            if event is None or event == DONE:
                raise EOFError("stream ended before its first token")
            if event.get("choices") or "error" in event:
                return event

    async def read_to_end(self, timeout: float) -> StreamEnd:
        """Read every remaining event until ``[DONE]``, the end of the body, or ``timeout``; then close."""
        end = StreamEnd()

        async def drain() -> None:
            while True:
                event = await self.next_event(timeout)
                if event is None or event == DONE:
                    return

        try:
            await asyncio.wait_for(drain(), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            end.timed_out = True
        except (HttpProtocolError, OSError) as exc:
            end.transport_error = str(exc)
        end.events = list(self.events)
        end.done = self.done
        self.drop()
        if self._log is not None:
            how = ("timed out" if end.timed_out else f"cut ({end.transport_error})" if end.transport_error
                   else "[DONE]" if end.done else "body ended without [DONE]")
            self._log("recv", f"POST {self.path} stream {self.response_id or '(no id)'} ended: {how}; "
                              f"{len(end.events)} events, finish reasons {end.finish_reasons}"
                              + (f", error {body_head(json.dumps(end.error_events[0]))}" if end.error_events else ""))
        return end

    def drop(self) -> None:
        """Close the connection at once without reading on (a departing client).

        The socket is shut down here, synchronously: ``transport.abort()``
        alone would only close it on the next loop turn.
        """
        if not self.closed:
            self.closed = True
            sock = self._writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._writer.transport.abort()


def drop_all(streams: list[SseStream]) -> None:
    """Drop every stream in one tight pass (one syscall each, no await), as a crowd
    of departing clients would: the frontend sees them leave in the same instant."""
    live = [s for s in streams if not s.closed]
    for stream in live:
        stream.drop()
    logs = {id(s._log): s for s in live if s._log is not None}
    for stream in logs.values():
        ids = [s.response_id or "(no id)" for s in live if s._log is stream._log]
        stream._log("sent", f"dropped {len(ids)} stream(s) (connections closed by the harness): "
                            f"{body_head(' '.join(ids))}")
