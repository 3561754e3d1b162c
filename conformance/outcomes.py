"""Case outcomes and the exceptions cases raise to produce them.

A case body signals its outcome by raising:

* :class:`CaseFailure` (an ``AssertionError``) -> FAIL, citing a clause;
* :class:`CaseTimeout` -> TIMEOUT (the peer never answered within the budget);
* :class:`PeerCrashed` -> CRASH (the peer process died or announced death);
* :class:`Unsupported` -> UNSUPPORTED (an optional feature the peer lacks, or
  a case the chosen launch mode cannot run).

Anything else escaping a case is a harness error (ERROR, exit code 2).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    TIMEOUT = "TIMEOUT"
    CRASH = "CRASH"
    UNSUPPORTED = "UNSUPPORTED"
    #: failed as listed in the expected-failures file
    XFAIL = "XFAIL"
    #: listed as expected to fail, but passed: the list is stale
    XPASS = "XPASS"
    #: the harness itself broke (bug, environment)
    ERROR = "ERROR"

    @property
    def is_failure(self) -> bool:
        return self in (Outcome.FAIL, Outcome.TIMEOUT, Outcome.CRASH)


class CaseFailure(AssertionError):
    """A case saw the peer break a requirement: the case FAILs. ``clause`` overrides the case's own
    clause when the rule broken is another one (e.g. an undecodable output). (A rule the protocol
    machine recorded is an ``ecp.spec.machine.Violation``; the harness attaches those as findings.)"""

    def __init__(self, message: str, clause: str | None = None) -> None:
        super().__init__(message)
        self.clause = clause


class CaseTimeout(Exception):
    """A bounded wait ran out: names what the harness was waiting for."""


class PeerCrashed(Exception):
    """The peer under test died (process exit, or ENGINE_CORE_DEAD)."""


class PeerNeverStarted(PeerCrashed):
    """The peer's command exited before its first handshake of the run completed (a wrong command,
    a missing extra, a crash at start-up): no case can run against it. The case that launched it
    reports it once, as CRASH with the exit status and the tail of the peer's output; the harness
    then stops the run, and the cases left are reported as NOT RUN, not as 60 identical crashes."""

    def __init__(self, message: str, exit_status: int | None = None, output: list[str] | None = None) -> None:
        super().__init__(message)
        #: the command's exit status (None: unknown) and the last lines it printed
        self.exit_status = exit_status
        self.output = output or []


class FailedClosed(PeerCrashed):
    """The engine announced its death with ENGINE_CORE_DEAD (``ECP-OUT-8``) -- it failed *closed*.

    After input the case expected it to reject and survive, that is a FAIL of the case's own
    clause (reported as fail-closed), not a CRASH: the frontend learns at once that the engine is
    gone, which is what interoperation needs (``ECP-ROB-3``)."""


class Unsupported(Exception):
    """The case cannot run against this peer or in this launch mode."""


@dataclass(frozen=True)
class CaseResult:
    """The result of one case, as every report writes it. Frozen: :func:`ecp.conformance.verdict.decide`
    is the one place that makes one, and nothing rewrites it afterwards."""

    id: str
    clause: str
    level: str
    slug: str
    requirement: str
    role: str
    outcome: Outcome
    message: str = ""
    #: False for a SHOULD/MAY failure in non-strict mode, or a failure of a clause above the run's
    #: conformance level: reported, not counted
    blocking: bool = True
    #: ``interop`` or ``hardened``: the level of the clause this result is judged against
    conformance_level: str = "interop"
    duration_s: float = 0.0
    expected_failure_reason: str | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    transcript_text: str = ""
    peer_stderr_tail: str = ""
    #: rules the peer broke outside the case's focus (see :func:`findings_of`), as JSON-ready dicts
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: the rows of the decision table that decided it, one per stage (``ecp.conformance.verdict.TABLE``)
    rows: tuple[str, ...] = ()
    #: the case's own outcome, before the expected-failures file (None: the same as :attr:`outcome`)
    own_outcome: Outcome | None = None

    @property
    def counts_as_failure(self) -> bool:
        if self.outcome is Outcome.XPASS:
            return True
        return self.outcome.is_failure and self.blocking

    def to_dict(self, with_transcript: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "clause": self.clause, "level": self.level,
            "conformance_level": self.conformance_level, "slug": self.slug,
            "requirement": self.requirement, "role": self.role, "outcome": self.outcome.value,
            "blocking": self.blocking, "message": self.message, "duration_s": round(self.duration_s, 4),
            "expected_failure_reason": self.expected_failure_reason,
        }
        if with_transcript and self.transcript:
            out["transcript"] = self.transcript
            out["transcript_text"] = self.transcript_text
        if self.peer_stderr_tail:
            out["peer_stderr_tail"] = self.peer_stderr_tail
        if self.findings:
            out["findings"] = self.findings
        return out


def findings_of(violations: list[Any], focus: set[str]) -> list[dict[str, Any]]:
    """The protocol machine's recorded violations (``ecp.spec.machine.CaseFailure``) as findings,
    leaving out those citing a clause in ``focus`` (what the case itself checks and reports)."""
    from ecp.spec.clauses import CLAUSES

    out = []
    for v in violations:
        if v.clause in focus:
            continue
        clause = CLAUSES.get(v.clause)
        out.append({"clause": v.clause, "level": clause.level if clause else "MUST",
                    "message": v.error.message, "socket": v.socket, "rank": v.rank,
                    "frames_hex": [bytes(f).hex() for f in v.frames]})
    return out
