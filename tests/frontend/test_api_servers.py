"""``ecp serve --api-server-count N``: several API server processes, one server to its users."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading

import httpx
import pytest

from ecp.reference.frontend.peers import PeerLink, PeerUnavailable

from .test_cli import SERVING, ServeProcess


class _Frontend:
    """What a peer link needs of a frontend: ``abort`` and ``index``; holds ``ids``."""

    def __init__(self, ids: list[str]) -> None:
        self.index = list(ids)

    async def abort(self, ids: list[str] | None):
        hit = list(self.index) if ids is None else [i for i in ids if i in self.index]
        self.index = [i for i in self.index if i not in hit]
        return [{"request_id": i} for i in hit], [] if ids is None else [i for i in ids if i not in hit]


def test_peer_links_abort_where_each_request_lives_and_sum_the_load():
    async def body():
        with tempfile.TemporaryDirectory() as tmp:
            addresses = [f"ipc://{os.path.join(tmp, f'p{i}')}" for i in range(3)]
            fronts = [_Frontend(["a1", "a2"]), _Frontend(["b1"]), _Frontend(["c1", "c2", "c3"])]
            links = [PeerLink(i, addresses, f) for i, f in enumerate(fronts)]
            for link in links:
                await link.start()
            try:
                assert await links[0].load() == 4  # the others' requests, not its own
                results, unknown = await links[0].abort(["b1", "c2", "a1", "zz"])
                # a1 lives in process 0 itself (the route asks it locally), zz nowhere
                assert sorted(r["request_id"] for r in results) == ["b1", "c2"]
                assert unknown == ["a1", "zz"]
                assert fronts[1].index == [] and fronts[2].index == ["c1", "c3"]
                results, unknown = await links[1].abort(None)  # all: every other process's requests
                assert sorted(r["request_id"] for r in results) == ["a1", "a2", "c1", "c3"] and unknown == []
                assert await links[2].load() == 0
            finally:
                for link in links:
                    await link.close()
    asyncio.run(body())


def test_a_peer_that_does_not_answer_is_an_error(monkeypatch):
    monkeypatch.setattr("ecp.reference.frontend.peers.PEER_TIMEOUT_S", 0.2)

    async def body():
        with tempfile.TemporaryDirectory() as tmp:
            addresses = [f"ipc://{os.path.join(tmp, f'p{i}')}" for i in range(2)]
            link = PeerLink(0, addresses, _Frontend([]))  # process 1 never started
            await link.start()
            try:
                with pytest.raises(PeerUnavailable, match="did not answer"):
                    await link.abort(["x"])
            finally:
                await link.close()
    asyncio.run(body())


def _stream(url: str, rid: str, first: threading.Event, out: dict) -> None:
    body = {"prompt": "Hi", "max_tokens": 4000, "stream": True}  # ~20 s at 5 ms a step: aborted long before
    with httpx.stream("POST", f"{url}/v1/completions", json=body, headers={"X-Request-Id": rid}, timeout=30) as r:
        events = [] if r.status_code == 200 else [f"HTTP {r.status_code}"]
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                first.set()
    out[rid] = events


def test_two_api_servers_serve_abort_and_count_every_request():
    serve = ServeProcess("--api-server-count", "2", "--engine-args", "--step-time-ms 5")
    threads = []
    try:
        url = serve.wait_for(SERVING).group(1)
        assert "2 API server processes" in serve.seen[-1]
        out: dict[str, list[str]] = {}
        ids = [f"req-{i}" for i in range(6)]
        firsts = []
        for rid in ids:  # each on its own connection: the kernel hands them to either process
            first = threading.Event()
            t = threading.Thread(target=_stream, args=(url, rid, first, out), daemon=True)
            t.start()
            threads.append(t)
            firsts.append(first)
        assert all(f.wait(20) for f in firsts), out
        assert httpx.get(f"{url}/load", timeout=10).json() == {"server_load": 6}
        r = httpx.post(f"{url}/abort_requests", json={"request_ids": [*ids, "nobody"]}, timeout=20)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["aborted"] == 6 and answer["not_found"] == ["nobody"]
        assert sorted(x["external_id"] for x in answer["results"]) == sorted(f"cmpl-{i}-0" for i in ids)
        for t in threads:
            t.join(20)
        for rid in ids:
            events = out[rid]
            assert events[-1] == "[DONE]"
            assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort"
        assert httpx.get(f"{url}/load", timeout=10).json() == {"server_load": 0}
    finally:
        code = serve.stop()
    assert code == 0


def test_the_launcher_stops_while_waiting_for_external_engines():
    """SIGTERM to the launcher alone, during the handshake: it stops its API servers and exits 0."""
    from ecp.conformance.frontend.launcher import free_port

    port = free_port()
    serve = ServeProcess("--api-server-count", "2", "--data-parallel-size-local", "0",
                         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(port))
    try:
        serve.wait_for(r"waiting for 1 engine\(s\) to connect")
    finally:
        code = serve.stop()
    assert code == 0
