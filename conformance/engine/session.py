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
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import zmq

from ..interrupts import deferred
from ..launch import AdapterPeer, AttachedPeer, CommandPeer, LaunchError, PeerHandle
from ..outcomes import CaseTimeout, FailedClosed, PeerCrashed, PeerNeverStarted, Unsupported
from ..pace import STARTUP_TIMEOUT_S, LaunchRecord, Pace
from ..transcript import Transcript
from .harness_frontend import Addresses, HarnessFrontend
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


#: shared-topology engines launched ahead in the background once the shared engine had to be
#: replaced (only for a COMMAND peer, whose launch costs seconds): an engine that stopped serving
#: after one bad message is likely to do so again in the next case
SPARES = 2

#: how long stopping a spare waits for its thread: the handshake checks its cancel event every 50 ms,
#: and a launch cancelled at once stops its peer (``CommandPeer.stop``: a few seconds at most)
SPARE_JOIN_S = 15.0

#: how long the health probe after a failed case waits for a 2-token request (a serving engine
#: answers within milliseconds)
HEALTH_PROBE_S = 5.0

#: utility methods after which an engine is relaunched rather than checked and reused: what sleep
#: discarded (weights, KV cache) cannot be read back over the wire
UNRESTORABLE_METHODS = frozenset({"sleep", "wake_up"})

#: case id -> the topology (clients, engines, coordinator) it asks :meth:`EngineManager.fresh` for,
#: as a function of ``--engine-count``: the harness starts that launch in the background while the
#: cases before it run. Only a hint: a stale entry costs a launch reported "not needed", never a
#: verdict (tests/conformance/test_pace.py checks every entry against what its case asks for).
TOPOLOGY_HINTS: dict[str, Callable[[int], tuple[int, int, bool]]] = {
    **{cid: (lambda n: (2, 1, False)) for cid in ("ENG-HS-6", "ENG-OUT-3")},
    **{cid: (lambda n: (1, max(2, n), False)) for cid in ("ENG-DP-1", "ENG-DP-2", "ENG-DP-3")},
    **{cid: (lambda n: (1, max(2, n), True)) for cid in ("ENG-DP-4", "ENG-DP-5", "ENG-DP-6")},
}


#: clause families whose cases send what a correct frontend never sends or end their engine (run last)
HOSTILE_CLAUSES = ("ECP-ROB-", "ECP-SEC-")

#: a topology: (clients, engines, with a coordinator)
Topology = tuple[int, int, bool]


def describe(topology: Topology) -> str:
    clients, engines, coordinator = topology
    return (f"{engines} engine(s), {clients} client(s)" + (", a DP coordinator" if coordinator else ""))


class EngineNeverConnected(CaseTimeout):
    """No engine said HELLO within the startup budget: the command most likely does not reach
    the harness's handshake address. Later launches of the run fail at once with the same error
    instead of waiting the full budget again."""


class EngineUnderTest:
    """One launch: a harness frontend, its bound sockets and the engine handle."""

    def __init__(self, cfg: EngineRunConfig, ctx: zmq.Context, transcript: Transcript, launch_no: int,
                 clients: int, engine_count: int, coordinator: bool = False,
                 cancel: threading.Event | None = None, startup_timeout: float | None = None) -> None:
        self.cfg = cfg
        self.engine_count = engine_count
        self.handle: PeerHandle | None = None
        self.handshake_violations = 0
        addresses = self._addresses(launch_no, clients, coordinator)
        self.fe = HarnessFrontend(ctx, addresses, engine_count, cfg.engine_start_index, transcript,
                                  cfg.quiet_window_s, release=cfg.release)
        self.fe.declared_lacks = frozenset(cfg.lacks)
        self.fe.vocab_size = cfg.vocab_size
        try:
            with deferred():  # an interrupt must find the started peer held, to stop it below
                self.handle = self._start(launch_no)
            self.fe.alive_check = self.alive
            self.fe.run_handshake(startup_timeout or cfg.startup_timeout_s, cancel)
            if isinstance(self.handle, CommandPeer):
                self.handle.note_family()  # its ranks are up: stopping it stops them wherever they run
            # what the machine recorded during the handshake is the handshake cases' to report
            # (a relaunch must not make every later case fail on the same startup fault)
            self.handshake_violations = len(self.fe.machine.violations)
        except PeerCrashed as exc:
            detail = self._exit_detail()
            self.close()
            if detail:
                err = PeerCrashed(f"{exc} {detail}")
                # the process is gone (not a dead rank): its status and last lines, for PeerNeverStarted
                err.exited = (self.handle.exit_status(),  # type: ignore[attr-defined, union-attr]
                              [ln for ln in self.handle.log_tail(4096).splitlines() if ln.strip()][-8:])  # type: ignore[union-attr]
                raise err from exc
            raise
        except CaseTimeout as exc:
            never = not self.fe.evidence.records
            stall = self.handle.stall_detail() if never and self.handle is not None else ""
            self.close()
            if never:
                raise EngineNeverConnected(
                    f"{exc}: nothing connected to the handshake socket; check that COMMAND passes "
                    "{handshake_address} (or {handshake_host}/{handshake_port} with --transport tcp) "
                    "to the engine" + (f" (the adapter's threads were at: {stall})" if stall else "")) from exc
            raise
        except BaseException:
            self.close()
            raise

    def _addresses(self, launch_no: int, clients: int, coordinator: bool) -> Addresses:
        if self.cfg.attach and launch_no == 1:
            hs = self.cfg.attach
        elif self.cfg.transport == "tcp":
            hs = "tcp://127.0.0.1:*"
        else:
            hs = f"ipc://{self.cfg.workdir}/l{launch_no}-hs"
        if self.cfg.transport == "tcp":
            any_port = "tcp://127.0.0.1:*"
            return Addresses(hs, [any_port] * clients, [any_port] * clients,
                             (any_port, any_port) if coordinator else None)
        base = f"ipc://{self.cfg.workdir}/l{launch_no}"
        return Addresses(hs, [f"{base}-in{i}" for i in range(clients)],
                         [f"{base}-out{i}" for i in range(clients)],
                         (f"{base}-cin", f"{base}-cout") if coordinator else None)

    def _start(self, launch_no: int) -> PeerHandle:
        hs = self.fe.addresses.handshake
        if self.cfg.attach:
            return AttachedPeer(hs)
        if self.cfg.adapter:
            return AdapterPeer(self.cfg.adapter, hs, self.engine_count, self.cfg.engine_start_index)
        host, _, port = hs.rpartition(":") if hs.startswith("tcp://") else ("", "", "")
        values = {
            "handshake_address": hs,
            "handshake_host": host.removeprefix("tcp://"),
            "handshake_port": port,
            "engine_count": self.engine_count,
            "engine_start_index": self.cfg.engine_start_index,
        }
        return CommandPeer(self.cfg.command, values, Path(self.cfg.workdir) / f"engine-{launch_no}.log")

    def alive(self) -> bool:
        return not self.fe.engine_dead and (self.handle is None or self.handle.alive())

    def _exit_detail(self, lines: int = 8) -> str:
        """Why a launched command died during the handshake: its exit status and last output lines."""
        status = self.handle.exit_status() if self.handle is not None else None
        if status is None:
            return ""
        tail = [ln for ln in self.handle.log_tail(4096).splitlines() if ln.strip()][-lines:]
        text = f"(exit status {status} before completing the handshake)"
        if tail:
            text += "; its last output:\n" + "\n".join(f"      | {ln}" for ln in tail)
        return text

    def log_tail(self) -> str:
        return self.handle.log_tail() if self.handle else ""

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the process is gone, waiting at most ``timeout`` (None: still running)."""
        return self.handle.wait(timeout) if self.handle is not None else None

    def close(self) -> None:
        try:
            if self.handle is not None:
                # an engine that stopped serving or died gets no graceful shutdown: there is nothing
                # left to drain, and a real engine's SIGTERM handling costs seconds per relaunch
                self.handle.stop(3.0 if self.alive() and self.fe.stopped_serving is None
                                 and self.fe.input_closed is None else 0.2)
        finally:
            self.fe.close()


class Spare:
    """One launch running in a background thread: a shared-topology one adopted by
    :meth:`EngineManager.shared`, or one of another topology prepared for :meth:`EngineManager.fresh`.

    Its handshake is recorded in a transcript of its own (the cases running meanwhile must not get
    its frames); the adopting case's transcript notes the adoption."""

    def __init__(self, cfg: EngineRunConfig, ctx: zmq.Context, launch_no: int, record: LaunchRecord,
                 startup_timeout: float, topology: Topology | None = None) -> None:
        self.launch_no = launch_no
        self.topology = topology or (1, cfg.engine_count, False)
        self.record = record
        self.startup_timeout = startup_timeout
        self.cancel = threading.Event()
        self.engine: EngineUnderTest | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cfg, ctx), name=f"ecp-spare-{launch_no}",
                                        daemon=True)
        self._thread.start()

    def _run(self, cfg: EngineRunConfig, ctx: zmq.Context) -> None:
        started = time.monotonic()
        try:
            clients, engines, coordinator = self.topology
            self.engine = EngineUnderTest(cfg, ctx, Transcript(), self.launch_no, clients, engines, coordinator,
                                          cancel=self.cancel, startup_timeout=self.startup_timeout)
            Pace.launch_served(self.record, started)
        except BaseException as exc:  # noqa: BLE001 - reported by take(): the caller launches instead
            self.error = exc
            Pace.launch_failed(self.record, str(exc) if self.cancel.is_set() else type(exc).__name__)

    def take(self, timeout: float) -> EngineUnderTest | None:
        """The ready engine, waiting at most ``timeout`` for its handshake; None if it failed."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        return self.engine if self.engine is not None and self.engine.alive() else None

    def discard(self) -> None:
        self.cancel.set()
        self._thread.join(SPARE_JOIN_S)  # the handshake loop checks the event every 50 ms
        if self.engine is not None:
            self.record.state = "not needed"
            self.engine.close()


class EngineManager:
    """Owns the zmq context, the shared engine and every fresh engine of a run."""

    def release_layout(self) -> Any:
        """The layout of the release under test (vLLM 0.33's while ``--vllm auto`` has not chosen)."""
        return self.release_under_test.profile.layout

    @staticmethod
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

    def __init__(self, cfg: EngineRunConfig, transcript: Transcript) -> None:
        if cfg.release is None:
            cfg.release = ReleaseChoice(cfg.vllm)
        self.cfg = cfg
        #: the release under test and how it was chosen (the report's first lines)
        self.release_under_test = cfg.release
        self.transcript = transcript
        self.ctx = zmq.Context()
        self._launches = 0
        self._shared: EngineUnderTest | None = None
        self._startup_failure: Exception | None = None
        self._ever_connected = False
        self._never_connected: EngineNeverConnected | None = None
        #: None, "verify" (a case changed the shared engine's state on purpose: reuse it if it shows
        #: it is back in its initial state) or "relaunch" (it failed, or the harness broke mid-case)
        self._dirty: str | None = None
        self.pace = Pace("engine", cfg.case_timeout_s, cfg.startup_timeout_s)
        #: how many selected cases run after the current one (None: unknown); bounds the spares
        self._remaining: int | None = None
        self.deadline: float | None = None
        #: engines a case touched: the plugin checks they are still alive afterwards
        self.touched: list[EngineUnderTest] = []
        self._fresh: list[EngineUnderTest] = []
        self._fresh_crashed = False
        #: shared-topology engines launching in the background (see SPARES)
        self._spares: list[Spare] = []
        #: the last engine of a non-shared topology, kept for the next case asking for the same one
        self._kept: tuple[tuple[int, int, bool], EngineUnderTest] | None = None
        #: a launch of the next hinted topology (TOPOLOGY_HINTS), started while earlier cases run
        self._prepared: Spare | None = None
        #: a shared engine was started before: a new one is a replacement (spares start behind it)
        self._shared_ever = False
        self.logs: list[EngineUnderTest] = []
        #: engine launch -> how many machine violations it had when the current case began
        self._violation_marks: dict[int, int] = {}
        #: topologies whose handshake failed -> (the case that tried it, the failure): fail fast
        self._failed_topologies: dict[Topology, tuple[str, Exception]] = {}
        #: launches of the current case that it ends on purpose (:meth:`dedicated`)
        self._dedicated: list[EngineUnderTest] = []

    # ------------------------------------------------------------------ lifetimes
    def _launch(self, clients: int, engine_count: int, coordinator: bool = False) -> EngineUnderTest:
        if self.cfg.attach and self._launches >= 1:
            raise Unsupported("needs another engine launch, which --attach cannot do")
        if self._never_connected is not None:
            raise self._never_connected
        self._launches += 1
        self.transcript.note(f"launch {self._launches}: {engine_count} engine(s), {clients} client(s)")
        record = self.pace.launch_started(self._launches, describe((clients, engine_count, coordinator)),
                                          self._case_id())
        started = time.monotonic()
        try:
            eut = EngineUnderTest(self.cfg, self.ctx, self.transcript, self._launches, clients, engine_count,
                                  coordinator, startup_timeout=self.pace.startup_budget())
        except EngineNeverConnected as exc:
            Pace.launch_failed(record, "no engine connected")
            if not self._ever_connected:
                # the run's engine never reached us once: waiting again per case would only multiply the wait
                self._never_connected = exc
            raise
        except PeerCrashed as exc:
            Pace.launch_failed(record, type(exc).__name__)
            exited = getattr(exc, "exited", None)
            if not self._ever_connected and exited is not None:
                # the command exits before any handshake of the run: every case would crash the same way
                raise PeerNeverStarted(f"{exc}", *exited) from exc
            raise
        except BaseException as exc:
            Pace.launch_failed(record, type(exc).__name__)
            raise
        Pace.launch_served(record, started)
        self._ever_connected = True
        self.logs.append(eut)
        # startup time does not eat the case budget
        if self.deadline is not None:
            self.deadline += time.monotonic() - started
        eut.fe.deadline = self.deadline
        return eut

    def _case_id(self) -> str:
        return getattr(self.transcript, "case_id", "") or "before the first case"

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
                self._top_up_spares()
            self._shared = self._adopt_spare()
            if self._shared is None:
                try:
                    self._shared = self._launch(1, self.cfg.engine_count)
                except (CaseTimeout, PeerCrashed, LaunchError) as exc:
                    self._startup_failure = exc
                    raise
            if replacing:
                self._top_up_spares()
        self._shared.fe.deadline = self.deadline
        self.touched.append(self._shared)
        return self._shared

    def _restored(self, eut: EngineUnderTest) -> bool:
        """Whether an engine a case changed on purpose is back in its initial state: it never slept,
        still reads input, answers ``is_sleeping`` and ``is_scheduler_paused`` with false on every
        rank and serves a 2-token probe. Its leftover requests are aborted first. What the check
        sends is the harness's: nothing it records counts against the case about to run."""
        fe = eut.fe
        if (not eut.alive() or fe.stopped_serving is not None or fe.input_closed is not None
                or fe.methods_sent & UNRESTORABLE_METHODS):
            return False
        before = len(fe.machine.violations)
        saved, fe.deadline = fe.deadline, None
        try:
            for k in range(fe.engine_count):
                open_ids = fe.unfinished(engine=k)
                if open_ids:
                    fe.abort(open_ids, engine=k)
                for method in ("is_sleeping", "is_scheduler_paused"):
                    u = fe.call(method, [], engine=k, timeout=HEALTH_PROBE_S).utility
                    if u.failure_message is not None or u.result is None or u.result.value is not False:
                        return False
                fe.serves(engine=k, after="the check for reuse", timeout=HEALTH_PROBE_S)
        except Exception:  # noqa: BLE001 - any doubt means a relaunch, never a verdict
            return False
        finally:
            fe.deadline = saved
        if len(fe.machine.violations) != before:
            return False
        self._violation_marks[id(eut)] = len(fe.machine.violations)
        self.transcript.note("the shared engine is reused: it never slept, is neither sleeping nor paused, "
                             "and serves")
        return True

    def plan(self, upcoming: list[str]) -> None:
        """The ids of the selected cases that run after the current one: no more spares than there are
        cases left, and the next topology another case needs starts now (one such launch at a time)."""
        self._remaining = len(upcoming)
        if self._prepared is not None or not self.cfg.command or self.cfg.attach or not self._ever_connected:
            return  # (until one launch came up, the command may not work at all: nothing starts ahead)
        kept = self._kept[0] if self._kept is not None else None
        for cid in upcoming:
            hint = TOPOLOGY_HINTS.get(cid)
            if hint is None or hint(self.cfg.engine_count) == kept:
                continue
            key = hint(self.cfg.engine_count)
            if key == (1, self.cfg.engine_count, False) or any(
                    all(k >= f for k, f in zip(key, failed)) for failed in self._failed_topologies):
                return
            self._launches += 1
            record = self.pace.launch_started(self._launches, describe(key), cid, ahead=True)
            with deferred():  # held before an interrupt can land: close() must find it to stop it
                self._prepared = Spare(self.cfg, self.ctx, self._launches, record, self.pace.startup_budget(), key)
            return

    def _take_prepared(self, key: Topology) -> EngineUnderTest | None:
        """The launch prepared for ``key``, once its handshake is done; None when none was prepared (or
        it was cancelled). A prepared launch whose handshake failed is this case's failure, as a launch
        of its own would have been."""
        spare = self._prepared
        if spare is None or spare.topology != key:
            return None
        started = time.monotonic()
        eut = spare.take(spare.startup_timeout)
        self._prepared = None  # (only now: an interrupt while it waits leaves it for close() to stop)
        if eut is None:
            error = spare.error
            spare.discard()
            if isinstance(error, (CaseTimeout, PeerCrashed)):
                raise error
            return None
        eut.fe.transcript = self.transcript
        self.transcript.note(f"launch {spare.launch_no} ({describe(key)}, started ahead in the background) "
                             "serves this case")
        self.logs.append(eut)
        if self.deadline is not None:  # waiting for it does not eat the case budget
            self.deadline += time.monotonic() - started
        eut.fe.deadline = self.deadline
        return eut

    def case_budget(self) -> float:
        """The time budget of the case about to run (:mod:`ecp.conformance.pace`)."""
        return self.pace.case_budget()

    def launches(self) -> dict:
        """Every launch of the run with its start-up time, for the reports."""
        self._note_response()
        return self.pace.summary()

    def _top_up_spares(self) -> None:
        wanted = SPARES if self._remaining is None else min(SPARES, self._remaining)
        while len(self._spares) < wanted:
            self._launches += 1
            record = self.pace.launch_started(self._launches, describe((1, self.cfg.engine_count, False)),
                                              self._case_id(), ahead=True)
            with deferred():  # held before an interrupt can land: close() must find it to stop it
                self._spares.append(Spare(self.cfg, self.ctx, self._launches, record, self.pace.startup_budget()))

    def _adopt_spare(self, role: str = "replaces the shared engine") -> EngineUnderTest | None:
        """The oldest spare that finished its handshake (waiting for it within the startup budget)."""
        started = time.monotonic()
        while self._spares:
            spare = self._spares[0]
            eut = spare.take(spare.startup_timeout)
            self._spares.pop(0)  # (only now: an interrupt while it waits leaves it for close() to stop)
            if eut is None:
                spare.discard()
                continue
            eut.fe.transcript = self.transcript
            self.transcript.note(f"launch {spare.launch_no} (started ahead in the background) {role}")
            self.logs.append(eut)
            if self.deadline is not None:  # waiting for it does not eat the case budget
                self.deadline += time.monotonic() - started
            eut.fe.deadline = self.deadline
            return eut
        return None

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
            self._raise_if_blocked(key)
            try:
                eut = self._take_prepared(key) or self._launch(clients, key[1], coordinator)
            except (CaseTimeout, PeerCrashed) as exc:
                self._failed_topologies[key] = (getattr(self.transcript, "case_id", "an earlier case"), exc)
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

    def _raise_if_blocked(self, key: Topology) -> None:
        """Fail fast: a topology at least as demanding as one whose handshake already failed in this
        run (as many engines, clients and coordinator, or more) is not launched again. The engine
        showed it cannot do it; waiting out the startup budget again per case would only multiply
        the wait. The case gets the first failure's outcome with that failure as evidence."""
        for failed, (case_id, exc) in self._failed_topologies.items():
            if all(k >= f for k, f in zip(key, failed)):
                blocked = type(exc)(f"blocked by {case_id}: the handshake with {describe(failed)} already failed "
                                    f"in this run, so {describe(key)} is not launched again (the first failure: "
                                    f"{exc})")
                self.transcript.note(f"not launching {describe(key)}: blocked by {case_id}")
                raise blocked

    def after_failure(self) -> str | None:
        """A case failed: keep each engine it used if it still serves, else drop it.

        Aborts the case's unfinished requests, then sends a 2-token probe. Returns a sentence
        for the report when an engine no longer serves (None when every engine is healthy)."""
        notes = []
        used = list(dict.fromkeys([*self.touched, *self._fresh]))
        for eut in used:
            if not eut.alive():
                continue  # already gone: the plugin reports how
            state = self._probe(eut)
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

    def _probe(self, eut: EngineUnderTest) -> str | None:
        fe = eut.fe
        if fe.stopped_serving is not None or fe.input_closed is not None:
            return None  # the case's own probe already failed: that is the evidence; relaunch
        saved = fe.deadline
        fe.deadline = None
        try:
            for k in range(fe.engine_count):
                open_ids = fe.unfinished(engine=k)
                if open_ids:
                    fe.abort(open_ids, engine=k)
            for k in range(fe.engine_count):
                fe.serves(engine=k, after="the case", timeout=HEALTH_PROBE_S)
        except FailedClosed as exc:
            return f"after the case the engine failed closed ({exc})"
        except PeerCrashed as exc:
            if eut.handle is not None and eut.handle.exit_status() is None:
                return (f"after the case the engine no longer accepts input ({exc}): it closed its input "
                        "connection, yet its process is still running and it sent no ENGINE_CORE_DEAD")
            return f"after the case the engine died ({exc})"
        except AssertionError as exc:
            if not eut.alive():
                return f"after the case the engine died ({exc})"
            return (f"after the case {exc}; its process is still running and it sent no ENGINE_CORE_DEAD: "
                    "it stopped serving without failing closed (a frontend cannot tell it from a slow engine)")
        finally:
            fe.deadline = saved
        return None

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
            answered = [e.fe.first_answer_s for e in self.logs if e.fe.first_answer_s is not None]
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
                for spare in [*self._spares, *([self._prepared] if self._prepared else [])]:
                    spare.cancel.set()  # every spare's handshake stops at once, not one after the other
                if self._shared is not None:
                    self._shared.close()
                    self._shared = None
                if self._kept is not None:
                    self._kept[1].close()
                    self._kept = None
                for spare in [*self._spares, *([self._prepared] if self._prepared else [])]:
                    spare.discard()
                self._spares = []
                self._prepared = None
            finally:
                self.ctx.destroy(linger=0)


__all__ = ["EngineManager", "EngineNeverConnected", "EngineRunConfig", "EngineUnderTest", "LaunchError"]
