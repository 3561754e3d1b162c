"""Everything the monitor does with one observed message, live or replayed.

The relay (and ``--replay``) hands each message to :meth:`Session.observe` in
relay order. The session numbers it, records it (``--record``), checks it with
the :class:`~ecp.conformance.monitor.validator.Validator`, counts it, and turns
each finding into a :class:`~ecp.conformance.monitor.transcripts.LocatedFinding`
with the messages before and after it (event log, transcript file, report).
Because replay runs this same code over the recorded messages, a replay
reproduces the live run's findings.

A session is used from one thread; :attr:`metrics` may be read from others.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from typing import Callable, Sequence

from .capture import CaptureWriter
from .eventlog import EventLog
from .metrics import Metrics, metric_kind
from .observed import Observed
from .transcripts import TranscriptWriter, LocatedFinding
from .validator import CONTROL_KINDS, Finding, Validator, Verdict

#: violations kept in memory with their context for the report; later ones are only counted
MAX_KEPT_VIOLATIONS = 1000


class Session:
    def __init__(self, validator: Validator, *, capture: CaptureWriter | None = None,
                 events: EventLog | None = None, transcripts: TranscriptWriter | None = None,
                 log_messages: bool = False, context_before: int = 8, context_after: int = 4,
                 clock: Callable[[], float] | None = None) -> None:
        self.validator = validator
        self.capture = capture
        self.events = events
        self.transcripts = transcripts
        self.log_messages = log_messages
        self.metrics = Metrics()
        self.context_after = context_after
        self._ring: deque[Observed] = deque(maxlen=context_before)
        self._pending: list[LocatedFinding] = []
        self.violations: list[LocatedFinding] = []  # the first MAX_KEPT_VIOLATIONS
        self.violation_count = 0
        self.errors: list[str] = []  # the monitor's own bugs
        self.seq = 0
        self._t0 = time.monotonic()
        self.clock = clock or (lambda: time.monotonic() - self._t0)

    # ------------------------------------------------------------------ messages
    def observe(self, direction: str, rank: int | None, socket: str, client: int | None,
                frames: Sequence[bytes]) -> list[LocatedFinding]:
        """Check one live message; return the violations it caused."""
        self.seq += 1
        return self.observe_msg(Observed(self.seq, self.clock(), direction, rank, socket, client,
                                         tuple(frames)))

    def observe_msg(self, msg: Observed) -> list[LocatedFinding]:
        """Check one message that already carries its sequence number and time (replay)."""
        self.seq = msg.seq
        try:
            verdict = self.validator.feed(msg)
        except Exception:  # noqa: BLE001 - a validator bug must not stop the relay
            self.report_error(f"validator failed on message {msg.seq} ({msg.channel})")
            verdict = Verdict("unchecked")
        try:
            return self._after_verdict(msg, verdict)
        except Exception:  # noqa: BLE001 - nor must a bug in the bookkeeping
            self.report_error(f"bookkeeping failed on message {msg.seq} ({msg.channel})")
            return []

    def _after_verdict(self, msg: Observed, verdict: Verdict) -> list[LocatedFinding]:
        if self.capture is not None:
            self.capture.write(msg, control=verdict.kind in CONTROL_KINDS)
        self.metrics.count(msg, verdict.kind, verdict.message)
        if self.log_messages and self.events is not None:
            self.events.write(msg.t, "message", **msg.meta(), kind=metric_kind(verdict.kind, verdict.message),
                              frames=len(msg.frames), bytes=sum(len(f) for f in msg.frames))
        for v in self._pending:
            v.after.append(msg)
        if self._pending and len(self._pending[0].after) >= self.context_after:
            done = [v for v in self._pending if len(v.after) >= self.context_after]
            self._pending = [v for v in self._pending if len(v.after) < self.context_after]
            for v in done:
                self._finalize(v)
        found = [self._violation(f, msg) for f in verdict.findings]
        self._ring.append(msg)
        return found

    # ------------------------------------------------------------------ lifecycle
    def note(self, event: str, **fields) -> None:
        """An event-log entry about the connection (handshake, rewriting, peers leaving)."""
        if self.events is not None:
            self.events.write(self.clock(), event, **fields)

    def peer_gone(self, rank: int | None) -> list[LocatedFinding]:
        """The engine of ``rank`` left (its input connection closed)."""
        self.note("engine_gone", rank=rank)
        if self.capture is not None:
            self.capture.write_event("engine_gone", self.seq, self.clock(), rank)
        self.metrics.engine_gone(rank)
        try:
            findings = self.validator.peer_gone(rank)
        except Exception:  # noqa: BLE001
            self.report_error(f"validator failed on engine {rank} leaving")
            return []
        return [self._violation(f, None) for f in findings]

    def close(self) -> None:
        """End of traffic: collect the validator's last findings, write what is pending."""
        try:
            findings = self.validator.finish()
        except Exception:  # noqa: BLE001
            self.report_error("validator failed at the end of the session")
            findings = []
        for f in findings:
            self._violation(f, None)
        for v in self._pending:
            self._finalize(v)
        self._pending = []
        if self.capture is not None:
            self.capture.close()
        if self.events is not None:
            self.events.flush()

    # ------------------------------------------------------------------ internals
    def _violation(self, finding: Finding, msg: Observed | None) -> LocatedFinding:
        self.violation_count += 1
        v = LocatedFinding(self.violation_count, finding, msg, list(self._ring) if msg is not None else [])
        self.metrics.violation(finding.clause)
        if self.events is not None:
            self.events.write(self.clock() if msg is None else msg.t, "violation", **v.summary())
            self.events.flush()  # a violation shows in the log at once (it is what people tail it for)
        if len(self.violations) < MAX_KEPT_VIOLATIONS:
            self.violations.append(v)
        if msg is None or self.context_after == 0:
            self._finalize(v)
        else:
            self._pending.append(v)
        return v

    def _finalize(self, v: LocatedFinding) -> None:
        if self.transcripts is not None:
            self.transcripts.write(v)

    def report_error(self, what: str) -> None:
        """A bug in the monitor (call from an ``except`` block): logged with its traceback,
        a problem in the report (exit 2); relaying goes on."""
        text = f"{what}:\n{traceback.format_exc()}"
        self.errors.append(text)
        if self.events is not None:
            self.events.write(self.clock(), "monitor_error", error=text)
