"""Benchmark ``ecp serve`` with ``ecp bench serve`` at several concurrencies.

Starts ``ecp serve`` (embedded synthetic engines, no artificial step time, so
the frontend + client are what is measured), runs the load generator against
it at each concurrency and prints a Markdown table for ``docs/frontend.md``.

    .venv/bin/python -m benchmarks.serve_bench --concurrency 1 64 256 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys

from ecp.reference.frontend.bench import run_bench


def start_serve(extra: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # bounded by the server's own handshake timeout
        m = re.search(r"serving .* on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("ecp serve exited before serving")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--requests-per-concurrency", type=int, default=4, help="requests = max(32, k x concurrency)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--data-parallel-size", type=int, default=1)
    ap.add_argument("--engine-args", default="", help='e.g. "--step-time-ms 10" (a GPU-like decode step)')
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    proc, url = start_serve(["--data-parallel-size", str(args.data_parallel_size), "--handshake-timeout", "60",
                             "--engine-args", args.engine_args])
    rows = []
    try:
        for c in args.concurrency:
            n = max(32, args.requests_per_concurrency * c)
            rows.append(asyncio.run(run_bench(url, model=None, concurrency=c, num_requests=n,
                                              prompt_len=args.prompt_len, max_tokens=args.max_tokens,
                                              timeout=300, progress=True)))
    finally:
        proc.terminate()
        proc.wait(30)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| concurrency | requests | failed | req/s | output tok/s | TTFT p50/p90/p99 ms | ITL p50/p90/p99 ms |")
    print("|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        t, i = r["ttft_ms"], r["itl_ms"]
        print(f"| {r['concurrency']} | {r['num_requests']} | {r['failed']} | {r['request_throughput']} | "
              f"{r['output_tokens_per_s']} | {t['p50']} / {t['p90']} / {t['p99']} | "
              f"{i['p50']} / {i['p90']} / {i['p99']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
