"""Slow and numerous HTTP clients are bounded below the app (reference/frontend/http_limits.py):
a header deadline (408), a cap per client address and a cap in total (503), for both HTTP/1.1
implementations ecp serve runs."""

from __future__ import annotations

import asyncio

import pytest

from ecp.reference.frontend.http_limits import ConnectionGate, HttpLimits

from .fakes import FakeClient
from .harness import run, served

IMPLS = ["h11", "httptools"]
HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"


async def _connect(url: str, local: str | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.split("//")[1].rsplit(":", 1)
    return await asyncio.open_connection(host, int(port), local_addr=(local, 0) if local else None)


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split(b" ", 2)[1])
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return status, await asyncio.wait_for(reader.readexactly(length), 5)


@pytest.mark.parametrize("http", IMPLS)
def test_headers_that_do_not_arrive_in_time_are_answered_408_and_the_connection_closed(http):
    async def body():
        limits = HttpLimits(header_timeout_s=0.3)
        async with served(FakeClient(), limits=limits, http=http) as (h, _):
            url = str(h.base_url)
            # never finishes its headers
            reader, writer = await _connect(url)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
            status, answer = await _response(reader)
            assert status == 408 and b"did not arrive within 0.3 s" in answer
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
            writer.close()
            # a kept-alive connection: one request answered, the next one's headers stall
            reader, writer = await _connect(url)
            writer.write(HEALTH)
            assert (await _response(reader))[0] == 200
            writer.write(b"GET /health HTTP/1.1\r\n")
            assert (await _response(reader))[0] == 408
            writer.close()
            # a connection that sends nothing at all
            reader, writer = await _connect(url)
            assert (await _response(reader))[0] == 408
            writer.close()
            # a request whose headers come in time is served as ever
            assert (await h.get("/health")).status_code == 200
    run(body)


@pytest.mark.parametrize("http", IMPLS)
def test_connections_over_the_per_client_or_total_cap_are_answered_503(http):
    async def body():
        limits = HttpLimits(max_connections=5, max_connections_per_client=3)
        async with served(FakeClient(), limits=limits, http=http) as (h, _):
            url = str(h.base_url)
            held = []
            for _ in range(3):  # each answered once, so the server has counted it
                reader, writer = await _connect(url, "127.0.0.1")
                writer.write(HEALTH)
                assert (await _response(reader))[0] == 200
                held.append(writer)
            reader, writer = await _connect(url, "127.0.0.1")
            status, answer = await _response(reader)
            assert status == 503 and b"this client holds its maximum of 3" in answer
            writer.close()
            others = []
            for local in ("127.0.0.2", "127.0.0.3"):  # other clients are still served, up to the total
                reader, writer = await _connect(url, local)
                writer.write(HEALTH)
                assert (await _response(reader))[0] == 200
                others.append(writer)
            reader, writer = await _connect(url, "127.0.0.4")
            status, answer = await _response(reader)
            assert status == 503 and b"the server holds its maximum of 5" in answer
            writer.close()
            for w in held + others:
                w.close()
            # the counts go back down: a client may connect again
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5
            while True:
                reader, writer = await _connect(url, "127.0.0.1")
                writer.write(HEALTH)
                status, _ = await _response(reader)
                writer.close()
                if status == 200 or loop.time() > deadline:
                    break
                await asyncio.sleep(0.05)  # the server sees the closes asynchronously
            assert status == 200
    run(body)


def test_the_gate_counts_and_releases():
    gate = ConnectionGate(max_total=3, max_per_client=2)
    assert [gate.admit("a"), gate.admit("a")] == [None, None]
    assert "maximum of 2" in gate.admit("a")
    assert gate.admit("b") is None and "maximum of 3" in gate.admit("c")
    gate.release("a")
    assert gate.admit("c") is None
    assert gate.snapshot() == {"open": 3, "clients": 3, "refused_total": 1, "refused_per_client": 1,
                               "header_timeouts": 0}
    with pytest.raises(ValueError):
        HttpLimits(header_timeout_s=0)
