"""Decode throughput of the torch executor next to the synthetic executor.

Drives executors directly through the engine's executor interface (no
sockets, no scheduler): B sequences are prefilled in one step, warmed up,
then decoded for ``--steps`` steps, one forward per step for the whole batch.
Reports decode tokens/s and ms per step for each batch size.

    python -m benchmarks.gpu_decode --device cuda --model random:small          # the GPU figures
    python -m benchmarks.gpu_decode --device cpu --model random:tiny --steps 32  # the CPU figures

Figures go to ``docs/gpu.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time


def make_sequences(batch: int, prompt_len: int, max_len: int, block_size: int, vocab: int, seed: int):
    import random

    rng = random.Random(seed)
    blocks_per_seq = -(-max_len // block_size)
    return [
        {
            "id": f"req-{i}",
            "prompt": [rng.randrange(3, vocab) for _ in range(prompt_len)],
            "output": [],
            "blocks": list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)),
        }
        for i in range(batch)
    ], batch * blocks_per_seq


def run_one(executor, batch: int, args) -> dict:
    from ecp.reference.engine.executor import ScheduledSpan, StepBatch
    from ecp.spec import SamplingParams

    params = SamplingParams(temperature=args.temperature, ignore_eos=True)
    max_len = args.prompt_len + args.warmup + args.steps + 1
    seqs, num_blocks = make_sequences(batch, args.prompt_len, max_len, args.block_size,
                                      getattr(executor, "vocab_size", 32000), args.seed)
    executor.initialize(num_blocks, args.block_size)

    def step(prefill: bool) -> None:
        spans = []
        for s in seqs:
            tokens = s["prompt"] + s["output"]
            start = 0 if prefill else len(tokens) - 1
            spans.append(ScheduledSpan(s["id"], tokens[start:], start, s["blocks"], True, params,
                                       s["prompt"], list(s["output"]), start == 0))
        result = executor.execute(StepBatch(spans))
        for s in seqs:
            s["output"].extend(result.sampled[s["id"]][:1])

    step(prefill=True)
    for _ in range(args.warmup):
        step(prefill=False)
    sync = _synchronizer(executor)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(prefill=False)
    sync()
    elapsed = time.perf_counter() - t0
    executor.release([s["id"] for s in seqs])
    return {"batch": batch, "steps": args.steps, "seconds": elapsed,
            "tokens_per_s": batch * args.steps / elapsed, "ms_per_step": 1000 * elapsed / args.steps}


def _synchronizer(executor):
    device = getattr(executor, "device", None)
    if device is not None and getattr(device, "type", "") == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def build_executors(args) -> list[tuple[str, object]]:
    from ecp.reference.engine.torch_executor import TorchExecutor

    torch_ex = TorchExecutor(args.model, args.device, args.seed, args.dtype)
    out = [(f"torch {args.model} {torch_ex.device} {torch_ex.dtype}", torch_ex)]
    try:
        from ecp.reference.engine.synthetic import SyntheticExecutor
    except ImportError:
        print("(synthetic executor not importable: reference engine missing; torch only)", file=sys.stderr)
    else:
        out.append(("synthetic", SyntheticExecutor(seed=args.seed, vocab_size=torch_ex.vocab_size)))
    return out


def device_name(args) -> str:
    import torch

    from ecp.reference.engine.torch_executor import resolve_device

    dev = resolve_device(args.device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="random:small")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default=None)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 32, 128])
    p.add_argument("--steps", type=int, default=64, help="timed decode steps per batch size")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 avoids spin-wait stalls on busy hosts)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    results = {"device": device_name(args), "model": args.model, "prompt_len": args.prompt_len,
               "block_size": args.block_size, "rows": []}
    print(f"device: {results['device']}; prompt {args.prompt_len} tokens, {args.steps} decode steps")
    print(f"{'executor':<40} {'batch':>5} {'tokens/s':>12} {'ms/step':>9}")
    for name, executor in build_executors(args):
        for batch in args.batch:
            row = run_one(executor, batch, args)
            row["executor"] = name
            results["rows"].append(row)
            print(f"{name:<40} {batch:>5} {row['tokens_per_s']:>12.1f} {row['ms_per_step']:>9.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
