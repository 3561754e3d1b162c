"""Engine lifetimes for the engine role: reuse healthy engines, relaunch only when needed.

Starting an engine costs seconds (a real vLLM engine core takes 10-30 s of CPU), so cases share one
engine (``engine_count`` ranks, one client) and get it through :meth:`EngineManager.shared`.
Cases that need another topology (two clients, N engines, a coordinator) use
:meth:`EngineManager.fresh`, which launches an engine of that topology once and keeps it for
the next case that asks for the same one. After a failed case :meth:`EngineManager.after_failure`
probes the engines the case used: one that still serves is kept (its leftover requests
aborted), one that stopped serving or died is relaunched when next needed. A case that changes
an engine's state on purpose (pause, sleep) calls :meth:`EngineManager.mark_dirty`: the engine is
reused when it never slept and shows that it is back in its initial state, else relaunched.
Every launch is recorded with its start-up time (:mod:`ecp.conformance.pace`), which also sets
the start-up budget of later launches and, with the first request's answer time, the case budget.
Starting the engines (one launch, spares, a topology started ahead) is :mod:`.launches`'.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator

import zmq

from ..interrupts import deferred
from ..launch import LaunchError
from ..outcomes import CaseTimeout, PeerCrashed, Unsupported
from ..pace import STARTUP_TIMEOUT_S, Pace
from ..transcript import Transcript
from . import health
from .launches import TOPOLOGY_HINTS, EngineNeverConnected, EngineUnderTest, Launcher, Topology, describe
from .release_choice import ReleaseChoice
from ecp.spec import VLLM_RELEASE


@dataclass
class EngineRunConfig:
    """Everything the engine role needs to start and talk to engines (JSON-serialisable)."""

    command: list[str] = field(default_factory=list)
    attach: str | None = None
    adapter: str | None = None
    transport: str = "ipc"
    engine_count: int = 1
    engine_start_index: int = 0
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    case_timeout_s: float = 10.0
    quiet_window_s: float = 0.3
    workdir: str = ""
    #: capabilities the engine lacks, declared with ``--engine-lacks`` (ecp.conformance.capabilities)
    lacks: list[str] = field(default_factory=list)
    #: the vocabulary size of the engine's model (``--engine-vocab-size``): output token ids stay below it
    vocab_size: int | None = None
    #: the vLLM release the harness speaks: ``--vllm RELEASE|PATH|auto`` (ecp.conformance.engine.release_choice)
    vllm: str = VLLM_RELEASE
    #: built from :attr:`vllm` by the manager and shared by every launch of the run (not in the JSON)
    release: ReleaseChoice | None = field(default=None, repr=False, compare=False)


#: clause families whose cases send what a correct frontend never sends or end their engine (run last)
HOSTILE_CLAUSES = ("ECP-ROB-", "ECP-SEC-")

def run_phase(case: Any) -> int:
    """Where a case runs (cases keep their catalogue order within a phase; reports keep it too):

    0. interop-level cases on the shared engine;
    1. cases with a topology of their own (:data:`TOPOLOGY_HINTS`): their launch starts in the
       background once the first one came up, and phase 0 runs meanwhile;
    2. the cases most likely to leave an engine unable to serve: hardened-level ones and those of
       the robustness and security clauses (input a correct frontend never sends, a pickle payload,
       a SIGTERM). Run together, each replacement and the spares behind it start side by side
       (:data:`SPARES`), instead of relaunches interrupting the cases a working engine serves.
    """
    if case.conformance_level == "hardened" or case.clause.startswith(HOSTILE_CLAUSES):
        return 2
    return 1 if case.id in TOPOLOGY_HINTS else 0


class EngineManager:
    """Owns the zmq context, the shared engine and every fresh engine of a run (the engine role's
    ``ecp.conformance.plugin.PeerManager``)."""

    role: ClassVar[str] = "engine"
    Config: ClassVar[type] = EngineRunConfig

    def release_layout(self) -> Any:
        """The layout of the release under test (vLLM 0.33's while ``--vllm auto`` has not chosen)."""
        return self.release_under_test.profile.layout

    def release_facts(self) -> dict[str, Any]:
        """The release under test and how it was chosen (the report's first lines)."""
        return self.release_under_test.to_dict()

    def uncited_routes(self, cited: Iterable[str]) -> list[str]:
        """The engine role drives no HTTP route."""
        return []

    #: where a case runs (:func:`run_phase`)
    run_phase = staticmethod(run_phase)

    def __init__(self, cfg: EngineRunConfig, transcript: Transcript) -> None:
        if cfg.release is None:
            cfg.release = ReleaseChoice(cfg.vllm)
        self.cfg = cfg
        #: the release under test and how it was chosen (the report's first lines)
        self.release_under_test = cfg.release
        self.transcript = transcript
        self.ctx = zmq.Context()
        self.pace = Pace("engine", cfg.case_timeout_s, cfg.startup_timeout_s)
        #: starts the engines: launches, spares, the next topology ahead, fail-fast
        self.launcher = Launcher(cfg, self.ctx, transcript, self.pace)
        self._shared: EngineUnderTest | None = None
        self._startup_failure: Exception | None = None
        #: None, "verify" (a case changed the shared engine's state on purpose: reuse it if it shows
        #: it is back in its initial state) or "relaunch" (it failed, or the harness broke mid-case)
        self._dirty: str | None = None
        self.deadline: float | None = None
        #: engines a case touched: the plugin checks they are still alive afterwards
        self.touched: list[EngineUnderTest] = []
        self._fresh: list[EngineUnderTest] = []
        self._fresh_crashed = False
        #: the last engine of a non-shared topology, kept for the next case asking for the same one
        self._kept: tuple[tuple[int, int, bool], EngineUnderTest] | None = None
        #: a shared engine was started before: a new one is a replacement (spares start behind it)
        self._shared_ever = False
        #: engine launch -> how many machine violations it had when the current case began
        self._violation_marks: dict[int, int] = {}
        #: launches of the current case that it ends on purpose (:meth:`dedicated`)
        self._dedicated: list[EngineUnderTest] = []

    # ------------------------------------------------------------------ lifetimes
    def _serving(self, eut: EngineUnderTest | None, started: float) -> EngineUnderTest | None:
        """``eut`` serves the case about to run: the time spent getting it does not eat the case budget."""
        if eut is not None:
            if self.deadline is not None:
                self.deadline += time.monotonic() - started
            eut.fe.deadline = self.deadline
        return eut

    def _launch(self, clients: int, engine_count: int, coordinator: bool = False) -> EngineUnderTest:
        started = time.monotonic()
        return self._serving(self.launcher.launch(clients, engine_count, coordinator), started)

    def _adopt_spare(self, role: str = "replaces the shared engine") -> EngineUnderTest | None:
        started = time.monotonic()
        return self._serving(self.launcher.adopt_spare(role), started)

    def shared(self) -> EngineUnderTest:
        """The shared engine, (re)started if needed."""
        if self._shared is not None and self.cfg.attach and self._dirty and self._shared.alive():
            # "dirty" is a precaution (a case slept the engine, or failed): a harness-launched engine
            # is restarted, but an attached one cannot be, so the run carries on with it; a case that
            # really broke it shows up in the cases after it
            self.transcript.note("the attached engine cannot be restarted: reusing it after the previous case")
            self._dirty = None
        if self._shared is not None and self._dirty == "verify":
            checking = time.monotonic()
            if self._restored(self._shared):
                self._dirty = None
            if self.deadline is not None:  # like a launch, the check does not eat the case budget
                self.deadline += time.monotonic() - checking
        if self._shared is not None and (self._dirty or not self._shared.alive()):
            if self.cfg.attach:
                raise PeerCrashed("the attached engine is gone and cannot be restarted")
            self._shared.close()
            self._shared = None
        self._dirty = None
        if self._shared is None:
            if self._startup_failure is not None:
                # a deterministic startup failure: report it again instead of waiting again
                raise self._startup_failure
            replacing = self._shared_ever and bool(self.cfg.command) and not self.cfg.attach
            self._shared_ever = True
            if replacing:
                # the replacement and the spares behind it start side by side: the engine that stopped
                # serving is likely to do so again in the next case
                self.launcher.top_up_spares()
            self._shared = self._adopt_spare()
            if self._shared is None:
                try:
                    self._shared = self._launch(1, self.cfg.engine_count)
                except (CaseTimeout, PeerCrashed, LaunchError) as exc:
                    self._startup_failure = exc
                    raise
            if replacing:
                self.launcher.top_up_spares()
        self._shared.fe.deadline = self.deadline
        self.touched.append(self._shared)
        return self._shared

    def _restored(self, eut: EngineUnderTest) -> bool:
        """Whether the shared engine a case changed on purpose can serve the next one (:func:`.health.restored`)."""
        if not health.restored(eut):
            return False
        self._violation_marks[id(eut)] = len(eut.fe.machine.violations)  # the check's own frames count for no case
        self.transcript.note("the shared engine is reused: it never slept, is neither sleeping nor paused, "
                             "and serves")
        return True

    def plan(self, upcoming: list[str]) -> None:
        """The ids of the selected cases that run after the current one (:meth:`Launcher.plan`)."""
        self.launcher.plan(upcoming, self._kept[0] if self._kept is not None else None)

    def case_budget(self) -> float:
        """The time budget of the case about to run (:mod:`ecp.conformance.pace`)."""
        return self.pace.case_budget()

    def launches(self) -> dict:
        """Every launch of the run with its start-up time, for the reports."""
        self._note_response()
        return self.pace.summary()

    def mark_dirty(self) -> None:
        """The shared engine may hold leftovers (running requests, a pause, sleep state): before reuse it
        must show it is back in its initial state (:meth:`_restored`), else it is relaunched."""
        if self._dirty is None:
            self._dirty = "verify"

    def mark_broken(self) -> None:
        """The shared engine's state is unknown (the harness broke mid-case): relaunch before reuse."""
        self._dirty = "relaunch"

    @contextlib.contextmanager
    def fresh(self, clients: int = 1, engine_count: int | None = None,
              coordinator: bool = False) -> Iterator[EngineUnderTest]:
        """An engine of this topology for one case; ``coordinator``: the harness also plays the DP
        coordinator (its addresses go into INIT). The shared engine serves when the topology is
        its own; otherwise the engine launched for the previous case of this topology is reused
        while it is healthy, and launched when there is none."""
        if self.cfg.attach:
            raise Unsupported("needs a harness-launched engine with its own topology (not possible with --attach)")
        key = (clients, engine_count or self.cfg.engine_count, coordinator)
        if key == (1, self.cfg.engine_count, False):
            yield self.shared()
            return
        eut = None
        if self._kept is not None:
            kept_key, kept = self._kept
            if kept_key == key and kept.alive():
                eut = kept
                eut.fe.deadline = self.deadline
            else:
                kept.close()  # one extra topology at a time: engines cost memory
                self._kept = None
        if eut is None:
            self.launcher.raise_if_blocked(key)
            try:
                started = time.monotonic()
                eut = self._serving(self.launcher.take_prepared(key), started) or \
                    self._launch(clients, key[1], coordinator)
            except (CaseTimeout, PeerCrashed) as exc:
                self.launcher.note_failed(key, exc)
                raise
            self._kept = (key, eut)
        self._fresh.append(eut)
        try:
            yield eut
        finally:
            if not eut.alive():
                self._fresh_crashed = True
                eut.close()
                self._kept = None

    @contextlib.contextmanager
    def dedicated(self) -> Iterator[EngineUnderTest]:
        """A launch of the shared topology for one case that ends it on purpose (graceful shutdown):
        its exit is the case's to judge, not a crash, and it is never reused."""
        if self.cfg.attach or not self.cfg.command:
            raise Unsupported("needs an engine process the harness launches and can signal (run with -- COMMAND)")
        eut = self._adopt_spare("is this case's own launch") or self._launch(1, self.cfg.engine_count)
        self._dedicated.append(eut)
        try:
            yield eut
        finally:
            eut.close()

    def after_failure(self) -> str | None:
        """A case failed: keep each engine it used if it still serves, else drop it.

        Aborts the case's unfinished requests, then sends a 2-token probe. Returns a sentence
        for the report when an engine no longer serves (None when every engine is healthy)."""
        notes = []
        used = list(dict.fromkeys([*self.touched, *self._fresh]))
        for eut in used:
            if not eut.alive():
                continue  # already gone: the plugin reports how
            state = health.probe(eut)
            if state is None and eut.fe.stopped_serving is None and eut.fe.input_closed is None:
                continue
            if state is not None:
                notes.append(state)
            if eut is self._shared:
                self._dirty = "relaunch"
            elif self._kept is not None and self._kept[1] is eut:
                eut.close()
                self._kept = None
        return "; ".join(notes) or None

    def begin_case(self) -> None:
        """Forget which engines the previous case touched."""
        self.deadline = None
        self.touched = []
        self._fresh = []
        self._dedicated = []
        self._fresh_crashed = False
        self._violation_marks = {} if self._shared is None else {
            id(self._shared): len(self._shared.fe.machine.violations)}
        self._note_response()

    def _note_response(self) -> None:
        """The first launch that answered a request sets the run's response time."""
        if self.pace.response_s is None:
            answered = [e.fe.first_answer_s for e in self.launcher.logs if e.fe.first_answer_s is not None]
            if answered:
                self.pace.note_response(answered[0])

    def violations(self) -> list:
        """What the protocol machine recorded against the engines this case used, since it began."""
        seen: dict[int, EngineUnderTest] = {id(e): e for e in [*self.touched, *self._fresh, *self._dedicated]}
        out: list = []
        for key, eut in seen.items():
            out += eut.fe.violations_since(self._violation_marks.get(key, eut.handshake_violations))
        return out

    def set_deadline(self, deadline: float | None) -> None:
        self.deadline = deadline
        if self._shared is not None:
            self._shared.fe.deadline = deadline

    def case_crashed(self) -> bool:
        return self._fresh_crashed or any(not e.alive() for e in self.touched)

    def log_tail(self) -> str:
        """The log tails of the engines this case used."""
        return "\n".join(t for t in (e.log_tail() for e in [*self.touched[-1:], *self._fresh]) if t)

    def death_detail(self) -> str:
        """How the engines this case used died: the exit status where the process is gone."""
        parts = []
        for eut in dict.fromkeys([*self.touched, *self._fresh]):
            if eut.handle is None:
                continue
            status = eut.wait_exit(3.0) if eut.fe.engine_dead else eut.handle.exit_status()
            if status is not None:
                parts.append(f"its process exited with status {status}")
            elif eut.fe.engine_dead:
                parts.append("its process was still running 3 s later")
        return "; ".join(parts)

    def failed_closed(self) -> bool:
        """Whether an engine this case used announced its death with ENGINE_CORE_DEAD."""
        return any(e.fe.engine_dead for e in [*self.touched, *self._fresh])

    def close(self) -> None:
        """Stop every engine of the run, then end the zmq context. Bounded: each stop is
        (``CommandPeer.stop``), a spare's thread is waited for at most :data:`SPARE_JOIN_S`, and the
        context is destroyed with LINGER 0 -- ``Context.term`` would wait without end for a socket
        that an interrupted launch left open. An interrupt does not cut it short."""
        with deferred():
            try:
                self.launcher.cancel_all()
                if self._shared is not None:
                    self._shared.close()
                    self._shared = None
                if self._kept is not None:
                    self._kept[1].close()
                    self._kept = None
                self.launcher.discard_all()
            finally:
                self.ctx.destroy(linger=0)


__all__ = ["EngineManager", "EngineNeverConnected", "EngineRunConfig", "EngineUnderTest", "LaunchError",
           "TOPOLOGY_HINTS", "Topology", "describe"]
