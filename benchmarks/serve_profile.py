"""Where ``ecp serve`` spends its time under load, and how much of it is decode-limit checking.

Runs ``ecp serve`` (synthetic engines) under ``cProfile``, drives it with
``ecp bench serve -c CONCURRENCY``, stops it with SIGINT and reads the profile
of the server process (the engines are separate processes, not profiled).

    python -m benchmarks.serve_profile --concurrency 256 --num-requests 1024

Prints the server's total profiled time, the share spent in the codec's
pre-decode / limit checks (``ecp.spec.limits.check_frame``, the untyped-depth
checkers of ``ecp.spec.untyped``, and the own time of the codec's generated hot paths,
whose length tests and inlined depth checks are all they do besides calling msgspec:
an upper bound), the share in decoding output frames
(``decode_outputs`` including msgspec) and the top functions by own time.
cProfile slows Python code more than C code, so the shares of the (Python)
checks are if anything overstated.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import signal
import subprocess
import sys
import tempfile

CHECK_FUNCS = {("limits.py", "check_frame"), ("untyped.py", "_nesting_exceeds"),
               ("untyped.py", "_walk_exceeds"), ("untyped.py", "locate_too_deep")}


HOT_PATH = "<ecp.spec.codec hot path"


def _is_check(key: tuple[str, int, str]) -> bool:
    path, _, name = key
    if path.startswith("<ecp depth checker") or path.startswith(HOT_PATH):  # generated code
        return True
    return (os.path.basename(path), name) in CHECK_FUNCS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", "-c", type=int, default=256)
    ap.add_argument("--num-requests", "-n", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--top", type=int, default=12, help="functions to list by own time")
    ap.add_argument("--engine-args", default="", help='passed to the embedded engines, e.g. "--step-time-ms 10"')
    ap.add_argument("--sort", choices=("tottime", "cumtime"), default="tottime", help="order of the top list")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, "serve.prof")
        server = subprocess.Popen([sys.executable, "-m", "cProfile", "-o", prof, "-m", "ecp.spec.cli", "serve",
                                   "--port", "0", "--engine-args", args.engine_args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        try:
            for line in server.stderr:  # bounded by the server's own handshake timeout
                m = re.search(r"serving .* on (http://\S+)", line)
                if m:
                    url = m.group(1)
                    break
            if url is None:
                raise RuntimeError("ecp serve exited before serving")
            bench = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "bench", "serve", "--url", url,
                                    "-c", str(args.concurrency), "-n", str(args.num_requests),
                                    "--max-tokens", str(args.max_tokens), "--json", "--no-progress"],
                                   capture_output=True, text=True, timeout=900)
            load = json.loads(bench.stdout) if bench.stdout.strip() else {"error": bench.stderr[-500:]}
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
        stats = pstats.Stats(prof)

    entries = stats.stats  # type: ignore[attr-defined]
    total = stats.total_tt  # type: ignore[attr-defined]
    checks = sum(tt for key, (_, _, tt, _, _) in entries.items() if _is_check(key))
    decode = sum(ct for key, (_, _, _, ct, _) in entries.items()
                 if key[2] == "decode_outputs" and (key[0].endswith("codec.py") or key[0].startswith(HOT_PATH)))
    col = 2 if args.sort == "tottime" else 3
    top = sorted(entries.items(), key=lambda kv: kv[1][col], reverse=True)[:args.top]
    result = {
        "concurrency": args.concurrency, "num_requests": args.num_requests, "load": load,
        "profiled_s": round(total, 3), "checks_s": round(checks, 4),
        "checks_pct": round(100 * checks / total, 2) if total else None,
        "decode_outputs_s": round(decode, 4),
        "decode_outputs_pct": round(100 * decode / total, 2) if total else None,
        "top": [{"function": f"{os.path.basename(k[0])}:{k[1]}({k[2]})", "own_s": round(v[2], 4), "cum_s": round(v[3], 4),
                 "calls": v[1]} for k, v in top],
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"ecp serve under ecp bench serve -c {args.concurrency} -n {args.num_requests}: "
          f"{load.get('output_tokens_per_s', load)} output tok/s (profiled, so slower than unprofiled)")
    print(f"profiled time of the server process: {total:.2f} s")
    print(f"pre-decode / limit checks: {checks:.4f} s = {result['checks_pct']} %")
    print(f"decode_outputs (all of it, msgspec included): {decode:.4f} s = {result['decode_outputs_pct']} %")
    print(f"top functions by {args.sort} (own s, cumulative s, calls):")
    for row in result["top"]:
        print(f"  {row['own_s']:>8.3f} {row['cum_s']:>8.3f} {row['calls']:>9}  {row['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
