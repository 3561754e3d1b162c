"""Case outcomes: their names, the exceptions cases raise to signal them, the result every report
prints, and the one table that decides them (:func:`decide`).

A case body signals its outcome by raising:

* :class:`CaseFailure` (an ``AssertionError``) -> FAIL, citing a clause;
* :class:`CaseTimeout` -> TIMEOUT (the peer never answered within the budget);
* :class:`PeerCrashed` -> CRASH (the peer process died or announced death);
* :class:`Unsupported` -> UNSUPPORTED (an optional feature the peer lacks, or
  a case the chosen launch mode cannot run).

Anything else escaping a case is a harness error (ERROR, exit code 2).

**The decision.** A case hands over what it *observed* (:class:`Observed`: what it raised, whether its peer died or
failed closed, what the protocol machine recorded outside its focus, which HTTP routes it drove
without citing them, what the health probe after a failure found) and the run what it *declared*
(:class:`Declared`: the role, the conformance level, ``--strict``, what the release under test lacks
for the case's clause, the case's expected-failures entry). :func:`decide` walks :data:`TABLE`, three
stages of rows, and returns the :class:`CaseResult` every report prints:

1. ``case``: the first row that holds gives the case's own outcome, message and clause;
2. ``counts``: the first row that holds says whether that outcome counts for the exit code
   (``blocking``), at the level of the clause the result cites;
3. ``expected``: the first row that holds applies the run's expected-failures declaration.

Nothing else writes an outcome: the plugin turns a case's exception and its peer's state into an
:class:`Observed`, the runner hands the expected-failures entries in, and results are frozen
(``tests/conformance/test_verdict.py`` scans ``conformance/`` for any other writer). docs/conformance.md
shows the table (:func:`table_rows`).
"""

from __future__ import annotations

import enum
import traceback as _traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable


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
    """The result of one case, as every report writes it. Frozen: :func:`decide`
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
    #: the rows of the decision table that decided it, one per stage (:data:`TABLE`)
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


# ---------------------------------------------------------------------- the decision
class Raised(str, enum.Enum):
    """What a case body ended with."""

    NOTHING = "nothing"
    #: :class:`~.outcomes.Unsupported`: the peer declared it lacks a capability, or the launch mode cannot run it
    UNSUPPORTED = "Unsupported"
    #: :class:`~.outcomes.CaseFailure` (any ``AssertionError``): the peer broke what the case checks
    VIOLATION = "CaseFailure"
    #: :class:`~.outcomes.CaseTimeout`: a bounded wait ran out
    TIMEOUT = "CaseTimeout"
    #: :class:`~.outcomes.FailedClosed`: the engine sent ENGINE_CORE_DEAD
    FAILED_CLOSED = "FailedClosed"
    #: :class:`~.outcomes.PeerCrashed`: the peer died
    CRASHED = "PeerCrashed"
    #: ``ecp.conformance.launch.LaunchError``: the peer's command could not be started
    CANNOT_START = "LaunchError"
    #: anything else: a bug of the harness
    HARNESS_BUG = "another exception"


class Peer(str, enum.Enum):
    """What became of the peers the case used (its manager's ``case_crashed()``/``failed_closed()``)."""

    SERVING = "serving"
    #: a peer the case used died and an engine of it had announced it with ENGINE_CORE_DEAD
    FAILED_CLOSED = "failed closed"
    #: a peer the case used died without that
    DIED = "died"


@dataclass(frozen=True)
class Observed:
    """What one case observed: the facts its outcome is decided from."""

    raised: Raised = Raised.NOTHING
    #: the exception's text
    message: str = ""
    #: the clause a :class:`~.outcomes.CaseFailure` names instead of the case's own
    clause: str | None = None
    peer: Peer = Peer.SERVING
    #: how the peer died (exit status), for a fail-closed message
    death: str = ""
    #: the protocol machine's violations outside the case's focus (:func:`~.outcomes.findings_of`)
    findings: tuple[dict[str, Any], ...] = ()
    #: HTTP routes the case drove whose clause its catalogue entry does not cite
    uncited_routes: tuple[str, ...] = ()
    #: what the health probe after a failed case found (None: the peer still serves, or no probe ran)
    probe: str | None = None
    #: a harness bug's exception and traceback
    trace: str = ""

    @classmethod
    def of(cls, exc: BaseException | None, *, crashed: bool = False, failed_closed: bool = False,
           **facts: Any) -> "Observed":
        """The observation of a case that ended with ``exc`` (None: it returned), its peer ``crashed``
        during it and, of those, ``failed_closed`` with ENGINE_CORE_DEAD."""
        from .launch import LaunchError

        peer = Peer.SERVING if not crashed else Peer.FAILED_CLOSED if failed_closed else Peer.DIED
        raised, clause, trace = Raised.HARNESS_BUG, None, ""
        if exc is None:
            raised = Raised.NOTHING
        else:
            for kind, name in ((Unsupported, Raised.UNSUPPORTED), (LaunchError, Raised.CANNOT_START),
                               (FailedClosed, Raised.FAILED_CLOSED), (PeerCrashed, Raised.CRASHED),
                               (CaseTimeout, Raised.TIMEOUT), (AssertionError, Raised.VIOLATION)):
                if isinstance(exc, kind):
                    raised = name
                    break
            if raised is Raised.VIOLATION:
                clause = getattr(exc, "clause", None)
            if raised is Raised.HARNESS_BUG:
                trace = f"{exc!r}\n" + "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__,
                                                                            limit=6))
        return cls(raised=raised, message="" if exc is None else str(exc), clause=clause, peer=peer,
                   trace=trace, **facts)

    @property
    def must_findings(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["level"] == "MUST"]


@dataclass(frozen=True)
class Declared:
    """What the run declared that bears on one case's outcome."""

    role: str
    #: the run's conformance level (``--level``)
    level: str = "hardened"
    strict: bool = False
    #: what the release under test lacks that the case's clause needs (:func:`release_gap`), or None
    release_gap: str | None = None
    #: the case's entry of the expected-failures file (``ecp.conformance.expected.Entry``), or None
    expected: Any = None
    #: ``--update-expected-failures``: the file is rewritten to list exactly the failures of this run
    update_expected: bool = False

    def own(self) -> "Declared":
        """The declaration without the expected-failures file: :func:`decide` then gives the case's own
        outcome (on a failure of the peer the harness probes it and decides again with what it found)."""
        return replace(self, expected=None, update_expected=False)


@dataclass(frozen=True)
class Evidence:
    """What a result carries beside its verdict (kept only for a case that failed)."""

    duration_s: float = 0.0
    transcript: list[dict[str, Any]] = field(default_factory=list)
    transcript_text: str = ""
    peer_stderr_tail: str = ""


@dataclass
class _Draft:
    """The verdict while the stages walk: what each row reads and writes (never leaves this module)."""

    case: Any
    seen: Observed
    run: Declared
    outcome: Outcome = Outcome.ERROR
    message: str = ""
    clause: str = ""
    blocking: bool = True
    reason: str | None = None
    rows: list[str] = field(default_factory=list)
    own: Outcome | None = None

    @property
    def conformance_level(self) -> str:
        """The level of the clause the result cites: the case's own (which may override its clause's),
        or that of the clause a CaseFailure or a finding names instead."""
        from ecp.spec import clauses

        if self.clause == self.case.clause:
            return self.case.conformance_level
        return clauses.get(self.clause).conformance_level


@dataclass(frozen=True)
class Row:
    """One row of the decision table: in its ``stage``, the first row whose ``holds`` is true applies."""

    key: str
    stage: str
    #: the condition and the result, as docs/conformance.md prints them
    when: str
    then: str
    holds: Callable[[_Draft], bool]
    apply: Callable[[_Draft], None]


def _set(outcome: Outcome, message: Callable[[_Draft], str] = lambda d: d.seen.message,
         clause: Callable[[_Draft], str | None] = lambda d: None) -> Callable[[_Draft], None]:
    def apply(d: _Draft) -> None:
        d.outcome, d.message = outcome, message(d)
        d.clause = clause(d) or d.case.clause
    return apply


def _fail_closed_message(d: _Draft) -> str:
    seen = d.seen
    what = "the engine sent ENGINE_CORE_DEAD"
    if seen.raised is Raised.FAILED_CLOSED:
        what = seen.message
    elif seen.raised is Raised.VIOLATION:
        what = f"{seen.message}; then the engine sent ENGINE_CORE_DEAD"
    death = f"; {seen.death}" if seen.death else ""
    return f"fail-closed: {what}{death} -- it stopped instead of serving on"


def _crash_message(d: _Draft) -> str:
    seen = d.seen
    if seen.raised is Raised.CRASHED:
        return seen.message
    if seen.raised is Raised.NOTHING:
        return f"the {d.run.role} process died during the case"
    return f"the {d.run.role} process died during the case ({seen.message})"


def _findings_message(d: _Draft) -> str:
    must = d.seen.must_findings
    shown = [f"[{f['clause']}] {f['message']}" for f in must[:3]]
    more = f" (and {len(must) - 3} more, listed under findings)" if len(must) > 3 else ""
    return f"the case's own check passed, but the {d.run.role} broke other rules: " + "; ".join(shown) + more


def _uncited_message(d: _Draft) -> str:
    own = f"\n(the case itself: {d.seen.message})" if d.seen.message else ""
    return (f"harness error: {d.case.id} drove HTTP routes whose clause its catalogue entry does not cite: "
            f"{', '.join(d.seen.uncited_routes)}{own}")


def _probed(message: Callable[[_Draft], str]) -> Callable[[_Draft], str]:
    """The message with the health probe's finding after it (the probe runs only after a failure)."""
    def with_probe(d: _Draft) -> str:
        text = message(d)
        return f"{text}\n{d.seen.probe}" if d.seen.probe else text
    return with_probe


def _required(d: _Draft) -> bool:
    from ecp.spec.clauses import CONFORMANCE_LEVELS

    return CONFORMANCE_LEVELS.index(d.conformance_level) <= CONFORMANCE_LEVELS.index(d.run.level)


def _counts(blocking: bool) -> Callable[[_Draft], None]:
    def apply(d: _Draft) -> None:
        d.blocking = blocking
    return apply


def _accepted(d: _Draft) -> str:
    return d.run.expected.outcomes_text


def _expect(outcome: Outcome | None, message: Callable[[_Draft], str] | None = None,
            reason: Callable[[_Draft], str | None] | None = None) -> Callable[[_Draft], None]:
    def apply(d: _Draft) -> None:
        if message is not None:
            d.message = message(d)
        if reason is not None:
            d.reason = reason(d)
        if outcome is not None:
            d.outcome = outcome
    return apply


def _entry(d: _Draft) -> Any:
    return d.run.expected


def _plain(d: _Draft) -> bool:
    return _entry(d) is not None and _entry(d).outcomes is None


def _racy(d: _Draft) -> bool:
    return _entry(d) is not None and _entry(d).outcomes is not None


def _among(d: _Draft) -> bool:
    return d.outcome in _entry(d).outcomes


#: the decision table: stage ``case`` (what the case observed and the release it runs against), stage
#: ``counts`` (the run's level and ``--strict``), stage ``expected`` (the expected-failures file)
TABLE: tuple[Row, ...] = (
    Row("release", "case", "the release under test lacks what the case's clause needs (`RELEASE_BOUND`)",
        "UNSUPPORTED, naming the release; the case body does not run",
        lambda d: d.run.release_gap is not None, _set(Outcome.UNSUPPORTED, lambda d: d.run.release_gap or "")),
    Row("unsupported", "case", "it raised `Unsupported`: the peer declared it lacks a capability "
        "(`--engine-lacks`, `--frontend-lacks`, its ready payload) or the launch mode cannot run it",
        "UNSUPPORTED", lambda d: d.seen.raised is Raised.UNSUPPORTED, _set(Outcome.UNSUPPORTED)),
    Row("uncited-routes", "case", "it drove HTTP routes its catalogue entry does not cite",
        "ERROR (a catalogue bug)", lambda d: bool(d.seen.uncited_routes), _set(Outcome.ERROR, _uncited_message)),
    Row("cannot-start", "case", "it raised `LaunchError`: the peer's command could not be started",
        "ERROR", lambda d: d.seen.raised is Raised.CANNOT_START,
        _set(Outcome.ERROR, lambda d: f"cannot start the peer: {d.seen.message}")),
    Row("fail-closed", "case", "it raised `FailedClosed`, or its peer died after sending ENGINE_CORE_DEAD",
        "FAIL `fail-closed: …`, citing a `CaseFailure`'s clause if one was raised",
        lambda d: d.seen.raised is Raised.FAILED_CLOSED or d.seen.peer is Peer.FAILED_CLOSED,
        _set(Outcome.FAIL, _probed(_fail_closed_message), lambda d: d.seen.clause)),
    Row("crash", "case", "it raised `PeerCrashed`, or its peer died without ENGINE_CORE_DEAD", "CRASH",
        lambda d: d.seen.raised is Raised.CRASHED or d.seen.peer is Peer.DIED,
        _set(Outcome.CRASH, _probed(_crash_message))),
    Row("findings", "case", "it raised nothing, but the protocol machine recorded a MUST violation outside "
        "the case's focus", "FAIL citing the first such finding's clause",
        lambda d: d.seen.raised is Raised.NOTHING and bool(d.seen.must_findings),
        _set(Outcome.FAIL, _probed(_findings_message), lambda d: d.seen.must_findings[0]["clause"])),
    Row("pass", "case", "it raised nothing", "PASS", lambda d: d.seen.raised is Raised.NOTHING,
        _set(Outcome.PASS, lambda d: "")),
    Row("silent", "case", "it raised `CaseTimeout` and the probe after it found the peer no longer serving",
        "FAIL, the probe's finding appended", lambda d: d.seen.raised is Raised.TIMEOUT and bool(d.seen.probe),
        _set(Outcome.FAIL, lambda d: f"{d.seen.message}; {d.seen.probe}")),
    Row("timeout", "case", "it raised `CaseTimeout`", "TIMEOUT", lambda d: d.seen.raised is Raised.TIMEOUT,
        _set(Outcome.TIMEOUT)),
    Row("violation", "case", "it raised `CaseFailure` (or another `AssertionError`)",
        "FAIL citing the clause the failure names, else the case's", lambda d: d.seen.raised is Raised.VIOLATION,
        _set(Outcome.FAIL, _probed(lambda d: d.seen.message), lambda d: d.seen.clause)),
    Row("harness-bug", "case", "it raised anything else", "ERROR `harness error: …` with the traceback",
        lambda d: True, _set(Outcome.ERROR, lambda d: f"harness error: {d.seen.trace}")),

    Row("crash-counts", "counts", "the outcome is CRASH", "counts at every level (it breaks `ECP-OUT-8`)",
        lambda d: d.outcome is Outcome.CRASH, _counts(True)),
    Row("not-required", "counts", "the cited clause's level is above the run's `--level`",
        "does not count (`not required at level …`)", lambda d: not _required(d), _counts(False)),
    Row("required", "counts", "the case is MUST, or the run is `--strict`, or a MUST finding failed it",
        "counts", lambda d: d.case.level == "MUST" or d.run.strict or d.rows[0] == "findings", _counts(True)),
    Row("non-strict", "counts", "otherwise (a SHOULD/MAY case, not `--strict`)", "does not count",
        lambda d: True, _counts(False)),

    Row("update-failure", "expected", "`--update-expected-failures` and the outcome is a failure",
        "XFAIL: the rewritten file lists it", lambda d: d.run.update_expected and d.outcome.is_failure,
        _expect(Outcome.XFAIL, reason=lambda d: _entry(d).reason if _entry(d) is not None
                else "listed by --update-expected-failures")),
    Row("update-other", "expected", "`--update-expected-failures`, any other outcome", "unchanged",
        lambda d: d.run.update_expected, _expect(None)),
    Row("unlisted", "expected", "no entry matches the case", "unchanged", lambda d: _entry(d) is None,
        _expect(None)),
    Row("listed-failure", "expected", "a plain entry, and the outcome is a failure", "XFAIL with the entry's reason",
        lambda d: _plain(d) and d.outcome.is_failure, _expect(Outcome.XFAIL, reason=lambda d: _entry(d).reason)),
    Row("listed-pass", "expected", "a plain entry, and the case passed", "XPASS: the list is stale",
        lambda d: _plain(d) and d.outcome is Outcome.PASS,
        _expect(Outcome.XPASS, lambda d: f"listed as expected to fail ({_entry(d).reason}) but passed: remove it "
                                         "from the list", lambda d: _entry(d).reason)),
    Row("listed-other", "expected", "a plain entry, any other outcome (UNSUPPORTED, ERROR)",
        "unchanged (never expected)", _plain, _expect(None, reason=lambda d: _entry(d).reason)),
    Row("accepted-failure", "expected", "an entry with accepted outcomes, a failure among them",
        "XFAIL `FAIL (accepted: […]): …`", lambda d: _racy(d) and _among(d) and d.outcome.is_failure,
        _expect(Outcome.XFAIL, lambda d: f"{d.outcome.value} (accepted: [{_accepted(d)}]): {d.message}",
                lambda d: f"[{_accepted(d)}] {_entry(d).reason}")),
    Row("accepted-pass", "expected", "an entry with accepted outcomes, PASS among them",
        "PASS `PASS (accepted: […]): …`", lambda d: _racy(d) and _among(d),
        _expect(None, lambda d: f"PASS (accepted: [{_accepted(d)}]): {_entry(d).reason}",
                lambda d: f"[{_accepted(d)}] {_entry(d).reason}")),
    Row("unaccepted-pass", "expected", "an entry with accepted outcomes, PASS not among them",
        "XPASS", lambda d: _racy(d) and d.outcome is Outcome.PASS,
        _expect(Outcome.XPASS, lambda d: f"passed, but the expected-failures entry accepts only "
                                         f"[{_accepted(d)}] ({_entry(d).reason})")),
    Row("unaccepted-failure", "expected", "an entry with accepted outcomes, a failure not among them",
        "unchanged: it counts as usual", lambda d: _racy(d) and d.outcome.is_failure,
        _expect(None, lambda d: f"{d.message}\n{d.outcome.value} is not among the accepted outcomes "
                                f"[{_accepted(d)}]".lstrip())),
    Row("accepted-other", "expected", "an entry with accepted outcomes, any other outcome", "unchanged",
        lambda d: True, _expect(None)),
)

STAGES = ("case", "counts", "expected")


def decide(case: Any, seen: Observed, run: Declared, evidence: Evidence | None = None) -> CaseResult:
    """The result of ``case`` (a :class:`~.registry.Case`): in each stage of :data:`TABLE` the first row
    that holds applies. The only writer of outcomes."""
    draft = _Draft(case, seen, run)
    for stage in STAGES:
        row = next(r for r in TABLE if r.stage == stage and r.holds(draft))
        row.apply(draft)
        draft.rows.append(row.key)
        if stage == "case":
            draft.own = draft.outcome
    ev = evidence or Evidence()
    return CaseResult(
        id=case.id, clause=draft.clause, level=case.level, conformance_level=draft.conformance_level,
        slug=case.slug, requirement=case.requirement, role=run.role, outcome=draft.outcome, message=draft.message,
        blocking=draft.blocking, duration_s=ev.duration_s, expected_failure_reason=draft.reason,
        transcript=ev.transcript, transcript_text=ev.transcript_text, peer_stderr_tail=ev.peer_stderr_tail,
        findings=list(seen.findings), rows=tuple(draft.rows),
        own_outcome=draft.own)


def release_gap(case: Any, layout: Any) -> str | None:
    """What the release of ``layout`` lacks that ``case``'s clause needs (``ecp.spec.clauses.RELEASE_BOUND``),
    as the UNSUPPORTED message, or None: the clause binds only the releases that have it."""
    from ecp.spec.clauses import CLAUSES
    from ecp.spec.profile import release_of
    from ecp.spec.releases import describe

    clause = CLAUSES.get(case.clause)
    missing = clause.missing_in(layout) if clause is not None else ()
    if not missing:
        return None
    return (f"{', '.join(describe(f) for f in missing)}: not in vLLM {release_of(layout)} "
            f"({case.clause} binds only the releases that have it)")


def table_rows() -> list[tuple[str, str, str, str]]:
    """The table as docs/conformance.md prints it: stage, row, when, then."""
    return [(r.stage, f"`{r.key}`", r.when, r.then) for r in TABLE]
