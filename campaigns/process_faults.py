"""Process faults against real reference engine processes, with the figures they produce.

Scenarios (``--scenario``, default all):

``engine-kill``
    N streams open (mid-stream) through the reference client, with ``ecp
    serve``'s HTTP app on top; the engine process is SIGKILLed. Figures: how
    many streams ended exactly once with ``EngineDisconnected``, when the last
    one ended after the kill, ``/health`` and a new completion afterwards.
``engine-stop``
    The engine is SIGSTOPped (hung: its sockets stay open). With the client's
    ``liveness_timeout_s`` set, figures: when every stream ended with
    ``EngineUnresponsive``, measured from the engine's last output (the
    documented bound is 2 x ``liveness_timeout_s``).
``dp-rank-loss``
    4 engines, streams pinned to each; rank 2 is SIGKILLed. ``ECP-ROB-3``: the
    client fails closed, so every stream on every rank ends with the error;
    the surviving engine processes keep running until the client stops them.
``frontend-kill``
    ``ecp serve -dp 2`` is SIGKILLed; figures: how long its engine processes
    take to exit (they watch their parent).

Every wait is bounded and every process started is killed on the way out.
``tests/reliability/test_process_faults.py`` runs each scenario and asserts
the bounds. Run ``python -m campaigns.process_faults``; it prints one JSON
object per scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from ecp.reference.client import ClientConfig, EngineCoreClient, EngineDisconnected, EngineUnresponsive
from ecp.reference.engine import launch
from ecp.reference.frontend.app import ServeApp
from ecp.reference.frontend.http_server import start_http
from ecp.reference.frontend.serving import Frontend, FrontendConfig
from ecp.reference.tokenizer import ByteTokenizer
from ecp.spec import EngineCoreRequest, SamplingParams

ENGINE = dict(max_model_len=2048, num_gpu_blocks=8192, max_num_seqs=1024, step_time_ms=20,
              handshake_timeout_s=30, log_level="WARNING")


def _req(rid: str, rank: int | None = None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3, 4], None, SamplingParams(max_tokens=1500, temperature=0.0,
                                                                       ignore_eos=True),
                             None, time.time(), None, None, rank)


class Ends:
    """How and when each stream ended (loop time, finish reason or exception)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.started = 0
        self.all_started = asyncio.Event()
        self.ends: dict[str, list[tuple[float, Any]]] = {}

    async def consume(self, stream: Any) -> None:
        loop = asyncio.get_running_loop()
        ends = self.ends.setdefault(stream.request_id, [])
        seen = False
        try:
            async for out in stream:
                if not seen:
                    seen = True
                    self.started += 1
                    if self.started == self.expected:
                        self.all_started.set()
                if out.finish_reason is not None:
                    ends.append((loop.time(), out.finish_reason))
        except Exception as exc:  # the client's sticky error ends the stream
            ends.append((loop.time(), exc))

    def figures(self, error_type: type, since: float) -> dict[str, Any]:
        once = [e for e in self.ends.values() if len(e) == 1]
        return {
            "streams": self.expected, "ended_once": len(once),
            "ended_with_" + error_type.__name__: sum(1 for e in once if isinstance(e[0][1], error_type)),
            "last_end_after_s": round(max((at for e in self.ends.values() for at, _ in e), default=since) - since, 3),
        }


async def _client_with_engines(tmp: str, count: int, **config: Any) -> tuple[EngineCoreClient, Any]:
    client = EngineCoreClient(ClientConfig(engine_count=count, handshake_address=f"ipc://{tmp}/hs",
                                           handshake_timeout_s=30, ready_timeout_s=30, utility_timeout_s=10,
                                           **config))
    await client.bind()
    handle = launch(client.handshake_address, count, 0, mode="process", stderr=subprocess.DEVNULL, **ENGINE)
    try:
        await client.wait_ready()
    except BaseException:
        await asyncio.to_thread(handle.stop, 5)
        await client.shutdown()
        raise
    return client, handle


async def _open(client: EngineCoreClient, ids: list[tuple[str, int | None]]) -> tuple[Ends, list[asyncio.Task]]:
    ends = Ends(len(ids))
    streams = [await client.add(_req(rid, rank)) for rid, rank in ids]
    tasks = [asyncio.ensure_future(ends.consume(s)) for s in streams]
    await asyncio.wait_for(ends.all_started.wait(), 60)  # every stream is mid-stream
    return ends, tasks


async def engine_kill(streams: int = 1000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ecp-faults-") as tmp:
        client, handle = await _client_with_engines(tmp, 1)
        frontend = Frontend(client, ByteTokenizer(), FrontendConfig(model_name="ecp-synthetic",
                                                                    max_model_len=client.max_model_len))
        http = await start_http(ServeApp(frontend).build())
        try:
            async with httpx.AsyncClient(base_url=http.url, timeout=20) as h:
                health_before = (await h.get("/health")).status_code
                ends, tasks = await _open(client, [(f"s{i}", None) for i in range(streams)])
                killed_at = asyncio.get_running_loop().time()
                os.kill(handle._procs[0].pid, signal.SIGKILL)
                _, pending = await asyncio.wait(tasks, timeout=10)
                health_after = (await h.get("/health")).status_code
                refused = (await h.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})).status_code
        finally:
            await http.stop()
            await client.shutdown()
            await asyncio.to_thread(handle.stop, 5)
    return {"scenario": "engine-kill", **ends.figures(EngineDisconnected, killed_at), "pending": len(pending),
            "health_before": health_before, "health_after": health_after, "completion_after": refused}


async def engine_stop(liveness_s: float = 1.0, streams: int = 20) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ecp-faults-") as tmp:
        client, handle = await _client_with_engines(tmp, 1, liveness_timeout_s=liveness_s)
        pid = handle._procs[0].pid
        try:
            ends, tasks = await _open(client, [(f"h{i}", None) for i in range(streams)])
            os.kill(pid, signal.SIGSTOP)
            _, pending = await asyncio.wait(tasks, timeout=4 * liveness_s + 5)
            last_output = client._dispatch.last_output_from[0]
            error = client.error
        finally:
            os.kill(pid, signal.SIGCONT)
            await client.shutdown()
            await asyncio.to_thread(handle.stop, 5)
    return {"scenario": "engine-stop", "liveness_timeout_s": liveness_s,
            **ends.figures(EngineUnresponsive, last_output), "pending": len(pending),
            "error": str(error), "error_rank": getattr(error, "engine_rank", None)}


async def dp_rank_loss(ranks: int = 4, per_rank: int = 10, lost: int = 2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ecp-faults-") as tmp:
        client, handle = await _client_with_engines(tmp, ranks)
        try:
            ends, tasks = await _open(client, [(f"r{r}-{i}", r) for r in range(ranks) for i in range(per_rank)])
            killed_at = asyncio.get_running_loop().time()
            os.kill(handle._procs[lost].pid, signal.SIGKILL)
            _, pending = await asyncio.wait(tasks, timeout=10)
            try:
                await client.add(_req("after", 0))
                add_after = "accepted"
            except Exception as exc:  # noqa: BLE001 - the figure is which error
                add_after = type(exc).__name__
            survivors = [p.poll() is None for i, p in enumerate(handle._procs) if i != lost]
        finally:
            await client.shutdown()
            await asyncio.to_thread(handle.stop, 5)
    return {"scenario": "dp-rank-loss", "ranks": ranks, "lost_rank": lost,
            **ends.figures(EngineDisconnected, killed_at), "pending": len(pending), "add_after": add_after,
            "client_healthy": client.healthy, "survivor_processes_running": sum(survivors)}


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(k) for k in f.read().split()]
    except FileNotFoundError:
        return []


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


def frontend_kill(dp: int = 2, bound_s: float = 10.0) -> dict[str, Any]:
    serve = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", "-dp", str(dp),
                              "--max-model-len", "256"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    engines: list[int] = []
    exited_after = None
    try:
        for line in serve.stderr:  # it says when it serves, i.e. once the engines are up
            if "serving" in line and " on http" in line:
                break
        engines = [p for c in _children(serve.pid) for p in [c, *_children(c)]]
        serve.kill()
        serve.wait(10)
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < bound_s:
            if engines and all(_gone(p) for p in engines):
                exited_after = round(time.monotonic() - killed_at, 3)
                break
            time.sleep(0.02)  # polling foreign processes' state: there is nothing to wait on
        left = [p for p in engines if not _gone(p)]
    finally:
        try:
            os.killpg(serve.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        serve.wait(10)
    return {"scenario": "frontend-kill", "engine_processes": len(engines), "all_exited_after_s": exited_after,
            "left_running": len(left)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--scenario", choices=("engine-kill", "engine-stop", "dp-rank-loss", "frontend-kill", "all"),
                   default="all")
    p.add_argument("--streams", type=int, default=1000, help="streams open when the engine is killed")
    p.add_argument("--liveness-timeout", type=float, default=1.0)
    args = p.parse_args(argv)
    todo = ["engine-kill", "engine-stop", "dp-rank-loss", "frontend-kill"] if args.scenario == "all" \
        else [args.scenario]
    for name in todo:
        if name == "engine-kill":
            r = asyncio.run(engine_kill(args.streams))
        elif name == "engine-stop":
            r = asyncio.run(engine_stop(args.liveness_timeout))
        elif name == "dp-rank-loss":
            r = asyncio.run(dp_rank_loss())
        else:
            r = frontend_kill()
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
