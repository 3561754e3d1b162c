"""The whole engine role against an engine that cannot do DP, side by side with a correct engine.

Run: ``python -m benchmarks.engine_role_fail_fast [--runs N]``. Each run launches, as
subprocesses over ipc with the default budgets (``--startup-timeout 60``):

* the reference engine (``ecp engine``): every case passes;
* the test suite's scripted engine with ``--bug one-rank-only``: it answers the handshake for its
  first rank only, so every DP case fails (the first one after the sibling budget, the others
  blocked by it at once).

It prints each run's wall time and outcome counts, then the median per engine and their ratio.
The targets: the failing engine's run at most 60 s, the correct engine's at most 15 s (on 2 cores).
Its short variant is tests/conformance/test_fail_fast.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTED = ROOT / "tests" / "conformance" / "scripted_engine.py"
PEERS = {
    "reference": [sys.executable, "-m", "ecp.reference.engine"],
    "one-rank-only": [sys.executable, str(SCRIPTED), "--bug", "one-rank-only"],
}
PLACEHOLDERS = ["--handshake-address", "{handshake_address}", "--engine-count", "{engine_count}",
                "--engine-start-index", "{engine_start_index}"]


def one_run(name: str, workdir: Path) -> tuple[float, Counter]:
    out = workdir / f"{name}.json"
    cmd = [sys.executable, "-m", "ecp.spec.cli", "conformance", "engine", "--json", str(out), "--",
           *PEERS[name], *PLACEHOLDERS]
    started = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900, check=False)
    elapsed = time.monotonic() - started
    cases = json.loads(out.read_text())["cases"]
    return elapsed, Counter(c["outcome"] for c in cases)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1, help="runs per engine, interleaved (1)")
    args = p.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in PEERS}
    with tempfile.TemporaryDirectory(prefix="ecp-failfast-") as tmp:
        for i in range(args.runs):
            for name in PEERS:  # interleaved: both engines see the same machine load
                elapsed, outcomes = one_run(name, Path(tmp))
                times[name].append(elapsed)
                print(f"run {i + 1} {name:<14} {elapsed:6.1f}s  {dict(sorted(outcomes.items()))}", flush=True)
    med = {name: statistics.median(v) for name, v in times.items()}
    for name, m in med.items():
        print(f"median {name:<14} {m:6.1f}s")
    print(f"one-rank-only / reference: {med['one-rank-only'] / med['reference']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
