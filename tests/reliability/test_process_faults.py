"""Process faults: an engine SIGKILLed mid-stream, a DP rank lost among 4, the frontend killed.

Each test starts real engine processes (``python -m ecp.reference.engine``, as
``ecp engine`` does), bounds every wait and kills whatever is left on the way out.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from frontend.harness import run, served

from ecp.reference.client import ClientConfig, EngineCoreClient, EngineDisconnected, EngineUnresponsive
from ecp.reference.engine import launch
from ecp.spec import EngineCoreRequest, SamplingParams

pytestmark = pytest.mark.slow

ENGINE = dict(max_model_len=2048, num_gpu_blocks=8192, max_num_seqs=1024, step_time_ms=20,
              handshake_timeout_s=30, log_level="WARNING")


def _req(rid: str, rank: int | None = None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3, 4], None, SamplingParams(max_tokens=1500, temperature=0.0,
                                                                       ignore_eos=True),
                             None, time.time(), None, None, rank)


class Ends:
    """How and when each stream ended: exactly one terminal per stream is what is asserted."""

    def __init__(self) -> None:
        self.first_output = asyncio.Event()
        self.started = 0
        self.expected = 0
        self.ends: dict[str, list[tuple[float, object]]] = {}

    async def consume(self, stream) -> None:
        loop = asyncio.get_running_loop()
        ends = self.ends.setdefault(stream.request_id, [])
        seen = False
        try:
            async for out in stream:
                if not seen:
                    seen = True
                    self.started += 1
                    if self.started == self.expected:
                        self.first_output.set()
                if out.finish_reason is not None:
                    ends.append((loop.time(), out.finish_reason))
        except Exception as exc:
            ends.append((loop.time(), exc))


async def _client_with_engines(tmp: str, count: int, **config) -> tuple[EngineCoreClient, object]:
    client = EngineCoreClient(ClientConfig(engine_count=count, handshake_address=f"ipc://{tmp}/hs",
                                           handshake_timeout_s=30, ready_timeout_s=30, utility_timeout_s=10,
                                           **config))
    await client.bind()
    handle = launch(client.handshake_address, count, 0, mode="process", stderr=subprocess.DEVNULL, **ENGINE)
    try:
        await client.wait_ready()
    except BaseException:
        handle.stop(timeout=5)
        await client.shutdown()
        raise
    return client, handle


def test_engine_sigkilled_with_1000_streams_open_ends_each_once_within_1s_and_health_turns_503():
    async def body():
        with tempfile.TemporaryDirectory(prefix="ecp-rel-") as tmp:
            client, handle = await _client_with_engines(tmp, 1)
            try:
                async with served(client) as (http, _frontend):
                    assert (await http.get("/health")).status_code == 200
                    ends = Ends()
                    ends.expected = 1000
                    streams = [await client.add(_req(f"s{i}")) for i in range(1000)]
                    tasks = [asyncio.ensure_future(ends.consume(s)) for s in streams]
                    await asyncio.wait_for(ends.first_output.wait(), 30)  # every stream is mid-stream
                    loop = asyncio.get_running_loop()
                    killed_at = loop.time()
                    os.kill(handle._procs[0].pid, signal.SIGKILL)
                    done, pending = await asyncio.wait(tasks, timeout=10)
                    health = await http.get("/health")
                    refused = await http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            finally:
                await client.shutdown()
                handle.stop(timeout=5)
        assert not pending
        assert all(len(e) == 1 for e in ends.ends.values()) and len(ends.ends) == 1000
        errors = [what for e in ends.ends.values() for _, what in e]
        assert all(isinstance(w, EngineDisconnected) for w in errors), {type(w).__name__ for w in errors}
        latest = max(at for e in ends.ends.values() for at, _ in e) - killed_at
        assert latest <= 1.0, f"the last stream ended {latest:.2f}s after the kill"
        assert health.status_code == 503 and refused.status_code == 503

    run(body, timeout=90)


def test_one_dp_rank_lost_among_4_fails_closed_on_every_rank():
    """ECP-ROB-3: an engine process that disappears makes the frontend unhealthy, and the
    sticky error reaches every active stream, pinned to the lost rank or not."""

    async def body():
        with tempfile.TemporaryDirectory(prefix="ecp-rel-") as tmp:
            client, handle = await _client_with_engines(tmp, 4)
            try:
                ends = Ends()
                ends.expected = 40
                streams = [await client.add(_req(f"r{rank}-{i}", rank)) for rank in range(4) for i in range(10)]
                assert {s.engine_rank for s in streams} == {0, 1, 2, 3}
                tasks = [asyncio.ensure_future(ends.consume(s)) for s in streams]
                await asyncio.wait_for(ends.first_output.wait(), 30)
                os.kill(handle._procs[2].pid, signal.SIGKILL)
                done, pending = await asyncio.wait(tasks, timeout=10)
                with pytest.raises(EngineDisconnected):
                    await client.add(_req("after", 0))
                survivors_alive = [p.poll() is None for i, p in enumerate(handle._procs) if i != 2]
            finally:
                await client.shutdown()
                handle.stop(timeout=5)
        assert not pending and survivors_alive == [True, True, True]
        assert all(len(e) == 1 and isinstance(e[0][1], EngineDisconnected) for e in ends.ends.values())
        assert not client.healthy

    run(body, timeout=90)


LIVENESS_S = 1.0


def test_engine_sigstopped_is_detected_within_twice_the_liveness_timeout():
    """A hung engine keeps its sockets open, so nothing disconnects: only the liveness probe
    (``liveness_timeout_s``) notices, at most 2 x the timeout after the engine's last output."""

    async def body():
        with tempfile.TemporaryDirectory(prefix="ecp-rel-") as tmp:
            client, handle = await _client_with_engines(tmp, 1, liveness_timeout_s=LIVENESS_S)
            pid = handle._procs[0].pid
            try:
                ends = Ends()
                ends.expected = 20
                streams = [await client.add(_req(f"h{i}")) for i in range(20)]
                tasks = [asyncio.ensure_future(ends.consume(s)) for s in streams]
                await asyncio.wait_for(ends.first_output.wait(), 30)
                os.kill(pid, signal.SIGSTOP)
                done, pending = await asyncio.wait(tasks, timeout=4 * LIVENESS_S + 5)
                last_output = client._last_output_from[0]
            finally:
                os.kill(pid, signal.SIGCONT)
                await client.shutdown()
                handle.stop(timeout=5)
        assert not pending
        assert all(len(e) == 1 and isinstance(e[0][1], EngineUnresponsive) for e in ends.ends.values())
        latest = max(at for e in ends.ends.values() for at, _ in e)
        assert latest - last_output <= 2 * LIVENESS_S + 0.25, latest - last_output  # the documented bound
        assert client.error.engine_rank == 0 and client.error.clause == "ECP-ROB-3"

    run(body, timeout=90)


def test_a_paused_engine_answers_the_liveness_probe_and_is_not_failed():
    """No false alarm: an engine that holds its requests without output (scheduler paused,
    mode "keep") is silent but alive, so the probe's reply keeps the client healthy."""

    async def body():
        with tempfile.TemporaryDirectory(prefix="ecp-rel-") as tmp:
            client, handle = await _client_with_engines(tmp, 1, liveness_timeout_s=LIVENESS_S / 2)
            try:
                stream = await client.add(_req("held"))
                await stream.__anext__()
                await client.pause_generation(mode="keep")
                probes = client.stats.liveness_probes
                loop = asyncio.get_running_loop()
                end = loop.time() + 4 * LIVENESS_S
                while loop.time() < end and client.healthy:
                    await asyncio.sleep(0.05)  # observing a quiet period: no event marks "nothing happened"
                healthy, sent = client.healthy, client.stats.liveness_probes - probes
                await client.resume_scheduler()
                await client.abort(["held"])
            finally:
                await client.shutdown()
                handle.stop(timeout=5)
        assert healthy and sent >= 2  # probed while silent, answered every time

    run(body, timeout=60)


def test_ecp_serve_engine_liveness_timeout_turns_a_stopped_engine_into_503():
    """The same probe through ``ecp serve --engine-liveness-timeout``: a stream on a SIGSTOPped
    engine ends with an error event and /health answers 503."""
    import httpx

    serve = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", "--max-model-len", "2048",
                              "--engine-liveness-timeout", str(LIVENESS_S), "--engine-args", "--step-time-ms 20"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    engines: list[int] = []
    try:
        url = None
        for line in serve.stderr:
            if "serving" in line and " on http" in line:
                url = line.split(" on ", 1)[1].split()[0]
                break
        assert url, "ecp serve did not start"
        engines = [p for c in _children(serve.pid) for p in [c, *_children(c)]]
        with httpx.Client(base_url=url, timeout=20) as http:
            assert http.get("/health").status_code == 200
            body = {"prompt": "hello", "max_tokens": 1500, "stream": True, "ignore_eos": True}
            with http.stream("POST", "/v1/completions", json=body) as resp:
                lines = resp.iter_lines()
                assert next(line for line in lines if line.startswith("data: "))  # mid-stream
                for pid in engines:
                    os.kill(pid, signal.SIGSTOP)
                stopped_at = time.monotonic()
                rest = [line for line in lines if line.startswith("data: ")]
                ended_after = time.monotonic() - stopped_at
            health = http.get("/health").status_code
    finally:
        for pid in engines:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        try:
            os.killpg(serve.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        serve.wait(10)
    assert rest[-1] == "data: [DONE]" and "error" in rest[-2], rest[-2:]
    assert ended_after <= 2 * LIVENESS_S + 0.5 and health == 503


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return out


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_frontend_sigkilled_its_engines_exit_within_3s():
    """``ecp serve -dp 2`` SIGKILLed (no chance to stop anything): its engine processes notice
    that their parent is gone and exit, leaving no orphans."""
    serve = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", "-dp", "2",
                              "--max-model-len", "256"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    engines: list[int] = []
    try:
        deadline = time.monotonic() + 60
        for line in serve.stderr:  # its log says when it serves, i.e. when the engines are up
            if "Uvicorn running" in line or "serving" in line.lower():
                break
            assert time.monotonic() < deadline and serve.poll() is None, line
        engines = [p for c in _children(serve.pid) for p in [c, *_children(c)]]
        assert engines, "no engine processes found"
        serve.kill()
        serve.wait(10)
        killed_at = time.monotonic()
        while not all(_gone(p) for p in engines):
            assert time.monotonic() - killed_at < 3.0, [p for p in engines if not _gone(p)]
            time.sleep(0.05)  # polling foreign processes' state: there is nothing to wait on
    finally:
        try:
            os.killpg(serve.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        serve.wait(10)


def test_liveness_timeout_must_be_positive():
    with pytest.raises(ValueError, match="liveness_timeout_s"):
        ClientConfig(liveness_timeout_s=0)
