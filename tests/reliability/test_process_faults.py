"""Process faults (``campaigns/process_faults.py``): an engine SIGKILLed mid-stream or
SIGSTOPped, a DP rank lost among 4, the frontend killed. Each scenario starts real engine
processes, bounds every wait and kills whatever is left on the way out."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from campaigns import process_faults as pf

from ecp.reference.client import ClientConfig

pytestmark = pytest.mark.slow

LIVENESS_S = 1.0


def test_engine_sigkilled_with_1000_streams_open_ends_each_once_within_1s_and_health_turns_503():
    r = asyncio.run(asyncio.wait_for(pf.engine_kill(1000), 90))
    assert r["pending"] == 0 and r["ended_once"] == 1000 and r["ended_with_EngineDisconnected"] == 1000, r
    assert r["last_end_after_s"] <= 1.0, r
    assert (r["health_before"], r["health_after"], r["completion_after"]) == (200, 503, 503)


def test_engine_sigstopped_is_detected_within_twice_the_liveness_timeout():
    """A hung engine keeps its sockets open, so nothing disconnects: only the liveness probe
    (``liveness_timeout_s``) notices, at most 2 x the timeout after the engine's last output."""
    r = asyncio.run(asyncio.wait_for(pf.engine_stop(LIVENESS_S, 20), 90))
    assert r["pending"] == 0 and r["ended_once"] == r["ended_with_EngineUnresponsive"] == 20, r
    assert r["last_end_after_s"] <= 2 * LIVENESS_S + 0.25, r  # the documented bound, small scheduling slack
    assert r["error_rank"] == 0 and "ECP-ROB-3" in r["error"]


def test_a_paused_engine_answers_the_liveness_probe_and_is_not_failed():
    """No false alarm: an engine that holds its requests without output (scheduler paused,
    mode "keep") is silent but alive, so the probe's reply keeps the client healthy."""

    async def body():
        with tempfile.TemporaryDirectory(prefix="ecp-rel-") as tmp:
            client, handle = await pf._client_with_engines(tmp, 1, liveness_timeout_s=LIVENESS_S / 2)
            try:
                stream = await client.add(pf._req("held"))
                await stream.__anext__()
                await client.pause_generation(mode="keep")
                probes = client.stats.liveness_probes
                loop = asyncio.get_running_loop()
                end = loop.time() + 3 * LIVENESS_S / 2  # six probe timeouts long
                while loop.time() < end and client.healthy:
                    await asyncio.sleep(0.05)  # observing a quiet period: no event marks "nothing happened"
                healthy, sent = client.healthy, client.stats.liveness_probes - probes
                await client.resume_scheduler()
                await client.abort(["held"])
            finally:
                await client.shutdown()
                await asyncio.to_thread(handle.stop, 5)
        assert healthy and sent >= 2  # probed while silent, answered every time

    asyncio.run(asyncio.wait_for(body(), 60))


def test_one_dp_rank_lost_among_4_fails_closed_on_every_rank():
    """ECP-ROB-3: an engine process that disappears makes the frontend unhealthy, and the
    sticky error reaches every active stream, pinned to the lost rank or not."""
    r = asyncio.run(asyncio.wait_for(pf.dp_rank_loss(4, 10, lost=2), 90))
    assert r["pending"] == 0 and r["ended_once"] == r["ended_with_EngineDisconnected"] == 40, r
    assert r["add_after"] == "EngineDisconnected" and not r["client_healthy"]
    assert r["survivor_processes_running"] == 3  # the others were not taken down by the loss


def test_frontend_sigkilled_its_engines_exit_within_3s():
    """``ecp serve -dp 2`` SIGKILLed (no chance to stop anything): its engine processes notice
    that their parent is gone and exit, leaving no orphans."""
    r = pf.frontend_kill(2, bound_s=10.0)
    assert r["engine_processes"] >= 2 and r["left_running"] == 0, r
    assert r["all_exited_after_s"] is not None and r["all_exited_after_s"] <= 3.0, r


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
        engines = [p for c in pf._children(serve.pid) for p in [c, *pf._children(c)]]
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



def test_liveness_timeout_must_be_positive():
    with pytest.raises(ValueError, match="liveness_timeout_s"):
        ClientConfig(liveness_timeout_s=0)
