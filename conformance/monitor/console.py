"""The live console summary: every few seconds, messages/s per kind and direction,
open requests, engines seen and violations by clause (to stderr by default)."""

from __future__ import annotations

import threading
from typing import Callable, TextIO

from .eventlog import EventLog
from .metrics import Metrics, Snapshot


def render(snap: Snapshot, previous: Snapshot | None) -> str:
    dt = snap.elapsed_s - (previous.elapsed_s if previous else 0.0)
    engines = ",".join("?" if r is None else str(r) for r in snap.engines) or "none"
    total_v = sum(snap.violations.values())
    lines = [f"ecp monitor {snap.elapsed_s:7.1f}s  engines {engines}  open requests {snap.open_requests}  "
             f"messages {snap.total_messages}  violations {total_v}"]
    for direction in ("to_engine", "to_frontend"):
        parts = []
        for (d, kind), n in sorted(snap.messages.items()):
            if d != direction:
                continue
            before = previous.messages.get((d, kind), 0) if previous else 0
            rate = (n - before) / dt if dt > 0 else 0.0
            parts.append(f"{kind} {rate:.1f}/s ({n})")
        if parts:
            lines.append(f"  {direction:<11} " + "  ".join(parts))
    if snap.violations:
        lines.append("  violations  " + "  ".join(f"{c} x{n}" for c, n in sorted(snap.violations.items())))
    return "\n".join(lines)


class Console:
    """A daemon thread printing :func:`render` every ``interval_s`` (and stats events to the log)."""

    def __init__(self, metrics: Metrics, clock: Callable[[], float], out: TextIO | None,
                 interval_s: float = 5.0, events: EventLog | None = None) -> None:
        self.metrics, self.clock, self.out, self.interval_s, self.events = metrics, clock, out, interval_s, events
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ecp-monitor-console", daemon=True)
        self._previous: Snapshot | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self) -> None:
        snap = self.metrics.snapshot(self.clock())
        if self.out is not None:
            self.out.write(render(snap, self._previous) + "\n")
            self.out.flush()
        if self.events is not None:
            self.events.write(snap.elapsed_s, "stats", **snap.to_json())
        self._previous = snap

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
