"""Fuzz the reference client's output socket with malformed frames and count what survives.

An undecodable output makes a conforming client fail closed (``ECP-ROB-3``):
the first error is sticky and ends every open stream. So the campaign runs in
episodes. Each episode starts a fresh :class:`~ecp.reference.client.EngineCoreClient`
against a reference engine (a thread of this process), opens ``--streams``
well-formed long requests, then connects a PUSH socket of its own to the
client's output address and sends ``--per-episode`` malformed output messages
(:mod:`fuzz_corpus`). Pass criteria, per episode:

* no crash: the client's output loop is still running and has consumed every
  frame (``stats.output_messages``) within ``--bound`` seconds (no hang);
* the client failed with a typed ``ProtocolError`` naming a clause;
* every open stream ended exactly once (one error or one finished output,
  nothing after it) within ``--bound`` seconds; no stream was lost.

RSS of this process is sampled after each episode. Run
``python -m campaigns.fuzz_client --frames 100000``; it prints one JSON object
and exits 1 if a criterion failed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from typing import Any


import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

from campaigns.fuzz_corpus import Mutator, is_valid  # noqa: E402
from benchmarks.procstat import py_blocks, rss_kib  # noqa: E402

from ecp.reference.client import ClientConfig, EngineCoreClient  # noqa: E402
from ecp.reference.engine import launch  # noqa: E402
from ecp.spec import EngineCoreRequest, ProtocolError, SamplingParams  # noqa: E402


def long_request(rid: str) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3, 4], None, SamplingParams(max_tokens=400, temperature=0.0,
                                                                       ignore_eos=True),
                             None, time.time(), None, None, None)


async def _consume(stream: Any, record: dict[str, Any]) -> None:
    try:
        async for out in stream:
            if record["ends"]:
                record["after_end"] += 1
            if out.finish_reason is not None:
                record["ends"] += 1
    except Exception as exc:  # the sticky client error ends the stream
        record["ends"] += 1
        record["error"] = exc


async def _episode(n: int, mut: Mutator, per_episode: int, streams: int, bound_s: float, tmp: str,
                   tally: collections.Counter, examples: list[str]) -> None:
    out_addr = f"ipc://{tmp}/out-{n}"
    client = EngineCoreClient(ClientConfig(handshake_timeout_s=20, ready_timeout_s=20, utility_timeout_s=10,
                                           output_address=out_addr, handshake_address=f"ipc://{tmp}/hs-{n}",
                                           input_address=f"ipc://{tmp}/in-{n}"))
    await client.bind()
    handle = launch(client.handshake_address, 1, mode="thread", max_model_len=512, num_gpu_blocks=512,
                    step_time_ms=5, handshake_timeout_s=20)
    ctx = zmq.asyncio.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        await client.wait_ready()
        records = [{"ends": 0, "after_end": 0, "error": None} for _ in range(streams)]
        opened = [await client.add(long_request(f"ep{n}-s{i}")) for i in range(streams)]
        tasks = [asyncio.ensure_future(_consume(s, r)) for s, r in zip(opened, records)]
        push.connect(out_addr)
        base = client.stats.output_messages
        sent = 0
        while sent < per_episode:
            fz = mut.next()
            if is_valid("output", fz.frames):
                tally["skipped_still_valid"] += 1
                continue
            tally[f"strategy:{fz.strategy}"] += 1
            await push.send_multipart(fz.frames)
            sent += 1
        tally["frames_sent"] += sent
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound_s
        # wait (bounded) for the fuzzer's frames to be consumed: engine outputs count too, hence >=
        while client.stats.output_messages - base < sent and loop.time() < deadline:
            await asyncio.sleep(0.005)
        done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
        consumed = client.stats.output_messages - base
        output_loop_alive = all(not t.done() for t in client._tasks)  # background tasks never end on their own
        if consumed < sent or not output_loop_alive:
            tally["hangs" if output_loop_alive else "crashes"] += 1
            if len(examples) < 5:
                examples.append(f"episode {n}: consumed {consumed}/{sent}, output loop alive {output_loop_alive}")
        if pending:
            tally["hangs"] += 1
            tally["lost"] += len(pending)
            for t in pending:
                t.cancel()
        err = client.error
        if not isinstance(err, ProtocolError) or not getattr(err, "clause", None):
            tally["untyped_errors"] += 1
            if len(examples) < 5:
                examples.append(f"episode {n}: client error {err!r}")
        for r in records:
            tally["streams"] += 1
            if r["ends"] == 1 and not r["after_end"]:
                tally["streams_ended_once"] += 1
            elif r["ends"] > 1 or r["after_end"]:
                tally["duplicated"] += 1
        tally["episodes"] += 1
    finally:
        # the engine first: stopped after the client, its output PUSH would linger on a closed peer
        await asyncio.get_running_loop().run_in_executor(None, handle.stop, 10)
        await client.shutdown()
        push.close(0)
        ctx.term()


def fuzz_client(frames: int, seed: int, *, per_episode: int = 50, streams: int = 8,
                bound_s: float = 5.0) -> dict[str, Any]:
    """The campaign (module doc); returns the figures."""
    mut = Mutator("output", seed)
    tally: collections.Counter = collections.Counter()
    examples: list[str] = []
    samples: list[tuple[int, int]] = []
    blocks = py_blocks()
    started = time.monotonic()

    async def body() -> None:
        with tempfile.TemporaryDirectory(prefix="ecp-fuzz-") as tmp:
            n = 0
            while tally["frames_sent"] < frames:
                await _episode(n, mut, min(per_episode, frames - tally["frames_sent"]), streams, bound_s, tmp,
                               tally, examples)
                if n == 0 or tally["frames_sent"] >= frames or n % 50 == 0:
                    samples.append((tally["frames_sent"], rss_kib()))
                n += 1

    asyncio.run(body())
    elapsed = time.monotonic() - started
    blocks_retained = py_blocks() - blocks
    rss = [k for _, k in samples]
    return {
        "target": "client-output", "seed": seed, "frames_sent": tally["frames_sent"],
        "episodes": tally["episodes"], "streams": tally["streams"],
        "streams_ended_once": tally["streams_ended_once"], "lost": tally["lost"],
        "duplicated": tally["duplicated"], "crashes": tally["crashes"] + tally["untyped_errors"],
        "untyped_errors": tally["untyped_errors"], "hangs": tally["hangs"], "hang_bound_s": bound_s,
        "skipped_still_valid": tally["skipped_still_valid"], "examples": examples,
        "rss_start_mib": round(rss[0] / 1024, 1), "rss_end_mib": round(rss[-1] / 1024, 1),
        "rss_peak_mib": round(max(rss) / 1024, 1), "rss_growth_mib": round((rss[-1] - rss[0]) / 1024, 1),
        "py_blocks_retained": blocks_retained,
        "seconds": round(elapsed, 1), "frames_per_s": round(tally["frames_sent"] / elapsed),
        "strategies": {k.split(":", 1)[1]: v for k, v in tally.items() if k.startswith("strategy:")},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--per-episode", type=int, default=50, help="malformed frames per client (default 50)")
    p.add_argument("--streams", type=int, default=8, help="open streams per client (default 8)")
    p.add_argument("--bound", type=float, default=5.0)
    p.add_argument("--rss-bound-mib", type=float, default=16.0)
    args = p.parse_args(argv)
    r = fuzz_client(args.frames, args.seed, per_episode=args.per_episode, streams=args.streams, bound_s=args.bound)
    r["passed"] = (r["crashes"] == 0 and r["hangs"] == 0 and r["lost"] == 0 and r["duplicated"] == 0
                   and r["streams_ended_once"] == r["streams"] and r["rss_growth_mib"] <= args.rss_bound_mib)
    print(json.dumps(r, indent=1))
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
