"""Interrupt real conformance runs and explorations at seeded random moments; check that each ends
within its bound and leaves no process behind (not a test; its short seeded variant is
``tests/conformance/test_interrupt_storm.py``).

    python -m campaigns.interrupt_storm [--count 50] [--seed 0] [--modes engine,frontend,explore]
        [--min-delay 0.2] [--max-delay 12] [--bound 25] [--second 0.3] [--json FILE]

Each round starts one run as a user would (``ecp conformance engine -- ecp engine …``,
``ecp conformance frontend -- ecp serve …`` or ``ecp conformance explore engine|frontend …``) in a
session of its own, waits a seeded random delay, sends the harness SIGINT or SIGTERM (what Ctrl-C or
a cancelled CI job sends it) and, in a seeded share of rounds, a second signal a moment later (an
impatient user). It then waits for the harness to exit, at most ``--bound`` seconds from the first
signal (a round that runs longer is a hang: its harness is killed), and lists every process the
run left: this script makes itself the child subreaper (``PR_SET_CHILD_SUBREAPER``), so whatever
the run started -- the peers, their children, processes they moved to sessions of their own --
becomes its child once orphaned, and a scan of ``/proc`` for its descendants finds them. A survivor
is one still there a moment (``SETTLE_S``) after the harness exited; it is reported and killed.

Exit status 0 when no round hung or left a process, else 1. Linux only.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36

#: how long after the harness exited a process it started may still be dying (SIGKILL is delivered
#: asynchronously); one still there after this is a survivor
SETTLE_S = 1.0

ECP = [sys.executable, "-m", "ecp.spec.cli"]
ENGINE = ["ecp", "engine", "--handshake-address", "{handshake_address}", "--engine-count", "{engine_count}"]
SERVE = ["ecp", "serve", "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
         "--data-parallel-rpc-port", "{handshake_port}", "--data-parallel-size", "{engine_count}",
         "--port", "{http_port}", "--dev-mode"]


def commands(mode: str, seed: int, out: str) -> list[str]:
    """The command line of one round's run (``explore`` alternates the engine and frontend roles)."""
    if mode == "engine":
        # two ranks: the engine is a supervisor with a process per rank, as vLLM's is
        return [*ECP, "conformance", "engine", "--engine-count", "2", "--", *ENGINE]
    if mode == "frontend":
        return [*ECP, "conformance", "frontend", "--", *SERVE]
    role = "engine" if seed % 2 == 0 else "frontend"
    peer = ENGINE if role == "engine" else SERVE
    return [*ECP, "conformance", "explore", role, "--budget", "120", "--seed", str(seed), "--engine-count", "2",
            "--out", out, "--", *peer]


@dataclass
class Round:
    mode: str
    seed: int
    delay_s: float
    signals: list[str]
    exit_code: int | None = None
    #: seconds from the first signal until the harness exited (None: it did not within the bound)
    exit_s: float | None = None
    #: the harness had ended before the signal (the round interrupted nothing)
    ended_before: bool = False
    #: the harness's cleanup did not end by itself: its last resort killed the peers and exited
    forced: bool = False
    survivors: list[str] = field(default_factory=list)


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def descendants(root: int) -> dict[int, str]:
    """Every live (not zombie) descendant of ``root``: pid -> its command line."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[0] != "Z":
                children.setdefault(st[1], []).append(int(name))
    out: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
        except OSError:
            continue
        todo += children.get(pid, [])
    return out


def reap() -> None:
    """Collect the exit status of every orphan that was re-parented here and has exited."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def play(mode: str, seed: int, rng: random.Random, delays: tuple[float, float], bound: float, second: float,
         out: str) -> Round:
    sig = rng.choice([signal.SIGINT, signal.SIGTERM])
    twice = rng.random() < second
    rnd = Round(mode, seed, round(rng.uniform(*delays), 2), [sig.name])
    gap = rng.uniform(0.0, 1.0)
    log = open(Path(out) / f"round-{seed}.log", "wb")
    proc = subprocess.Popen(commands(mode, seed, str(Path(out) / f"findings-{seed}")), stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=out,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        proc.wait(rnd.delay_s)
        rnd.ended_before = True
    except subprocess.TimeoutExpired:
        pass
    t0 = time.monotonic()
    if not rnd.ended_before:
        proc.send_signal(sig)
        if twice:
            try:
                proc.wait(gap)
            except subprocess.TimeoutExpired:
                second_sig = rng.choice([signal.SIGINT, signal.SIGTERM])
                proc.send_signal(second_sig)
                rnd.signals.append(second_sig.name)
    try:
        rnd.exit_code = proc.wait(max(0.0, bound - (time.monotonic() - t0)))
        rnd.exit_s = round(time.monotonic() - t0, 2)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack into the log
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()
    rnd.forced = b"ecp: still stopping" in (Path(out) / f"round-{seed}.log").read_bytes()
    # what the run left: re-parented here once the harness exited; a moment for SIGKILLed ones to go
    settle = time.monotonic() + SETTLE_S
    left = descendants(os.getpid())
    while left and time.monotonic() < settle:
        time.sleep(0.05)  # polling /proc: there is no event for a non-child's exit
        reap()
        left = descendants(os.getpid())
    rnd.survivors = [f"{pid} {cmd}" for pid, cmd in left.items()]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap()
    return rnd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=50, help="interrupts in all (50)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="engine,frontend,explore",
                    help="runs to interrupt, in turn: engine, frontend, explore (all three)")
    ap.add_argument("--min-delay", type=float, default=0.2,
                    help="earliest moment of the first signal, seconds after the start (0.2)")
    ap.add_argument("--max-delay", type=float, default=12.0,
                    help="latest moment of the first signal, seconds after the start (12)")
    ap.add_argument("--bound", type=float, default=25.0,
                    help="seconds from the first signal within which the harness must exit (25: the harness's "
                         "own last resort is at 20)")
    ap.add_argument("--second", type=float, default=0.3, help="share of rounds with a second signal (0.3)")
    ap.add_argument("--json", metavar="FILE", help="write every round as JSON")
    args = ap.parse_args(argv)
    become_subreaper()
    modes = args.modes.split(",")
    rng = random.Random(args.seed)
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="ecp-interrupt-storm-") as out:
        for k in range(args.count):
            mode = modes[k % len(modes)]
            rnd = play(mode, args.seed + k, rng, (args.min_delay, args.max_delay), args.bound, args.second, out)
            rounds.append(rnd)
            verdict = ("ended before the signal" if rnd.ended_before else
                       f"exit {rnd.exit_code} {rnd.exit_s:.2f} s after the first" if rnd.exit_s is not None
                       else f"HUNG past {args.bound:g} s")
            print(f"{k + 1:3d} {mode:8s} {'+'.join(rnd.signals):15s} at {rnd.delay_s:5.2f} s: {verdict}"
                  + (f"; {len(rnd.survivors)} SURVIVOR(S): {rnd.survivors}" if rnd.survivors else ""), flush=True)
            if rnd.forced:
                print("      (the harness's last resort ended it)")
            if (rnd.exit_s is None or rnd.forced) and not rnd.ended_before:
                sys.stdout.write((Path(out) / f"round-{rnd.seed}.log").read_text(errors="replace")[-3000:])
    hung = [r for r in rounds if (r.exit_s is None or r.forced) and not r.ended_before]
    left = [r for r in rounds if r.survivors]
    interrupted = [r for r in rounds if not r.ended_before]
    times = [r.exit_s for r in interrupted if r.exit_s is not None]
    per_mode = {m: sum(1 for r in interrupted if r.mode == m) for m in modes}
    print(f"{len(interrupted)} interrupts ({', '.join(f'{m} {n}' for m, n in per_mode.items())}; "
          f"{sum(1 for r in interrupted if len(r.signals) > 1)} with a second signal), "
          f"{len(rounds) - len(interrupted)} run(s) ended before their signal; "
          f"hung (or ended by the last resort): {len(hung)}; left processes: {len(left)}; "
          f"time to exit: max {max(times, default=0):.2f} s, "
          f"median {sorted(times)[len(times) // 2] if times else 0:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rounds], indent=1))
    return 1 if hung or left else 0


if __name__ == "__main__":
    sys.exit(main())
