"""Throughput of synthetic reference engines driven flat out, and the scheduler's per-step cost.

    .venv/bin/python -m benchmarks.engine_throughput [--seconds 5] [--concurrency 1 64 512] [--engines 1 2]

Part 1 starts N engines (data parallel, ``--engines``), each as its own OS
process (``mode="process"``, synthetic executor, zero step cost), behind a
raw-frame frontend in this process that keeps C requests in flight in all
(spread round-robin; prompt 32 tokens, ``max_tokens`` 128) and decodes every
output with ``ecp.spec``. It reports output tokens/s and engine steps/s (summed).

Part 2 measures the sans-IO scheduler alone (``Scheduler.schedule`` +
``update``, no executor, no IO) with R running decode requests: microseconds
per step and per scheduled request.

Not a test: figures go to docs/engine.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import zmq

from ecp.conformance.engine.harness_frontend import Addresses, HarnessFrontend
from ecp.conformance.transcript import Transcript
from ecp.spec import EngineCoreOutputs, EngineCoreRequest, SamplingParams, decode_outputs, encode_add, encode_utility
from ecp.reference.engine import launch

PROMPT = list(range(100, 132))
MAX_TOKENS = 128


def _drive(concurrency: int, seconds: float, tmp: str, engines: int = 1) -> dict:
    ctx = zmq.Context()
    tag = f"{engines}-{concurrency}"
    front = HarnessFrontend(ctx, Addresses(f"ipc://{tmp}/hs-{tag}", [f"ipc://{tmp}/in-{tag}"],
                                           [f"ipc://{tmp}/out-{tag}"]),
                            engine_count=engines, start_index=0, transcript=Transcript())
    handle = launch(front.addresses.handshake, engines, 0, mode="process", max_model_len=512,
                    num_gpu_blocks=max(4096, concurrency * 16), max_num_seqs=max(256, concurrency),
                    max_num_batched_tokens=max(2048, concurrency * 33), disable_log_stats=False,
                    log_level="WARNING", stderr=subprocess.DEVNULL)
    try:
        # the harness frontend runs the handshake; the hot loop below uses its sockets raw (no transcript)
        front.run_handshake(60)
        idents, inp, out = [front.identity(r) for r in range(engines)], front.inputs[0], front.outputs[0]
        sp = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
        seq = 0

        def submit() -> None:
            nonlocal seq
            seq += 1
            req = EngineCoreRequest(f"b{seq}", PROMPT, None, sp, None, time.time(), None, None, None)
            inp.send_multipart([idents[seq % engines], *encode_add(req)])

        def ask_steps(call_id: int) -> None:
            for ident in idents:
                inp.send_multipart([ident, *encode_utility(0, call_id, "get_engine_state", [])])

        for _ in range(concurrency):
            submit()
        tokens = finished = 0
        steps_before: dict[int, int] = {}
        t0 = time.perf_counter()
        warm_until = t0 + min(1.0, seconds / 5)
        measuring = False
        while True:
            now = time.perf_counter()
            if not measuring and now >= warm_until:
                measuring, tokens, finished, t_start = True, 0, 0, now
                ask_steps(1)
            if measuring and now - t_start >= seconds:
                break
            if not out.poll(1000):
                raise RuntimeError("engine stopped producing")
            while True:
                try:
                    frames = out.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = decode_outputs(frames)
                if not isinstance(msg, EngineCoreOutputs):
                    raise RuntimeError("engine died")
                if msg.utility_output is not None and msg.utility_output.call_id == 1:
                    steps_before[msg.engine_index] = msg.utility_output.result.value["step_counter"]
                for o in msg.outputs:
                    tokens += len(o.new_token_ids)
                    if o.finish_reason is not None:
                        finished += 1
                        submit()
        elapsed = time.perf_counter() - t_start
        ask_steps(2)
        steps_after: dict[int, int] = {}
        while len(steps_after) < engines and out.poll(5000):
            msg = decode_outputs(out.recv_multipart())
            if msg.utility_output is not None and msg.utility_output.call_id == 2:
                steps_after[msg.engine_index] = msg.utility_output.result.value["step_counter"]
        steps = sum(steps_after[r] - steps_before[r] for r in steps_after if r in steps_before)
        return {"engines": engines, "engines_counted": len(steps_after.keys() & steps_before.keys()),
                "concurrency": concurrency, "seconds": elapsed, "output_tokens": tokens,
                "tokens_per_s": tokens / elapsed, "requests_per_s": finished / elapsed,
                "steps_per_s": steps / elapsed}
    finally:
        handle.stop(timeout=10)
        ctx.destroy(linger=0)


def _scheduler_cost(running: int, steps: int = 200) -> dict:
    from ecp.reference.engine.scheduler import EngineRequest, Scheduler, Status

    s = Scheduler(num_blocks=running * 40 + 64, block_size=16, max_num_seqs=running,
                  max_num_batched_tokens=max(2048, running * 33), max_model_len=4096)
    for i in range(running):
        s.add(EngineRequest(request_id=f"r{i}", prompt_token_ids=list(range(100 + i, 132 + i)),
                            sampling_params=SamplingParams(max_tokens=10_000), max_tokens=10_000))

    def one_step() -> None:
        out = s.schedule()
        s.update(out)
        for span, (req, _) in zip(out.batch.spans, out.scheduled):
            if span.sample and req.status is Status.RUNNING:
                req.output_token_ids.append(17)

    one_step()  # the prefill step
    # best of 5 blocks: the machine is shared, the minimum is the least disturbed figure
    per_step = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(steps // 5):
            one_step()
        per_step = min(per_step, (time.perf_counter() - t0) / (steps // 5))
    return {"running": running, "us_per_step": per_step * 1e6, "us_per_request": per_step * 1e6 / running}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 512])
    ap.add_argument("--engines", type=int, nargs="+", default=[1], help="data-parallel engine counts to run")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()}")
    print("\n# synthetic engines (each its own process), flat out; prompt 32, max_tokens 128, ignore_eos")
    print(f"{'engines':>7} {'concurrency':>11} {'output tok/s':>13} {'requests/s':>11} {'steps/s':>9}")
    with tempfile.TemporaryDirectory(prefix="ecp-bench-") as tmp:
        for n in args.engines:
            for c in args.concurrency:
                r = _drive(c, args.seconds, tmp, n)
                print(f"{n:>7} {c:>11} {r['tokens_per_s']:>13,.0f} {r['requests_per_s']:>11,.1f} "
                      f"{r['steps_per_s']:>9,.0f}")
    print("\n# scheduler alone (schedule + update per decode step, best of 5 blocks)")
    print(f"{'running':>7} {'us/step':>9} {'us/request':>11}")
    for n in (1, 64, 512):
        r = _scheduler_cost(n, 500 if n < 512 else 100)
        print(f"{n:>7} {r['us_per_step']:>9,.1f} {r['us_per_request']:>11,.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
