"""A KV consumer's sockets to producers are bounded: an HTTP client naming a new producer
address in every request's ``kv_transfer_params`` cannot exhaust the engine's descriptors.

The end-to-end test runs the engine as its own process under ``RLIMIT_NOFILE`` 200 (set on
that process only), as ``ulimit -n 200`` would, and sends it 260 rejected and 40 admitted
requests that each name another producer port."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
import tempfile
import time

import httpx
import msgspec
import pytest
import zmq

from benchmarks.procstat import open_fds

from ecp.reference.client import ClientConfig, EngineCoreClient
from ecp.reference.engine.kv_connector import Notice
from ecp.reference.engine.kv_notices import NoticeSockets
from ecp.reference.frontend.app import ServeApp
from ecp.reference.frontend.server import start_http
from ecp.reference.frontend.serving import Frontend, FrontendConfig
from ecp.reference.tokenizer import ByteTokenizer

FD_LIMIT = 200
FD_BOUND = 2 * 4 + 2  # about two descriptors for each of the 4 kept sockets


def _notice(address: str, rid: str) -> Notice:
    return Notice(address, {"type": "free", "request_id": rid, "engine_id": "p"})


def _lru_scenario() -> dict:
    """Twelve producers through a cap of 4, one kept busy; what happened, and the process's
    descriptor growth (run in a fresh process: other tests' sockets do not count)."""
    with tempfile.TemporaryDirectory(prefix="ecp-kvn-") as tmp:
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        pull.bind(f"ipc://{tmp}/p0")
        socks = NoticeSockets(ctx, cap=4)
        try:
            fds_before = open_fds()
            sent = [socks.send(_notice(f"ipc://{tmp}/p0", "r0"))]
            sizes = []
            for i in range(1, 12):
                sent.append(socks.send(_notice(f"ipc://{tmp}/p{i}", f"r{i}")))
                sent.append(socks.send(_notice(f"ipc://{tmp}/p0", f"again{i}")))  # p0 stays the most recent
                sizes.append(len(socks))
            counts = (socks.opened, socks.evicted, len(socks))
            # p0 was never evicted: all 12 of its notices arrived on one connection
            got = [msgspec.msgpack.decode(pull.recv())["request_id"] for _ in range(12) if pull.poll(5000)]
            # an address no socket can connect to is a logged failure, not an exception
            bad = socks.send(_notice("tcp://no-such-host-name.invalid:notaport", "bad"))
            after_bad = (socks.failed, len(socks))
            # zmq closes an evicted socket's descriptors on its reaper thread, a moment after close():
            # wait (bounded) for them to go rather than count ones already on their way out
            deadline = time.monotonic() + 5
            while (fd_growth := open_fds() - fds_before) > FD_BOUND and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            socks.close()
            pull.close(0)
            ctx.term()
        return {"sent": sent, "sizes": sizes, "counts": counts, "got": got, "bad": bad, "after_bad": after_bad,
                "fd_growth": fd_growth, "closed_len": len(socks)}


def test_notice_sockets_keep_at_most_cap_and_close_the_least_recently_used():
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        r = pool.apply_async(_lru_scenario).get(60)
    assert all(r["sent"]) and max(r["sizes"]) <= 4
    assert r["counts"] == (12, 8, 4)
    assert r["got"] == ["r0", *(f"again{i}" for i in range(1, 12))]
    assert r["bad"] is False and r["after_bad"] == (1, 4)
    assert r["fd_growth"] <= FD_BOUND
    assert r["closed_len"] == 0


def test_notice_sockets_refuse_a_cap_below_one():
    with pytest.raises(ValueError, match="cap"):
        NoticeSockets(zmq.Context.instance(), cap=0)


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_consumer_engine_at_ulimit_200_survives_300_requests_naming_new_producers():
    """The reproduction of the report: before the bound, each request left one more PUSH socket
    open and the engine died of ``Too many open files`` after about 190 of them."""

    async def body(tmp: str) -> dict:
        client = EngineCoreClient(ClientConfig(handshake_address=f"ipc://{tmp}/hs", handshake_timeout_s=30,
                                               ready_timeout_s=30, kv_connector="reference"))
        await client.bind()
        engine = subprocess.Popen(
            [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", client.handshake_address,
             "--local", "--in-process", "--kv-connector", "reference", "--kv-role", "consumer",
             "--kv-producer", "127.0.0.1/32",  # every port of loopback allowed (ECP-SEC-4)
             "--log-level", "ERROR"],
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_limit_fds)
        http = None
        try:
            await client.wait_ready()
            fe = Frontend(client, ByteTokenizer(), FrontendConfig(max_model_len=client.max_model_len,
                                                                   kv_connector="reference",
                                                                   trust_request_kv_params=True))
            http = await start_http(ServeApp(fe).build())
            async with httpx.AsyncClient(base_url=http.url, timeout=30) as h:
                fds_ready = open_fds(engine.pid)

                def kv(i: int) -> dict:
                    return {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 20000 + i}

                sem = asyncio.Semaphore(16)

                async def post(payload: dict) -> int:
                    async with sem:
                        return (await h.post("/v1/completions", json=payload)).status_code

                rejected = await asyncio.gather(*(post({"model": "nope", "prompt": "x", "kv_transfer_params": kv(i)})
                                                  for i in range(260)))
                admitted = await asyncio.gather(*(post({"prompt": "x", "max_tokens": 2,
                                                        "kv_transfer_params": kv(300 + i)}) for i in range(40)))
                # the engine handled every notice: the stats utility answers after them (one input queue)
                stats = (await client.call_utility("get_kv_connector_stats"))[0]
                fds_after = open_fds(engine.pid)
                health = (await h.get("/health")).status_code
                normal = await h.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3})
            return {"rejected": rejected, "admitted": admitted, "stats": stats, "fds_ready": fds_ready,
                    "fds_after": fds_after, "health": health, "normal": normal.status_code,
                    "normal_tokens": normal.json()["usage"]["completion_tokens"] if normal.status_code == 200 else None,
                    "engine_alive": engine.poll() is None, "client_healthy": client.healthy}
        finally:
            if http is not None:
                await http.stop()
            await client.shutdown()
            try:
                engine.wait(15)
            except subprocess.TimeoutExpired:
                engine.kill()
                engine.wait(5)
            engine.stderr.close()

    with tempfile.TemporaryDirectory(prefix="ecp-kvn-") as tmp:
        r = asyncio.run(asyncio.wait_for(body(tmp), 120))
    assert r["rejected"] == [404] * 260 and r["admitted"] == [200] * 40
    assert r["stats"]["notices_sent"] == 300, r["stats"]
    assert r["engine_alive"] and r["client_healthy"] and r["health"] == 200
    assert r["normal"] == 200 and r["normal_tokens"] == 3
    # 64 kept sockets, about two descriptors each, whatever the number of producers named
    assert r["fds_after"] - r["fds_ready"] <= 2 * 64 + 8, r
    assert r["fds_after"] < FD_LIMIT
