"""What the explorer itself costs per message (not a test).

    python -m benchmarks.explore_cost [--sessions 40] [--engine-count 2] [--seed 0]

Plays the first N seeded sessions of ``ecp conformance explore engine`` against the fault-free
reference engine (every rank in one process, no step time: as fast an engine as there is) and
prints the explorer's CPU time per message judged (its own process only: encoding, the protocol
machine in recording mode, the transcript, the oracle), the wall time per session split into
launch and play, and the messages per second of wall time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from ecp.conformance.explore.run import ExploreOptions, Runner

ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--engine-count", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet-window", type=float, default=0.3, help="seconds, as explore's --quiet-window (0.3)")
    args = ap.parse_args()
    opts = ExploreOptions(command=ENGINE, engine_count=args.engine_count, quiet_window_s=args.quiet_window)
    messages = findings = 0
    launch = play = 0.0
    with tempfile.TemporaryDirectory() as workdir:
        runner = Runner(opts, workdir)
        cpu0, wall0 = time.process_time(), time.monotonic()
        try:
            for k in range(args.sessions):
                r = runner.play(runner.draw(args.seed + k), reuse=True)
                messages += r.frames_sent + r.frames_received
                findings += bool(r.findings)
                launch += r.launch_s
                play += r.run_s
        finally:
            runner.close()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    n = args.sessions
    print(f"{n} sessions, {messages} messages, {findings} with findings, {wall:.1f} s wall")
    print(f"explorer CPU per message: {1e6 * cpu / max(messages, 1):.0f} us ({cpu:.2f} s CPU in all)")
    print(f"per session: {wall / n:.2f} s wall = launch {launch / n:.2f} s + play {play / n:.2f} s + stop "
          f"{(wall - launch - play) / n:.2f} s")
    print(f"messages per wall second: {messages / wall:.0f}; sessions in 10 minutes: {600 * n / wall:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
