"""Launch records and the time budgets that fit the peer under test (role-neutral).

The rule (docs/conformance.md, "Time budgets"):

* **start-up** is measured per launch, from starting the peer until it serves (engine role: its
  handshake is complete; frontend role: ``GET /health`` answered 200, or, for a launch a case
  judges itself, the frontend answered its first HELLO). It never counts against a case's budget.
  Every launch after the first gets ``max(--startup-timeout, STARTUP_FACTOR x the slowest start-up
  measured so far)``: a peer that took 40 s to come up once gets 160 s, whatever the flag says.
* **response**: the first answer the run sees (engine role: the first request's first output;
  frontend role: the capability probe's mean answer time) is compared with the answer time the
  default budgets were sized for (``REFERENCE_RESPONSE_S``); a case's budget is
  ``--case-timeout x max(1, response / reference)``, capped at ``MAX_SCALE`` times.

Both measurements are taken once, on the first launch, so a run's budgets do not drift with its
own failures. Every launch is recorded (:class:`LaunchRecord`) for the reports.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

#: later launches get this many times the slowest start-up measured (launches side by side share
#: the CPU: a case that starts three at once on two cores needs about three times one)
STARTUP_FACTOR = 4.0
#: the first launch's start-up budget (``--startup-timeout``'s default): a real engine or frontend on a
#: busy 2-core machine can take a minute or more to its handshake; later launches follow the pace
STARTUP_TIMEOUT_S = 180.0
#: role -> the answer time the default --case-timeout was sized for (the reference peers answer well
#: inside it on an idle machine)
REFERENCE_RESPONSE_S = {"engine": 0.05, "frontend": 0.02}
#: a case's budget grows at most this many times over --case-timeout
MAX_SCALE = 8.0


@dataclass
class LaunchRecord:
    """One launch of the peer: what it was, for which case, and how long it took to serve."""

    number: int
    #: the topology or kind of launch, in words ("1 engine(s), 1 client(s)")
    what: str
    #: the case it was started for; for a replacement of the shared engine started ahead, the case
    #: running when it started
    case: str
    #: started in the background, before a case asked for it
    ahead: bool
    #: seconds from starting the peer until it served; None while it starts or when it never did
    startup_s: float | None = None
    #: "serving", "starting", or why it never served ("failed: ...", "discarded")
    state: str = "starting"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["startup_s"] = None if self.startup_s is None else round(self.startup_s, 3)
        return d


class Pace:
    """The measured pace of one run's peer, and the budgets derived from it. Thread-safe (launches
    started ahead record themselves from their own threads)."""

    def __init__(self, role: str, case_timeout_s: float, startup_timeout_s: float) -> None:
        self.role = role
        self.case_timeout_s = case_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.launches: list[LaunchRecord] = []
        self.response_s: float | None = None
        self._lock = threading.Lock()

    # -- launches -------------------------------------------------------------------
    def launch_started(self, number: int, what: str, case: str, ahead: bool = False) -> LaunchRecord:
        rec = LaunchRecord(number, what, case, ahead)
        with self._lock:
            self.launches.append(rec)
        return rec

    @staticmethod
    def launch_served(rec: LaunchRecord, started: float) -> None:
        """``rec`` serves now; ``started`` is when its peer was started (``time.monotonic()``)."""
        rec.startup_s = time.monotonic() - started
        rec.state = "serving"

    @staticmethod
    def launch_failed(rec: LaunchRecord, why: str) -> None:
        if rec.state == "starting":
            rec.state = f"failed: {why}"[:200]

    def slowest_startup_s(self) -> float | None:
        with self._lock:
            times = [r.startup_s for r in self.launches if r.startup_s is not None]
        return max(times) if times else None

    def startup_budget(self) -> float:
        """The start-up budget of the next launch (see the module's rule)."""
        slowest = self.slowest_startup_s()
        return self.startup_timeout_s if slowest is None else max(self.startup_timeout_s,
                                                                    STARTUP_FACTOR * slowest)

    # -- responses --------------------------------------------------------------------
    def note_response(self, seconds: float) -> None:
        """The first answer time measured on the run's first launch; later calls change nothing."""
        if self.response_s is None and seconds >= 0:
            self.response_s = seconds

    def scale(self) -> float:
        if self.response_s is None:
            return 1.0
        return min(MAX_SCALE, max(1.0, self.response_s / REFERENCE_RESPONSE_S[self.role]))

    def case_budget(self) -> float:
        """A case's time budget: ``--case-timeout`` scaled by the measured response time."""
        return self.case_timeout_s * self.scale()

    # -- the reports' view ------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """What the reports print: every launch and its start-up, the count, the total, the budgets."""
        with self._lock:
            launches = [r.to_dict() for r in self.launches]
        served = [r["startup_s"] for r in launches if r["startup_s"] is not None]
        return {
            "count": len(launches),
            "total_startup_s": round(sum(served), 3),
            "launches": launches,
            "response_s": None if self.response_s is None else round(self.response_s, 4),
            "case_budget_s": round(self.case_budget(), 3),
            "startup_budget_s": round(self.startup_budget(), 3),
        }


def describe_launches(summary: dict[str, Any] | None) -> str:
    """One line for the console and Markdown reports: count, total start-up, mean, budgets."""
    if not summary or not summary.get("count"):
        return "launches: none (the peer was attached or in-process and never started by the harness)" \
            if summary is not None else "launches: not recorded"
    served = [r["startup_s"] for r in summary["launches"] if r["startup_s"] is not None]
    ahead = sum(1 for r in summary["launches"] if r["ahead"])
    unused = summary["count"] - len(served)
    parts = [f"launches: {summary['count']}" + (f" ({ahead} started ahead)" if ahead else ""),
             f"start-up until serving {summary['total_startup_s']:.1f}s in total"
             + (f", {sum(served) / len(served):.1f}s per launch (slowest {max(served):.1f}s)" if served else "")]
    if unused:
        parts.append(f"{unused} never served")
    response = summary.get("response_s")
    parts.append(f"case budget {summary['case_budget_s']:.0f}s"
                 + (f" (first answer {response * 1000:.0f} ms)" if response is not None else ""))
    return "; ".join(parts)
