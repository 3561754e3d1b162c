"""The HTTP server's accepted connections have TCP_NODELAY (else Nagle + the client's delayed ACK
add ~40 ms to every keep-alive response after the first)."""

from __future__ import annotations

import asyncio
import socket

from ecp.reference.frontend.server import start_http

from .harness import run


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_accepted_http_connections_disable_nagle():
    async def body():
        http = await start_http(_app)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", http.port), 10)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200")
            conns = list(http.server.server_state.connections)
            assert len(conns) == 1
            sock = conns[0].transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            writer.close()
        finally:
            await http.stop()
    run(body)
