"""How fast ``ecp conformance explore engine|frontend`` finds each ``--bug`` fault of ``ecp engine``
or ``ecp serve`` (not a test).

    python benchmarks/explore_faults.py [--role engine|frontend] [--budget 120] [--seed 0]
        [--engine-count 2] [--fault NAME ...] [--step-timeout 3] [--shrink-budget 120]

With ``--role frontend`` the rows are ``ecp serve``'s faults (its own and its client's), explored
with scripted engines; the rest is the same.

For each fault of the reference engine's table, with no hint of which rule it breaks: explore
``ecp engine --bug NAME`` (every rank in one process, ``--step-time-ms 1``) for at most the
budget, stop at the first finding, shrink it, replay the reproducer once more against a fresh
launch, and print one row: fault, the clause of its table row, the clause found, time to find,
sessions explored, steps before and after shrinking, shrink replays, the seconds shrinking took,
and whether the replay shows the same clause. The seeded test of this is ``tests/conformance/test_explore.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from ecp.conformance.explore.reproducer import read
from ecp.conformance.explore.run import ExploreOptions, explore, runner_for
from ecp.reference.engine.faults import FAULTS as ENGINE_FAULTS
from ecp.reference.frontend.faults import SERVE_FAULTS

ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process", "--step-time-ms", "1"]
SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}", "--dev-mode"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("engine", "frontend"), default="engine",
                    help="engine: ecp engine's faults; frontend: ecp serve's (engine)")
    ap.add_argument("--budget", type=float, default=120.0, help="exploration seconds per fault (120)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine-count", type=int, default=2)
    ap.add_argument("--fault", action="append", default=None, help="only these faults (repeatable)")
    ap.add_argument("--step-timeout", type=float, default=3.0,
                    help="seconds a wait step or the end of a session may take (3; the CLI's default is 10)")
    ap.add_argument("--shrink-budget", type=float, default=120.0, help="shrinking seconds per fault (120)")
    args = ap.parse_args()
    FAULTS = SERVE_FAULTS if args.role == "frontend" else ENGINE_FAULTS
    peer = SERVE if args.role == "frontend" else ENGINE
    faults = args.fault or list(FAULTS)
    print("| fault | its clause | found | time to find | sessions | steps (drawn -> shrunk) | shrink replays "
          "| shrink time | replay |")
    print("|---|---|---|---|---|---|---|---|---|")
    missed = 0
    with tempfile.TemporaryDirectory(prefix="ecp-explore-bench-") as out:
        for fault in faults:
            command = [*peer, "--bug", fault]
            opts = ExploreOptions(command=command, role=args.role, engine_count=args.engine_count, budget_s=args.budget,
                                  seed=args.seed, out_dir=Path(out) / fault, max_findings=1,
                                  step_timeout_s=args.step_timeout, shrink_s=args.shrink_budget)
            t0 = time.monotonic()
            report = explore(opts, say=lambda line: None)
            total = time.monotonic() - t0
            if not report.findings:
                missed += 1
                print(f"| {fault} | {FAULTS[fault].clause} | nothing | > {args.budget:.0f} s | {report.sessions} "
                      "| - | - | - | - |", flush=True)
                continue
            f = report.findings[0]
            doc = read(f.path)
            with tempfile.TemporaryDirectory() as workdir:
                runner = runner_for(opts, workdir)
                try:
                    again = f.clause in runner.play(doc["session"]).clauses
                finally:
                    runner.close()
            print(f"| {fault} | {FAULTS[fault].clause} | {f.clause} | {f.found_after_s:.1f} s | {report.sessions} "
                  f"| {f.steps_before} -> {f.steps_after} | {f.shrink_runs} | {total - f.found_after_s:.0f} s "
                  f"| {'same clause' if again else 'NOT shown'} |",
                  flush=True)
    print(f"\n{len(faults) - missed} of {len(faults)} faults found within {args.budget:.0f} s each "
          f"({time.strftime('%H:%M:%S')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
