"""How fast ``ecp conformance explore engine|frontend``, run with its defaults, finds each ``--bug``
fault of ``ecp engine`` or ``ecp serve`` (not a test).

    python -m campaigns.explore_faults [--role engine|frontend] [--budget 120] [--seed 0]
        [--fault NAME ...] [--peer-flag FLAG ...] [-- EXTRA EXPLORE OPTIONS]

For each fault, with no hint of which rule it breaks, this runs what a user would run:
``ecp conformance explore engine --budget BUDGET --seed SEED -- ecp engine --handshake-address
{handshake_address} --engine-count {engine_count} --bug NAME`` (``ecp serve …`` with ``--role
frontend``), its options built by the CLI's own parser (:func:`ecp.conformance.explore.commands.options`),
so every default is the CLI's; only ``--max-findings 1`` is added (the row is about the first
finding), and the options after ``--`` if given (``--peer-flag`` adds to the peer's command). The budget bounds the whole run, shrinking
included. Each row: fault, the clause of its table row, the clause found, time to find, sessions
explored, steps before and after shrinking, shrink replays, the wall time of the whole run, and
whether a replay of the reproducer against a fresh launch shows the same clause. The seeded test of
this is ``tests/conformance/test_explore.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from ecp.conformance.explore.commands import options
from ecp.conformance.explore.reproducer import read
from ecp.conformance.explore.run import explore, runner_for
from ecp.reference.engine.faults import FAULTS as ENGINE_FAULTS
from ecp.reference.frontend.faults import SERVE_FAULTS

ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}"]
SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}", "--dev-mode"]


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=("engine", "frontend"), default="engine",
                    help="engine: ecp engine's faults; frontend: ecp serve's (engine)")
    ap.add_argument("--budget", default="120", help="--budget of each run (120)")
    ap.add_argument("--seed", default="0")
    ap.add_argument("--fault", action="append", default=None, help="only these faults (repeatable)")
    ap.add_argument("--peer-flag", action="append", default=[], metavar="FLAG",
                    help="append FLAG to the peer's command, e.g. --peer-flag=--step-time-ms --peer-flag=1 (repeatable)")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    FAULTS = SERVE_FAULTS if args.role == "frontend" else ENGINE_FAULTS
    peer = SERVE if args.role == "frontend" else ENGINE
    faults = args.fault or list(FAULTS)
    print("| fault | its clause | found | time to find | sessions | steps (drawn -> shrunk) | shrink replays "
          "| wall time | replay |")
    print("|---|---|---|---|---|---|---|---|---|")
    missed = 0
    with tempfile.TemporaryDirectory(prefix="ecp-explore-bench-") as out:
        for fault in faults:
            opts = options([args.role, "--budget", args.budget, "--seed", args.seed, "--out", str(Path(out) / fault),
                            "--max-findings", "1", "--quiet", *extra, "--", *peer, *args.peer_flag, "--bug", fault])
            t0 = time.monotonic()
            report = explore(opts, say=lambda line: None)
            total = time.monotonic() - t0
            if not report.findings:
                missed += 1
                print(f"| {fault} | {FAULTS[fault].clause} | nothing | > {opts.budget_s:.0f} s | {report.sessions} "
                      f"| - | - | {total:.0f} s | - |", flush=True)
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
                  f"| {f.steps_before} -> {f.steps_after} | {f.shrink_runs} | {total:.0f} s "
                  f"| {'same clause' if again else 'NOT shown'} |",
                  flush=True)
    print(f"\n{len(faults) - missed} of {len(faults)} faults found within --budget {args.budget} each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
