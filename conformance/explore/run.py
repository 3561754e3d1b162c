"""The exploration loop: draw sessions until the budget is spent, shrink each new finding.

A finding is keyed by its clause (the first rule a session broke). The first session showing a
clause is replayed to confirm it; one that does not fail again is kept as non-reproducible with
how often its clause recurred; one that does is shrunk (:mod:`.shrink`) and written as a
reproducer (:mod:`.reproducer`). Later sessions showing the same clause only count its recurrence.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from functools import cached_property
from typing import Callable

import zmq

from ecp.spec import VLLM_RELEASE
from ecp.spec.profile import Profile, resolve_profile, shipped_releases

from ..engine.release_choice import ReleaseChoice
from ..engine.session import EngineRunConfig, EngineUnderTest
from ..interrupts import Interrupted, interruptible
from . import reproducer
from .execute import LaunchFailed, SessionResult, launch, play_on, reusable
from .generate import MIN_LONG_TOKENS, PROMPT_LENS, draw, long_tokens, paced
from .session import Session, Topology, describe
from .shrink import Budget, shrink

#: replays of a finding's first session (and of its shrunk session) that decide whether it reproduces
CONFIRM_RUNS = 3

#: a request of this many tokens or more shows the engine's pace (the long requests' length follows it)
PACE_MIN_TOKENS = 32
#: the pace is the median of the last this many sessions' measurements
PACE_SESSIONS = 9

#: seconds between two progress lines of an exploration
PROGRESS_S = 5.0


class Progress:
    """Says where the exploration stands at most every ``every`` seconds (never when 0)."""

    def __init__(self, every: float, say: Callable[[str], None], started: float) -> None:
        self.every, self.say, self.started = every, say, started
        self._last = started

    def tick(self, line: Callable[[], str]) -> None:
        now = time.monotonic()
        if self.every and now - self._last >= self.every:
            self._last = now
            self.say(f"[{now - self.started:4.0f}s] {line()}")


@dataclass
class ExploreOptions:
    command: list[str]
    #: ``engine``: the peer is an engine, the harness plays the frontend; ``frontend``: the reverse
    role: str = "engine"
    engine_count: int = 1
    transport: str = "ipc"
    budget_s: float = 600.0
    seed: int = 0
    max_steps: int = 24
    out_dir: Path = Path("explore-findings")
    shrink_runs: int = 200
    shrink_s: float = 300.0
    step_timeout_s: float = 10.0
    startup_timeout_s: float = 60.0
    quiet_window_s: float = 0.3
    #: stop after this many distinct findings (None: explore until the budget is spent)
    max_findings: int | None = None
    #: stop after this many sessions (None: explore until the budget is spent)
    max_sessions: int | None = None
    #: whether sessions include malformed input messages (``ECP-ROB-1``)
    malformed: bool = True
    #: whether sessions include duplicate ADDs (``ECP-REQ-2``)
    duplicates: bool = True
    #: whether some sessions include a process fault (SIGSTOP/SIGCONT or SIGKILL of one rank)
    process_faults: bool = True
    #: capabilities the engine was declared to lack (``--engine-lacks``, ecp.conformance.capabilities)
    engine_lacks: tuple[str, ...] = ()
    #: replays of a finding's first session (and of its shrunk session) that decide whether it reproduces
    confirm_runs: int = CONFIRM_RUNS
    #: seconds between two progress lines (sessions, messages, findings; replays while a finding is
    #: confirmed and shrunk); 0: none
    progress_s: float = PROGRESS_S
    #: the vLLM release the harness speaks and judges the peer as (``--vllm RELEASE|PATH``: a shipped
    #: release, a layout file, a vLLM checkout or wheel): the sessions are drawn for it, its codec
    #: writes and reads the frames, and only its clauses are judged
    vllm: str = VLLM_RELEASE

    @cached_property
    def profile(self) -> Profile:
        """The release :attr:`vllm` names (``LayoutError`` when it names none), resolved once."""
        return resolve_profile(self.vllm)

    @property
    def recorded_vllm(self) -> str:
        """:attr:`vllm` as a reproducer records it: a shipped release by name, a path made absolute
        (its replay may run elsewhere)."""
        if self.vllm in shipped_releases() or not Path(self.vllm).exists():
            return self.vllm
        return str(Path(self.vllm).resolve())


def release_line(profile: Profile, how: str) -> str:
    """The first line of an exploration or a replay, worded as the conformance roles' reports word it:
    the release the harness speaks and judges the peer as, and where that came from (``--vllm 0.20``;
    a replay: the file's)."""
    return f"judged as {profile.label} ({how})"


@dataclass
class FindingReport:
    clause: str
    message: str
    seed: int
    found_after_s: float
    steps_before: int
    steps_after: int | None = None
    #: sessions (of all explored) whose findings include this clause
    recurrence: int = 1
    replays: str = ""
    reproducible: bool = False
    path: Path | None = None
    shrink_runs: int = 0


@dataclass
class ExploreReport:
    sessions: int = 0
    messages: int = 0
    elapsed_s: float = 0.0
    findings: list[FindingReport] = field(default_factory=list)
    #: the signal that ended the exploration early ("SIGTERM", "SIGINT"), or None
    interrupted: str | None = None
    #: the release the peer was judged as (``0.20``)
    release: str = ""


class Runner:
    """Plays sessions of the engine role. A session of the exploration loop (``reuse=True``) runs on
    a peer an earlier one left healthy when there is one of its topology (:func:`.execute.reusable`:
    no finding, so every rank served a fresh request at its end, and no process fault); every other
    session -- the confirmation, shrinking and replay of a finding -- gets a fresh launch."""

    #: healthy peers kept for reuse, one per topology, the least recently used stopped first once
    #: there are more than POOL of them or they run more than POOL_RANKS ranks in all (each rank may
    #: be an OS process holding its memory)
    POOL = 6
    POOL_RANKS = 16

    def __init__(self, opts: ExploreOptions, workdir: str) -> None:
        self.opts = opts
        # the harness frontend speaks the release (its codec at the wire's edge), as the engine role's does
        self.cfg = EngineRunConfig(command=list(opts.command), transport=opts.transport,
                                   engine_count=opts.engine_count, startup_timeout_s=opts.startup_timeout_s,
                                   quiet_window_s=opts.quiet_window_s, workdir=workdir,
                                   lacks=list(opts.engine_lacks), vllm=opts.vllm,
                                   release=ReleaseChoice(opts.vllm))
        self.ctx = zmq.Context()
        self.launches = 0
        self.sessions = 0
        self._idle: OrderedDict[Topology, EngineUnderTest] = OrderedDict()
        #: seconds per token of the engine, as the sessions so far showed it (None: not seen yet)
        self.token_s: float | None = None
        self._paces: list[float] = []
        self.max_model_len: int | None = None

    def draw(self, seed: int) -> Session:
        """Session ``seed``, its long requests sized to the engine's pace once it is known (:func:`.generate.paced`)."""
        return paced(draw(seed, self.opts.engine_count, self.opts.max_steps, self.opts.malformed,
                          self.opts.process_faults, self.opts.duplicates, self.opts.profile), self.long_tokens())

    def _note_pace(self, eut: EngineUnderTest) -> None:
        """The engine's pace from the session just played: per request of :data:`PACE_MIN_TOKENS` or
        more, the median over its output messages of (this message's timestamp - the previous one's) /
        its tokens -- the engine's own clock and its steady rate, which a pause, a sleep or a stopped
        rank (one long gap) and a harness that read a backlog at once (the engine's timestamps are
        not the harness's) leave alone; the median of the session's requests, then the median of the
        last :data:`PACE_SESSIONS` sessions. The engine's ``max_model_len`` caps a long request."""
        fe = eut.fe
        if fe.max_model_len:
            self.max_model_len = fe.max_model_len
        stamps: dict[str, list[tuple[float, int]]] = {}
        for _client, msg in fe.messages:
            for out in getattr(msg, "outputs", None) or ():
                if out.new_token_ids:
                    stamps.setdefault(out.request_id, []).append((msg.timestamp, len(out.new_token_ids)))
        paces = []
        for seq in stamps.values():
            if sum(n for _t, n in seq) < PACE_MIN_TOKENS:
                continue
            rates = [(t1 - t0) / n for (t0, _n), (t1, n) in zip(seq, seq[1:]) if t1 > t0]
            if rates:
                paces.append(statistics.median(rates))
        if paces:
            self._paces = (self._paces + [statistics.median(paces)])[-PACE_SESSIONS:]
            self.token_s = statistics.median(self._paces)

    def long_tokens(self) -> int | None:
        """How long a long request is played at the engine's pace (None: not known yet)."""
        tokens = long_tokens(self.token_s)
        if tokens is not None and self.max_model_len:
            tokens = min(tokens, max(MIN_LONG_TOKENS, self.max_model_len - max(PROMPT_LENS) - 1))
        return tokens

    def play(self, session: Session, reuse: bool = False) -> SessionResult:
        self.sessions += 1
        key = session.topology
        # from here on the peer is this call's: whatever ends it early (an interrupt included)
        # stops it in the finally below, unless it goes back to the pool
        eut = self._idle.pop(key, None) if reuse else None
        keep = False
        try:
            if eut is not None and not eut.alive():
                eut.close()
                eut = None
            started = time.monotonic()
            if eut is None:
                self.launches += 1
                eut = launch(session, self.cfg, self.ctx, self.launches)
                tag = ""
            else:
                tag = f"s{self.sessions}-"
            launch_s = time.monotonic() - started
            result = play_on(eut, session, self.opts.step_timeout_s, tag)
            result.launch_s = launch_s
            self._note_pace(eut)
            keep = reuse and reusable(eut, result)
        finally:
            if keep:
                self._idle[key] = eut
                while len(self._idle) > 1 and (len(self._idle) > self.POOL or sum(
                        t.engines for t in self._idle) > max(self.POOL_RANKS, key.engines)):
                    self._idle.popitem(last=False)[1].close()
            elif eut is not None:
                eut.close()
        return result

    def close(self) -> None:
        """Stop every kept peer, then end the zmq context with LINGER 0 (``Context.term`` would wait
        without end for a socket an interrupted launch left open)."""
        try:
            while self._idle:
                self._idle.popitem()[1].close()
        finally:
            self.ctx.destroy(linger=0)


class FrontendRunner:
    """Plays sessions of the frontend role: each launches the frontend command afresh, as the
    frontend role's cases launch a dedicated frontend, with the session's scripted engines."""

    def __init__(self, opts: ExploreOptions, workdir: str) -> None:
        from ..frontend.session import FrontendManager, FrontendRunConfig
        from ..transcript import Transcript

        self.opts = opts
        # a non-streaming request that stalls on its engine is answered only at the session's end
        bound = opts.step_timeout_s * (opts.max_steps + 6)
        cfg = FrontendRunConfig(command=list(opts.command), engine_count=opts.engine_count,
                                startup_timeout_s=opts.startup_timeout_s, case_timeout_s=bound,
                                quiet_window_s=opts.quiet_window_s, workdir=workdir, vllm=opts.vllm)
        self.manager = FrontendManager(cfg, Transcript())

    def draw(self, seed: int) -> Session:
        from .frontend_generate import draw_frontend

        return draw_frontend(seed, self.opts.engine_count, self.opts.max_steps, self.opts.profile)

    def play(self, session: Session, reuse: bool = False) -> SessionResult:  # noqa: ARG002 - always a fresh launch
        from .frontend_execute import play_frontend

        return play_frontend(session, self.manager, self.opts.step_timeout_s)

    def close(self) -> None:
        self.manager.close()


def runner_for(opts: ExploreOptions, workdir: str) -> Runner | FrontendRunner:
    """The runner of ``opts.role``."""
    return FrontendRunner(opts, workdir) if opts.role == "frontend" else Runner(opts, workdir)


def explore(opts: ExploreOptions, say: Callable[[str], None] = print) -> ExploreReport:
    """Explore until ``opts.budget_s`` is spent (confirming and shrinking findings included; the session
    playing when it runs out is finished); raises :class:`LaunchFailed`
    when the peer never comes up. SIGTERM, SIGINT or SIGHUP ends it early: the peers are stopped, a finding
    being confirmed or shrunk is written as far as it got, and the report says so
    (``report.interrupted``)."""
    report = ExploreReport(release=opts.profile.release)
    by_clause: dict[str, FindingReport] = {}
    with interruptible(), tempfile.TemporaryDirectory(prefix="ecp-explore-") as workdir:
        runner = runner_for(opts, workdir)
        started = time.monotonic()
        deadline = started + opts.budget_s
        settling: tuple[Session, SessionResult, FindingReport] | None = None
        progress = Progress(opts.progress_s, say, started)
        try:
            i = 0
            while time.monotonic() < deadline and (opts.max_sessions is None or i < opts.max_sessions):
                progress.tick(lambda: f"{report.sessions} session(s), {report.messages} message(s) judged, "
                                      f"{len(report.findings)} finding(s)")
                seed = opts.seed + i
                i += 1
                session = runner.draw(seed)
                try:
                    result = runner.play(session, reuse=True)
                except LaunchFailed as exc:
                    if report.sessions == 0:
                        raise
                    say(f"session {seed}: the peer did not come up ({exc}); skipped")
                    continue
                report.sessions += 1
                report.messages += result.frames_sent + result.frames_received
                for clause in result.clauses:
                    if clause in by_clause:
                        by_clause[clause].recurrence += 1
                if not result.findings or result.clauses[0] in by_clause:
                    continue
                first = result.findings[0]
                found = FindingReport(first.clause, first.message, seed, time.monotonic() - started,
                                      len(session.steps))
                by_clause[first.clause] = found
                report.findings.append(found)
                say(f"session {seed}: {first.clause}: {first.message}")
                settling = (session, result, found)
                _settle(runner, session, result, found, opts, say, progress, deadline)
                settling = None
                if opts.max_findings is not None and len(report.findings) >= opts.max_findings:
                    break
        except Interrupted as exc:
            report.interrupted = str(exc)
            if settling is not None and settling[2].path is None:
                session, result, found = settling
                found.replays = found.replays or "interrupted"
                found.path = _write(opts, session, found.clause, found.message, result,
                                    {"sessions": found.recurrence, "replays": found.replays, "reproducible": None})
            say(f"{report.interrupted}: stopping after {report.sessions} session(s)")
        finally:
            runner.close()
            report.elapsed_s = time.monotonic() - started
    return report


def _settle(runner: Runner | FrontendRunner, session: Session, result: SessionResult, found: FindingReport,
            opts: ExploreOptions, say: Callable[[str], None], progress: Progress | None = None,
            deadline: float = math.inf) -> None:
    """Confirm, shrink and write one new finding, by ``deadline`` (the run's budget): a finding the
    budget leaves no replay for is written unconfirmed, one confirmed is shrunk for what is left of
    it (at most ``opts.shrink_s``)."""
    clause = found.clause
    replays = 0

    def fails(candidate: Session) -> tuple[bool, SessionResult | None]:
        nonlocal replays
        replays += 1
        if progress is not None:
            progress.tick(lambda: f"settling {clause}: {replays} replay(s), now of {len(candidate.steps)} step(s)")
        try:
            r = runner.play(candidate)
        except LaunchFailed:
            return False, None
        return clause in r.clauses, r

    # only the steps that were played: the others were illegal in the state the session reached
    played = session.with_steps([session.steps[i] for i in result.played])
    confirmed, last, tried = False, result, 0
    for candidate in (played, session) * opts.confirm_runs:
        if time.monotonic() >= deadline:
            break
        tried += 1
        ok, r = fails(candidate)
        if ok:
            confirmed, session, last = True, candidate, r
            break
    if not confirmed and tried < 2 * opts.confirm_runs:
        found.replays = f"0/{tried}, budget spent"
        found.path = _write(opts, session, clause, found.message, result,
                            {"sessions": found.recurrence, "replays": found.replays, "reproducible": None})
        say(f"  not confirmed: the budget was spent after {tried} replay(s); kept as {found.path}")
        return
    if not confirmed:
        found.replays = f"0/{2 * opts.confirm_runs}"
        found.path = _write(opts, session, clause, found.message, result,
                            {"sessions": found.recurrence, "replays": found.replays, "reproducible": False})
        say(f"  not reproducible: 0 of {2 * opts.confirm_runs} replays showed {clause}; kept as {found.path}")
        return
    budget = Budget(opts.shrink_runs, max(0.0, min(opts.shrink_s, deadline - time.monotonic())))
    best = shrink(session, lambda c: fails(c)[0], budget)
    found.shrink_runs = budget.used
    hits, evidence, runs = 0, last, 0
    if best == session and time.monotonic() >= deadline:
        hits, runs = 1, 1  # not shrunk, no time left: the replay that confirmed it is its evidence
    for _ in range(opts.confirm_runs - runs):
        if runs and time.monotonic() >= deadline:
            break  # (one replay of a shrunk session at least: it decides which session is written)
        runs += 1
        ok, r = fails(best)
        if ok:
            hits, evidence = hits + 1, r
    if hits == 0:  # the shrunk session fails too rarely to show it: keep the confirmed one
        best = session
    found.steps_after = len(best.steps)
    found.reproducible = True
    found.replays = f"{hits}/{runs}"
    message = next((f.message for f in evidence.findings if f.clause == clause), found.message)
    found.message = message
    found.path = _write(opts, best, clause, message, evidence,
                        {"sessions": found.recurrence, "replays": found.replays, "reproducible": True})
    say(f"  shrunk from {found.steps_before} to {found.steps_after} step(s) in {budget.used} replays "
        f"({found.replays} replays of it fail): {found.path}")
    for step in best.steps:
        say(f"    {describe(step)}")


def _write(opts: ExploreOptions, session: Session, clause: str, message: str, result: SessionResult,
           recurrence: dict) -> Path:
    path = Path(opts.out_dir) / f"{clause}-seed{session.seed}.json"
    return reproducer.write(path, role=opts.role, session=session, clause=clause, message=message,
                            command=opts.command, transport=opts.transport, engine_count=opts.engine_count,
                            entries=result.entries, recurrence=recurrence, peer_log=result.log_tail,
                            engine_lacks=opts.engine_lacks, vllm=opts.recorded_vllm, release=opts.profile.release)
