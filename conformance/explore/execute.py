"""Playing one session against a freshly launched peer.

The peer is launched exactly as the engine role's cases launch it (:class:`EngineUnderTest`: same
command placeholders, transports and handshake), and every frame goes through that harness
frontend, whose protocol machine in recording mode judges it. The executor keeps a model of the
state the session put each rank in (paused, asleep) and skips a step that would be illegal there,
so a shrunk session stays a legal one. State-changing calls (pause, resume, sleep, wake-up) are
waited for: the model then knows what the engine must answer afterwards.

Process faults: a ``stop`` step SIGSTOPs a rank's process and SIGCONTs it later, while the harness
keeps receiving; the oracle's time bounds are stretched by the time the rank stood still. A
``kill`` step SIGKILLs a rank's process: a frontend then sees a dead engine -- ENGINE_CORE_DEAD, a
connection the engine closed, or the engine process gone (``ECP-ROB-3``) -- and fails closed, so
the session ends there and what the killed engines owed is not asked for; an engine that stays
silent and connected instead hides the dead rank from every frontend (a finding under
``ECP-ROB-3``: no frontend can fail closed on it).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import zmq

from ecp.spec import recover_utility_frames
from ecp.spec.enums import RequestType
from ecp.spec.machine import SchedulerControl

from ..engine.checks import hello_violation, ready_hash_violation, wave_complete_violation
from ..engine.harness_frontend import EngineStoppedReading
from ..engine.session import EngineRunConfig, EngineUnderTest
from ..launch import PeerHandle
from ..outcomes import CaseTimeout, FailedClosed, PeerCrashed, CaseFailure
from ..transcript import Entry, Transcript
from .oracle import (
    ABORT_GRACE_S, CallRecord, Finding, History, RequestRecord, Stop, binding, check_calls, check_errors,
    check_raw_outputs, check_requests, own_outputs, own_terminals,
)
from .processes import rank_process, send
from .session import PROCESS_FAULTS, Session

#: calls whose reply the executor waits for: they change what the engine must answer next
STATEFUL = frozenset(("pause_generation", "pause_scheduler", "resume_scheduler", "sleep", "wake_up"))
#: a wait for terminals goes on while outputs keep arriving, up to this many step timeouts in all
#: (a slow engine with long requests is not a stalled one)
PROGRESS_CAP = 20


class LaunchFailed(Exception):
    """The peer did not come up for a session (a harness or usage problem, not a finding)."""


@dataclass
class SessionResult:
    findings: list[Finding]
    entries: list[Entry]
    #: step indexes actually played (the others were skipped as illegal in the state reached)
    played: list[int]
    frames_sent: int = 0
    frames_received: int = 0
    launch_s: float = 0.0
    run_s: float = 0.0
    #: the end of the peer's output, for a session with findings
    log_tail: str = ""
    #: a process fault was played (the peer is not reused afterwards)
    process_fault: bool = False

    @property
    def clauses(self) -> list[str]:
        return list(dict.fromkeys(f.clause for f in self.findings))


class _Rank(SchedulerControl):
    """What the session's answered calls made of one rank: the spec's sleep/pause state, stepped by
    the SCHEDULER table (``paused``, ``asleep``; ``refusing``: new ADDs get ``engine_paused``)."""


class _Stop(Exception):
    def __init__(self, finding: Finding) -> None:
        self.finding = finding


class _Killed(Exception):
    """A rank was killed and the harness saw the engine dead: it fails closed, the session ends."""


@dataclass
class _PlayState:
    """What a session played so far sent and saw, with the bounded waits its steps use."""

    fe: Any
    session: Session
    step_timeout: float
    history: History = field(default_factory=History)
    ranks: list[_Rank] = field(default_factory=list)
    rids: dict[int, str] = field(default_factory=dict)
    client_of: dict[str, int] = field(default_factory=dict)
    #: request id -> its prompt (a repeat of a greedy ADD sends the same one)
    prompts: dict[str, list[int]] = field(default_factory=dict)
    sent: int = 0
    step: int | None = None
    #: the launched peer, for the process faults (None: none can be sent)
    handle: PeerHandle | None = None
    #: goes into every request id: unique per session played on one peer
    tag: str = ""
    #: the last step played
    previous: dict[str, Any] | None = None
    #: the wave the peer was in when the session started, as the frontend's machine knows it (0 on a
    #: fresh launch): a session's waves count from it, so that on a peer an earlier session left in wave
    #: 7 a stamp of 2 is still two waves ahead of it, as a frontend stamps its coordinator's wave
    wave_base: int = 0

    # ------------------------------------------------------------------ helpers
    def _where(self, step: dict[str, Any]) -> tuple[int, int]:
        topo = self.session.topology
        return step.get("engine", 0) % topo.engines, step.get("client", 0) % topo.clients

    def _until(self, predicate, what: str, clause: str, timeout: float | None = None) -> None:
        try:
            self.fe.wait(predicate, self.step_timeout if timeout is None else timeout, what)
        except CaseTimeout as exc:
            raise _Stop(Finding(clause, str(exc), self.step)) from None

    def _send_call(self, engine: int, client: int, method: str, args: list[Any], expect: Any = None,
                   refused: bool = False) -> int:
        # the requests running on this rank and client now: a call that ends them must do so before its reply
        running = tuple(r.rid for r in self.history.requests.values()
                        if r.engine == engine and self.client_of.get(r.rid) == client and r.owes_terminal
                        and self._running(r.rid))
        sent_at = time.monotonic()
        cid = self.fe.send_utility(method, args, engine=engine, client=client)
        self.sent += 1
        self.history.calls[cid] = CallRecord(cid, method, list(args), engine, self.step, expect, client, sent_at,
                                             running, refused)
        return cid

    def _running(self, rid: str) -> bool:
        """Whether request ``rid`` itself produced an output and has not ended."""
        outputs = own_outputs(self.fe, self.history.requests[rid])
        return bool(outputs) and not any(s.output.finish_reason is not None for s in outputs)

    def _ended(self, rid: str) -> bool:
        """Whether request ``rid`` itself had its terminal output (the answer to a duplicate ADD of it
        is not one)."""
        return bool(own_terminals(self.fe, self.history.requests[rid]))

    def _answered(self, cid: int, method: str) -> bool:
        """Wait for the reply to ``cid``; whether the call succeeded."""
        # a pause with mode wait is answered once the running requests ended: waited for while they progress
        try:
            self.while_progressing(lambda t: self.fe.wait(lambda: bool(self.fe.replies.get(cid)), t,
                                                          f"the reply to {method} (call_id {cid})"))
        except CaseTimeout as exc:
            raise _Stop(Finding("ECP-UTIL-1", str(exc), self.step)) from None
        u = self.fe.replies[cid][0].utility
        return u.failure_message is None

    def _idle(self, engine: int) -> bool:
        return all(self._ended(r.rid) for r in self.history.requests.values() if r.engine == engine)

    def _past_graces(self, engine: int | None = None) -> None:
        """Listen until the grace of every ABORT of a running request (on ``engine``; None: on any
        rank) has passed, and a quiet window more: what an engine that ignored the ABORT produces
        after it is the evidence ``ECP-ABORT-2`` is judged on."""
        fe = self.fe
        graces = [self.history.stretched(r.engine, r.aborted_running_at, ABORT_GRACE_S)
                  for r in self.history.requests.values() if r.aborted_running_at is not None
                  and (engine is None or r.engine == engine) and not self._ended(r.rid)]
        if graces:
            end = max(graces) + fe.quiet_window_s
            while time.monotonic() < end:
                fe.pump(end)

    def _woken(self, engine: int) -> None:
        """A wake_up leaves for ``engine`` now: the ADDs sent while it slept may run from here on."""
        now = time.monotonic()
        for rec in self.history.requests.values():
            if rec.engine == engine and rec.while_asleep and rec.woken_at is None:
                rec.woken_at = now

    def _calls_answered(self, engine: int) -> None:
        """Wait for the replies to every call sent to ``engine`` before its state changes: a call on
        one client's socket and a state change on another's reach the engine in either order, and
        their replies come back on different sockets, so the order they were answered in cannot be
        told (an ``is_sleeping`` answered before a wake-up may arrive after its reply)."""
        pending = [cid for cid, call in self.history.calls.items() if call.engine == engine]
        self._until(lambda: all(self.fe.replies.get(cid) for cid in pending),
                    f"the replies to call_ids {pending} before a state change", "ECP-UTIL-1")

    def _refusals_answered(self, engine: int) -> None:
        """Wait for the answers to the ADDs sent to ``engine`` while its generation was paused, before
        it is resumed: an ADD on one client's socket and a resume on another's reach the engine in
        either order, and a resume that overtook the ADD would let it run (legally, but not as the
        session's model says)."""
        pending = [r.rid for r in self.history.requests.values()
                   if r.engine == engine and r.while_paused and not r.abort_immediately]
        self._until(lambda: all(self.fe.terminals(rid) for rid in pending),
                    f"the engine_paused ERROR of {pending}", "ECP-REQ-7")

    def _moving(self, engine: int) -> bool:
        """Whether requests on ``engine`` run now (not paused, not asleep)."""
        rank = self.ranks[engine]
        return not rank.asleep and not rank.paused

    def _finished(self, rid: str) -> None:
        rec = self.history.requests[rid]
        try:
            if rec.duplicate_at is not None:  # the answer to its duplicate is not its end
                self.while_progressing(lambda t: self.fe.wait(lambda: self._ended(rid), t, f"the end of {rid}"))
            else:
                self.while_progressing(lambda t: self.fe.wait_finished(rid, t, max_tokens=rec.max_tokens))
        except CaseTimeout as exc:
            raise _Stop(Finding("ECP-OUT-1", str(exc), self.step)) from None

    def while_progressing(self, wait) -> None:
        """Call ``wait(timeout)`` in slices until it returns; raise its :class:`CaseTimeout` once no
        output arrived for a step timeout (or after ``PROGRESS_CAP`` step timeouts in all)."""
        fe = self.fe
        start = time.monotonic()
        seen, quiet_since = len(fe.raw_outputs), start
        while True:
            try:
                wait(min(self.step_timeout, 0.5))
                return
            except CaseTimeout as exc:
                now = time.monotonic()
                if len(fe.raw_outputs) > seen:
                    seen, quiet_since = len(fe.raw_outputs), now
                if now - quiet_since >= self.step_timeout or now - start >= PROGRESS_CAP * self.step_timeout:
                    raise CaseTimeout(f"{exc}: no output from the engine for {now - quiet_since:.1f}s, "
                                      f"{now - start:.1f}s in all") from None


@dataclass
class _Play(_PlayState):
    """One session played on a launched engine, step by step (the waits are :class:`_PlayState`'s)."""

    # ------------------------------------------------------------------ steps
    def play(self, i: int, step: dict[str, Any]) -> bool:
        """Play step ``i``; False when it is skipped as illegal in the state reached."""
        self.step = i
        played = getattr(self, "_" + step["op"])(step)
        if played:
            self.previous = step
        return played

    def _add(self, s: dict[str, Any]) -> bool:
        engine, client = self._where(s)
        if s["ref"] in self.rids:
            return False
        ref = s["ref"]
        head = f"x{ref}-{self.tag}"
        rid = head + "q" * max(0, int(s.get("id_len", 8)) - len(head))
        limit = (self.fe.max_model_len or 4096) - 1
        max_tokens = max(1, min(int(s["max_tokens"]), limit - 1))
        prompt_len = limit + 2 if s.get("oversize") else max(1, min(int(s["prompt_len"]), limit - max_tokens))
        sampling = {k: s[k] for k in ("temperature", "logprobs", "prompt_logprobs") if s.get(k) is not None}
        prompt = [1 + (ref + j) % 97 for j in range(prompt_len)]
        stop_token = None
        first = self.rids.get(s.get("same_prompt_as", -1))
        if first is not None:  # a repeat of a greedy ADD: its k-th token, if it came, is the stop token
            prompt = self.prompts[first]
            # the twin's k-th token is what the repeat stops on: wait for it (or its end), bounded
            deadline = time.monotonic() + self.step_timeout / 2
            while len(self.fe.tokens(first)) <= int(s["stop_at"]) and not self.fe.terminals(first) \
                    and time.monotonic() < deadline:
                self.fe.observe(0.01)
            produced = self.fe.tokens(first)
            if len(produced) > int(s["stop_at"]):
                stop_token = produced[int(s["stop_at"])]
                sampling["stop_token_ids"] = [stop_token]
        req = self.fe.request(rid, max_tokens=max_tokens, prompt=prompt, client=client, **sampling)
        changes: dict[str, Any] = {}
        if s.get("abort_immediately"):
            changes["abort_immediately"] = True
        if s.get("wave"):
            changes["current_wave"] = self.wave_base + int(s["wave"])
        if changes:
            req = msgspec.structs.replace(req, **changes)
        self.fe.add(req, engine)
        self.sent += 1
        self.rids[ref] = rid
        self.prompts[rid] = prompt
        self.client_of[rid] = client
        self.history.requests[rid] = RequestRecord(
            rid, engine, max_tokens, self.step, owes_terminal=not s.get("abort_immediately"),
            wave=changes.get("current_wave"), while_paused=self.ranks[engine].refusing,
            abort_immediately=bool(s.get("abort_immediately")), stop_token=stop_token,
            logprobs=s.get("logprobs"), oversize=bool(s.get("oversize")), while_asleep=self.ranks[engine].asleep)
        return True

    def _duplicate(self, s: dict[str, Any]) -> bool:
        """An ADD with the id of a request in flight (ECP-REQ-2: answered with ERROR, the original runs
        on), sent right behind that request's own ADD on the same socket, so that it surely reaches
        the engine while the original is in flight: a long request, with no step played between."""
        rid = self.rids.get(s["ref"])
        rec = self.history.requests.get(rid) if rid else None
        if rec is None or self.previous is None or self.previous.get("op") != "add" \
                or self.previous.get("ref") != s["ref"] or rec.duplicate_at is not None or not rec.owes_terminal \
                or rec.max_tokens < 200 or not self._moving(rec.engine) or self._ended(rid):
            return False
        client = self.client_of[rid]
        req = self.fe.request(rid, max_tokens=rec.max_tokens, prompt=self.prompts[rid], client=client)
        rec.duplicate_at, rec.duplicate_step = time.monotonic(), self.step
        self.fe.add(req, rec.engine)
        self.sent += 1
        return True

    def _abort(self, s: dict[str, Any]) -> bool:
        engine, client = self._where(s)
        groups: dict[tuple[int, int], list[str]] = {}
        now = time.monotonic()
        for ref in s["targets"]:
            rid = self.rids.get(ref)
            rec = self.history.requests.get(rid) if rid else None
            if rec is None:  # an id this engine never saw
                groups.setdefault((engine, client), []).append(f"nope-{self.step}-{ref}")
                continue
            # a client aborts its own requests, on the engine that owns them (ECP-ABORT-1)
            groups.setdefault((rec.engine, self.client_of[rid]), []).append(rid)
            if rec.owes_terminal and self._running(rid) \
                    and not self.ranks[rec.engine].paused and rec.aborted_running_at is None:
                rec.aborted_running_at, rec.abort_step = now, self.step
            rec.owes_terminal = False  # ECP-ABORT-4: an ABORT terminal is optional
        for (eng, cl), ids in groups.items():
            self.fe.abort(list(dict.fromkeys(ids)), engine=eng, client=cl)
            self.sent += 1
        return True

    def _call(self, s: dict[str, Any]) -> bool:
        engine, client = self._where(s)
        method, args = s["method"], list(s.get("args") or [])
        rank = self.ranks[engine]
        if s.get("refused"):  # an unknown method or surplus arguments: answered with a failure (ECP-UTIL-3)
            self._send_call(engine, client, method, args, refused=True)
            return True
        if method in ("pause_generation", "pause_scheduler") and (rank.paused or rank.asleep):
            return False
        if method == "sleep" and (rank.asleep or rank.paused):
            return False
        # a resume of a sleeping rank is left to wake_up: the protocol says nothing of it (vLLM 0.33's
        # resume_scheduler unpauses whatever paused the scheduler, sleep included, and ADDs then run
        # while is_sleeping is still true), so it has no outcome to judge
        if method == "resume_scheduler" and rank.asleep:
            return False
        expect: Any = None
        if method == "is_sleeping" and not rank.paused:
            # the sleep table leaves is_sleeping free while paused (vLLM 0.33 answers true: its
            # is_sleeping is is_scheduler_paused() or the executor's sleep state), so ask only then
            expect = rank.asleep
        elif method == "reset_prefix_cache" and not rank.paused and not rank.asleep and self._idle(engine):
            expect = True
        if method in STATEFUL:
            # a sleep or pause that ends running requests would also end one whose ABORT the engine
            # ignored, before the grace after which that shows: the state change waits for the grace
            self._past_graces(engine)
            self._calls_answered(engine)
        if method == "resume_scheduler":
            self._refusals_answered(engine)
        if method == "wake_up":
            self._woken(engine)
        cid = self._send_call(engine, client, method, args, expect)
        if method in STATEFUL and self._answered(cid, method):
            result = self.fe.replies[cid][0].utility.result
            rank.carried_out(method, args, result.value if result is not None else None)
        return True

    def _wait(self, s: dict[str, Any]) -> bool:
        until = s["until"]
        fe = self.fe
        if until == "replies":
            self._until(lambda: all(fe.replies.get(c) for c in self.history.calls), "a reply to every call",
                        "ECP-UTIL-1")
            return True
        if until == "idle":
            owed = [r.rid for r in self.history.requests.values() if r.owes_terminal and self._moving(r.engine)]
            if not owed:
                return False
            for rid in owed:
                self._finished(rid)
            return True
        rid = self.rids.get(s.get("ref", -1))
        rec = self.history.requests.get(rid) if rid else None
        if rec is None or not rec.owes_terminal or not self._moving(rec.engine):
            return False
        if until == "running":
            self._until(lambda: bool(own_outputs(fe, rec)), f"a first output of {rid}", "ECP-OUT-1")
        else:
            self._finished(rid)
        return True

    def _start_wave(self, s: dict[str, Any]) -> bool:
        engine, client = self._where(s)
        exclude = s.get("exclude")
        if exclude is not None:
            exclude = self.fe.start_index + exclude % self.session.topology.engines
        # written as the release under test writes it (its codec: the harness frontend's)
        self.fe.send_raw(self.fe.codec.encode_start_dp_wave(self.wave_base + int(s["wave"]), exclude),
                         engine=engine, client=client)
        self.sent += 1
        return True

    def _garbage(self, s: dict[str, Any]) -> bool:
        engine, client = self._where(s)
        frames = [bytes.fromhex(f) for f in s["frames"]]
        utility = self.fe.profile.request_types.get("UTILITY", RequestType.UTILITY.value)
        recovered = recover_utility_frames(frames) if frames and frames[0] == utility else None
        if recovered is not None:  # a refused UTILITY whose call id can be read: its failure may answer it
            self.history.refused_ids.add(recovered.call_id)
        self.fe.send_raw(frames, engine=engine, client=client, decode=lambda: "(a malformed message, on purpose)")
        self.sent += 1
        return True

    def _stop(self, s: dict[str, Any]) -> bool:
        engine, _ = self._where(s)
        pid = rank_process(self.handle, self.fe.start_index + engine)
        if pid is None:
            return False
        # every rank that process runs stands still, not only the one named
        ranks = frozenset(e for e in range(self.session.topology.engines)
                          if e == engine or rank_process(self.handle, self.fe.start_index + e) == pid)
        seconds = min(int(s["ms"]) / 1000, self.step_timeout / 2)
        t0 = time.monotonic()
        if not send(pid, signal.SIGSTOP):
            return False
        try:
            self.fe.observe(seconds)  # the other ranks go on; what is in flight is received
        finally:
            send(pid, signal.SIGCONT)
            self.history.stops.append(Stop(ranks, t0, time.monotonic()))
        self.fe.observe()  # let the rank catch up before the next step
        return True

    def _kill(self, s: dict[str, Any]) -> bool:
        engine, _ = self._where(s)
        rank = self.fe.start_index + engine
        pid = rank_process(self.handle, rank)
        if pid is None:
            return False
        killed_at = time.monotonic()
        if not send(pid, signal.SIGKILL):
            return False
        self.history.killed_at = killed_at
        fe = self.fe
        what = f"a sign that rank {rank} (pid {pid}) is dead after its SIGKILL"
        try:
            fe.wait(lambda: fe.engine_dead or (fe.input_closed is not None and fe.input_closed[1] >= killed_at),
                    self.step_timeout, what)
        except (FailedClosed, PeerCrashed, EngineStoppedReading):
            pass  # ENGINE_CORE_DEAD, the process gone, or its connection closed: seen dead
        except CaseTimeout:
            raise _Stop(Finding("ECP-ROB-3", f"rank {rank} (pid {pid}) was SIGKILLed, and for "
                                f"{self.step_timeout:.1f}s no frontend could tell: no ENGINE_CORE_DEAD, no "
                                "connection closed, and the engine command still runs -- its requests "
                                "wait forever instead of failing closed", self.step)) from None
        raise _Killed()

    # ------------------------------------------------------------------ the end of a session
    def epilogue(self) -> None:
        """Wake and resume every rank the session left asleep or paused, wait for every reply and owed
        terminal while outputs keep coming, then check that every rank serves a fresh request."""
        self.step = None
        fe = self.fe
        for engine, rank in enumerate(self.ranks):
            if rank.asleep or rank.paused:
                self._calls_answered(engine)
            if rank.asleep:
                self._woken(engine)
                self._answered(self._send_call(engine, 0, "wake_up", [None]), "wake_up")
                rank.carried_out("wake_up", [None], True)
            if rank.paused:
                self._refusals_answered(engine)
                self._answered(self._send_call(engine, 0, "resume_scheduler", []), "resume_scheduler")
                rank.carried_out("resume_scheduler", [], None)

        def settled() -> bool:
            return all(fe.replies.get(c) for c in self.history.calls) and all(
                self._ended(r.rid) for r in self.history.requests.values() if r.owes_terminal)

        try:
            self.while_progressing(lambda t: fe.wait(settled, t, "every reply and owed terminal"))
        except CaseTimeout:
            pass  # the properties name what is missing
        # an ABORT of a running request is judged on what follows its grace (ECP-ABORT-2): an engine
        # that ignores it keeps producing, which only a session still listening then can see; a
        # session ending right after its ABORT (a quiet window is shorter than the grace) would not
        self._past_graces()
        for engine in range(self.session.topology.engines):
            fe.serves(engine=engine, after="the session", timeout=self.step_timeout)
        fe.observe()  # what follows the terminals and the probes' (nothing may) is judged too


def _rules_of_the_cases(fe, fresh: bool) -> list[Finding]:
    """The rules the conformance cases judge on what the harness recorded (``conformance/engine/checks.py``):
    the handshake of a fresh launch (``ECP-HS-1``, ``ECP-HS-5``), and who sent ``wave_complete``
    (``ECP-DP-5``)."""
    violations = []
    if fresh:
        violations += [hello_violation(rec) for rec in fe.evidence.records.values() if rec.hello_raw is not None]
        violations += [ready_hash_violation(rec) for rec in fe.evidence.records.values()]
    violations.append(wave_complete_violation(fe))
    return [Finding(v.clause, str(v)) for v in violations if v is not None]


def launch(session: Session, cfg: EngineRunConfig, ctx: zmq.Context, launch_no: int) -> EngineUnderTest:
    """A peer of the session's topology, handshake done; :class:`LaunchFailed` when it does not
    complete its handshake."""
    topo = session.topology
    try:
        return EngineUnderTest(cfg, ctx, Transcript(max_entries=2000), launch_no, topo.clients, topo.engines,
                               topo.coordinator)
    except Exception as exc:  # noqa: BLE001 - whatever stopped the launch is reported as such
        raise LaunchFailed(f"{type(exc).__name__}: {exc}") from exc


def reusable(eut: EngineUnderTest, result: SessionResult) -> bool:
    """Whether another session may be played on ``eut`` after ``result``: the session broke no rule
    (so every rank served a fresh request at its end), had no process fault, and the engine is alive
    and still reads its input."""
    fe = eut.fe
    return (not result.findings and not result.process_fault and eut.alive() and fe.stopped_serving is None
            and fe.input_closed is None)


def play(session: Session, cfg: EngineRunConfig, ctx: zmq.Context, launch_no: int,
         step_timeout: float = 10.0) -> SessionResult:
    """Launch a peer of the session's topology, play the session, judge it, stop the peer.

    Raises :class:`LaunchFailed` when the peer does not complete its handshake."""
    started = time.monotonic()
    eut = launch(session, cfg, ctx, launch_no)
    launch_s = time.monotonic() - started
    try:
        result = play_on(eut, session, step_timeout)
    finally:
        eut.close()
    result.launch_s = launch_s
    return result


def play_on(eut: EngineUnderTest, session: Session, step_timeout: float = 10.0, tag: str = "") -> SessionResult:
    """Play the session on a launched peer of its topology and judge it; the peer is left running.

    On a peer an earlier session used (:func:`reusable` said so), what the frontend received before
    is forgotten first, and ``tag`` (unique per session) goes into the request ids, so that nothing
    of the earlier session is judged again or taken for this one's."""
    topo = session.topology
    transcript = Transcript(max_entries=2000)
    fe = eut.fe
    fe.transcript = transcript
    fe.forget_received()
    launched = time.monotonic()
    base = len(fe.machine.violations) if tag else 0  # a fresh launch's handshake is this session's
    base = max(fe.machine.engine(fe.start_index + e).wave for e in range(topo.engines))
    run = _Play(fe, session, step_timeout, ranks=[_Rank() for _ in range(topo.engines)], handle=eut.handle, tag=tag,
                wave_base=base)
    findings: list[Finding] = []
    played: list[int] = []
    marks: list[tuple[int, int | None]] = [(base, None)]
    try:
        for i, step in enumerate(session.steps):
            marks.append((len(fe.machine.violations), i))
            if run.play(i, step):
                played.append(i)
        marks.append((len(fe.machine.violations), None))
        run.epilogue()
    except _Killed:
        played.append(run.step)  # the kill was played; what follows it is not
        marks.append((len(fe.machine.violations), None))
    except _Stop as stop:
        findings.append(stop.finding)
    except FailedClosed as exc:
        garbage = any(session.steps[i]["op"] == "garbage" for i in played)
        findings.append(Finding("ECP-ROB-1", f"the engine failed closed "
                                f"{'after a malformed input message' if garbage else 'on legal traffic'}: {exc}",
                                run.step))
    except PeerCrashed as exc:
        findings.append(Finding("ECP-ROB-1", f"the engine died: {exc}", run.step))
    except CaseFailure as exc:
        findings.append(Finding(exc.clause or "ECP-ROB-1", str(exc), run.step))
    findings += (check_calls(fe, run.history) + check_requests(fe, run.history) + check_errors(fe, run.history)
                 + check_raw_outputs(fe, fe.profile) + _rules_of_the_cases(fe, fresh=not tag))
    machine = []
    for k in range(base, len(fe.machine.violations)):
        v = fe.machine.violations[k]
        step = next((s for n, s in reversed(marks) if n <= k), None)
        machine.append(Finding(v.clause, f"{v.socket}: {v.error}", step))
    findings = binding(machine + findings, fe.profile.layout)
    received = len(fe.raw_outputs) + len(fe.coordinator_messages)
    return SessionResult(findings, list(transcript.entries), played, run.sent, received,
                         0.0, time.monotonic() - launched, eut.log_tail() if findings else "",
                         process_fault=any(session.steps[i]["op"] in PROCESS_FAULTS for i in played))
