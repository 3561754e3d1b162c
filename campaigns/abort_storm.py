"""Abort storm: N open streams dropped at once, through the reference client, to reference engines.

Starts ``--engines`` reference engine processes (``python -m
ecp.reference.engine``) and one :class:`~ecp.reference.client.EngineCoreClient`,
admits ``--streams`` long requests (each engine confirms it holds them), then
drops every stream at once (``aclose()``: the auto-abort path, ``ECP-ABORT-5``).
It counts the ABORT messages each engine receives and the ids in each, and
polls every engine's state until nothing runs or waits. Pass criteria:

* at most ``ceil(N / 1024) + 1`` ABORT messages per engine (one per engine per
  drain, 1,024 ids per drain: ``ECP-ABORT-6``);
* every id aborted exactly once;
* every engine idle within ``--idle-bound-ms`` (200) of the last ABORT sent.

Run ``python -m campaigns.abort_storm --streams 10000``; it prints one JSON
object and exits 1 if a criterion failed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import subprocess
import sys
import tempfile
import time
from typing import Any


from benchmarks.procstat import rss_kib  # noqa: E402

from ecp.reference.client import ClientConfig, EngineCoreClient  # noqa: E402
from ecp.reference.engine import launch  # noqa: E402
from ecp.spec import EngineCoreRequest, SamplingParams, decode_input  # noqa: E402


def _req(rid: str) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3, 4], None, SamplingParams(max_tokens=3000, temperature=0.0,
                                                                       ignore_eos=True),
                             None, time.time(), None, None, None)


async def _states(client: EngineCoreClient) -> dict[int, dict[str, Any]]:
    return await client.call_utility("get_engine_state")


async def storm(streams: int, engines: int, *, idle_bound_ms: float = 200.0, admit_timeout_s: float = 120.0
                ) -> dict[str, Any]:
    """Run one storm (module doc); returns the figures."""
    with tempfile.TemporaryDirectory(prefix="ecp-storm-") as tmp:
        client = EngineCoreClient(ClientConfig(engine_count=engines, handshake_address=f"ipc://{tmp}/hs",
                                               handshake_timeout_s=60, ready_timeout_s=60, utility_timeout_s=30))
        await client.bind()
        handle = launch(client.handshake_address, engines, 0, mode="process", stderr=subprocess.DEVNULL,
                        max_model_len=4096, num_gpu_blocks=streams * 2 + 1024, max_num_seqs=256,
                        step_time_ms=10, handshake_timeout_s=60, log_level="WARNING")
        loop = asyncio.get_running_loop()
        aborts: dict[int, list[tuple[float, list[str]]]] = collections.defaultdict(list)
        send = client._put

        async def counting_send(rank: int, frames: list[bytes], *event: object) -> None:
            # instrumentation: see every ABORT as it leaves the client, with its ids
            if bytes(frames[0]) == b"\x01":
                aborts[rank].append((loop.time(), list(decode_input(frames))))
            await send(rank, frames, *event)

        client._put = counting_send  # type: ignore[method-assign]
        try:
            await client.wait_ready()
            t0 = loop.time()
            opened = [await client.add(_req(f"storm-{i}")) for i in range(streams)]
            add_s = loop.time() - t0
            deadline = loop.time() + admit_timeout_s
            while True:  # every request admitted (running or waiting) at its engine
                states = await _states(client)
                if sum(s["num_running"] + s["num_waiting"] for s in states.values()) >= streams:
                    break
                if loop.time() > deadline:
                    raise TimeoutError(f"engines admitted only part of the load: {states}")
                await asyncio.sleep(0.05)  # between utility round trips
            pids = [p.pid for p in handle._procs]
            rss_client_before = rss_kib()
            rss_engines_before = [rss_kib(p) for p in pids]
            dropped_at = loop.time()
            for s in opened:
                await s.aclose()
            deadline = loop.time() + 30
            while client.stats.aborts_sent < streams and loop.time() < deadline:
                await asyncio.sleep(0.001)
            last_abort = max((t for msgs in aborts.values() for t, _ in msgs), default=dropped_at)
            idle_at = None
            deadline = loop.time() + 30
            while loop.time() < deadline:
                states = await _states(client)
                if all(s["num_running"] == 0 and s["num_waiting"] == 0 for s in states.values()):
                    idle_at = loop.time()
                    break
            rss_engines_after = [rss_kib(p) for p in pids]
        finally:
            await client.shutdown()
            await asyncio.to_thread(handle.stop, 10)
    ids = collections.Counter(i for msgs in aborts.values() for _, batch in msgs for i in batch)
    per_engine = {rank: len(msgs) for rank, msgs in sorted(aborts.items())}
    bound = math.ceil(streams / 1024) + 1
    idle_ms = None if idle_at is None else round((idle_at - last_abort) * 1000, 1)
    return {
        "campaign": "abort-storm", "streams": streams, "engines": engines,
        "add_seconds": round(add_s, 2),
        "abort_messages_per_engine": per_engine, "abort_message_bound_per_engine": bound,
        "ids_per_message_max": max((len(b) for msgs in aborts.values() for _, b in msgs), default=0),
        "ids_aborted": len(ids), "ids_aborted_twice": sum(1 for c in ids.values() if c > 1),
        "drop_to_last_abort_ms": round((last_abort - dropped_at) * 1000, 1),
        "idle_after_last_abort_ms": idle_ms, "idle_bound_ms": idle_bound_ms,
        "rss_client_mib": round(rss_client_before / 1024, 1),
        "rss_engines_mib_before_after": [[round(a / 1024, 1), round(b / 1024, 1)]
                                          for a, b in zip(rss_engines_before, rss_engines_after)],
        "passed": (all(n <= bound for n in per_engine.values()) and len(ids) == streams
                   and not any(c > 1 for c in ids.values()) and idle_ms is not None and idle_ms <= idle_bound_ms),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--engines", type=int, default=2)
    p.add_argument("--idle-bound-ms", type=float, default=200.0)
    args = p.parse_args(argv)
    result = asyncio.run(storm(args.streams, args.engines, idle_bound_ms=args.idle_bound_ms))
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
