"""The HTTP server's accepted connections have TCP_NODELAY (else Nagle + the client's delayed ACK
add ~40 ms to every keep-alive response after the first)."""

from __future__ import annotations

import asyncio
import importlib.util
import socket

import pytest

from ecp.reference.frontend.http_server import resolve_http, start_http

from .harness import run


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


IMPLS = ["h11"] + (["httptools"] if importlib.util.find_spec("httptools") else [])


@pytest.mark.parametrize("impl", IMPLS)
def test_accepted_http_connections_disable_nagle(impl):
    async def body():
        http = await start_http(_app, http=impl)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", http.port), 10)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200")
            conns = list(http.server.server_state.connections)
            assert len(conns) == 1
            sock = conns[0].transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            # the protocol class says which HTTP implementation serves it (under the connection limits)
            base = type(conns[0]).__mro__[1]
            assert base.__module__.endswith(f"{impl}_impl") and type(conns[0]).__name__ == f"Limited{base.__name__}"
            writer.close()
        finally:
            await http.stop()
    run(body)


def test_http_implementation_choice():
    have = importlib.util.find_spec("httptools") is not None
    assert resolve_http("auto") == ("httptools" if have else "h11")
    assert resolve_http("h11") == "h11"
    with pytest.raises(ValueError, match="unknown HTTP implementation"):
        resolve_http("h2")
    if have:
        assert resolve_http("httptools") == "httptools"
    else:
        with pytest.raises(ValueError, match="needs the httptools package"):
            resolve_http("httptools")
