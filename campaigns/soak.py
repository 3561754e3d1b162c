"""Soak: steady load on reference engines through the reference client, sampled every minute.

Starts ``--engines`` reference engine processes and one client, then keeps
``--concurrency`` requests in flight for ``--minutes`` (each with a random
``max_tokens``; one in ``--drop-every`` is dropped by its consumer half-way,
which auto-aborts it, and one in ``--abort-every`` is aborted explicitly).
Every request's stream is consumed to its end and its terminal counted:
a finished output (length/stop/abort), or the end of a dropped stream. Each
``--sample-s`` seconds it records the client's and every engine's RSS, the
client's in-flight count and the engines' running + waiting counts.

Pass criteria: every request ended exactly once (no lost or duplicated
terminal output), nothing in flight at the end, engines idle, and RSS growth
from the first sample to the last within ``--rss-bound-mib`` per process.

Run ``python -m campaigns.soak --minutes 30``; it prints one JSON object
and exits 1 if a criterion failed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import subprocess
import sys
import tempfile
import time
from typing import Any


from benchmarks.procstat import rss_kib  # noqa: E402

from ecp.reference.client import ClientConfig, EngineCoreClient  # noqa: E402
from ecp.reference.engine import launch  # noqa: E402
from ecp.spec import EngineCoreRequest, SamplingParams  # noqa: E402


async def soak(seconds: float, *, engines: int = 2, concurrency: int = 64, sample_s: float = 60.0,
               drop_every: int = 10, abort_every: int = 25, seed: int = 1, step_time_ms: float = 2.0
               ) -> dict[str, Any]:
    rng = random.Random(seed)
    # per-request state lives in its coroutine only: a soak must not measure its own bookkeeping
    outcome: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ecp-soak-") as tmp:
        client = EngineCoreClient(ClientConfig(engine_count=engines, handshake_address=f"ipc://{tmp}/hs",
                                               handshake_timeout_s=60, ready_timeout_s=60, utility_timeout_s=30))
        await client.bind()
        handle = launch(client.handshake_address, engines, 0, mode="process", stderr=subprocess.DEVNULL,
                        max_model_len=1024, num_gpu_blocks=4096, step_time_ms=step_time_ms,
                        handshake_timeout_s=60, log_level="WARNING")
        loop = asyncio.get_running_loop()
        sent = 0
        slots = asyncio.Semaphore(concurrency)

        async def one(n: int) -> None:
            rid = f"soak-{n}"
            terminals = 0
            max_tokens = rng.randint(1, 64)
            req = EngineCoreRequest(rid, [rng.randrange(1, 1000) for _ in range(rng.randint(1, 32))], None,
                                    SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
                                    None, time.time(), None, None, None)
            try:
                stream = await client.add(req)
                drop = n % drop_every == drop_every - 1 and max_tokens > 2
                abort = not drop and n % abort_every == abort_every - 1 and max_tokens > 2
                got = 0
                async for out in stream:
                    got += len(out.new_token_ids)
                    if out.finish_reason is not None:
                        terminals += 1
                        kinds[out.finish_reason.name.lower()] += 1
                    elif terminals:
                        terminals += 1  # an output after the terminal one counts as a duplicate end
                    elif drop and got >= max_tokens // 2:
                        await stream.aclose()
                        terminals += 1
                        kinds["dropped"] += 1
                        break
                    elif abort and got >= max_tokens // 2:
                        abort = False
                        await client.abort([rid])  # its ABORT terminal output ends the loop
            except Exception as exc:  # noqa: BLE001 - counted: a soak must see none
                terminals += 1
                kinds[f"error:{type(exc).__name__}"] += 1
            finally:
                outcome["ended_once" if terminals == 1 else "lost" if terminals == 0 else "duplicated"] += 1
                slots.release()

        async def sampler() -> None:
            pids = [p.pid for p in handle._procs]
            while True:
                states = await client.call_utility("get_engine_state")
                samples.append({
                    "t_s": round(loop.time() - t0, 1), "requests_sent": sent,
                    "client_in_flight": sum(client.in_flight().values()),
                    "engine_open": sum(s["num_running"] + s["num_waiting"] for s in states.values()),
                    "client_rss_mib": round(rss_kib() / 1024, 1),
                    "engine_rss_mib": [round(rss_kib(p) / 1024, 1) for p in pids],
                })
                await asyncio.sleep(sample_s)

        tasks: set[asyncio.Task] = set()
        try:
            await client.wait_ready()
            t0 = loop.time()
            sampling = asyncio.ensure_future(sampler())
            while loop.time() - t0 < seconds:
                await slots.acquire()
                task = asyncio.ensure_future(one(sent))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent += 1
            if tasks:
                await asyncio.wait(tasks, timeout=60)
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
            deadline = loop.time() + 10
            while True:  # dropped streams' auto-aborts drain shortly after
                states = await client.call_utility("get_engine_state")
                idle = all(s["num_running"] == 0 and s["num_waiting"] == 0 for s in states.values())
                if idle or loop.time() > deadline:
                    break
                await asyncio.sleep(0.05)
            in_flight = sum(client.in_flight().values())
            samples.append({"t_s": round(loop.time() - t0, 1), "requests_sent": sent,
                            "client_in_flight": in_flight, "engine_open": sum(
                                s["num_running"] + s["num_waiting"] for s in states.values()),
                            "client_rss_mib": round(rss_kib() / 1024, 1),
                            "engine_rss_mib": [round(rss_kib(p.pid) / 1024, 1) for p in handle._procs]})
        finally:
            await client.shutdown()
            await asyncio.to_thread(handle.stop, 10)
    first, last = samples[0], samples[-1]
    growth = {"client": round(last["client_rss_mib"] - first["client_rss_mib"], 1),
              "engines": [round(b - a, 1) for a, b in zip(first["engine_rss_mib"], last["engine_rss_mib"])]}
    return {
        "campaign": "soak", "seconds": seconds, "engines": engines, "concurrency": concurrency,
        "requests": sent, "ended_once": outcome["ended_once"],
        "lost": sent - outcome["ended_once"] - outcome["duplicated"], "duplicated": outcome["duplicated"],
        "terminals_by_kind": dict(kinds), "in_flight_at_end": in_flight, "engines_idle_at_end": idle,
        "rss_growth_mib": growth, "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--engines", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples (default 60)")
    p.add_argument("--rss-bound-mib", type=float, default=16.0, help="largest RSS growth per process")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    r = asyncio.run(soak(args.minutes * 60, engines=args.engines, concurrency=args.concurrency,
                         sample_s=args.sample_s, seed=args.seed))
    g = r["rss_growth_mib"]
    r["passed"] = (r["lost"] == 0 and r["duplicated"] == 0 and r["ended_once"] == r["requests"]
                   and not any(k.startswith("error:") for k in r["terminals_by_kind"])
                   and r["in_flight_at_end"] == 0 and r["engines_idle_at_end"]
                   and max([g["client"], *g["engines"]]) <= args.rss_bound_mib)
    print(json.dumps(r, indent=1))
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
