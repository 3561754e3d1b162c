"""Starting engines for the engine role: one launch, the launches started ahead, and fail-fast.

:class:`EngineUnderTest` is one launch: the harness frontend with its sockets bound, the peer
started (a command, an adapter, or an engine the harness attaches to) and its handshake run.
:class:`Spare` runs one in a background thread. :class:`Launcher` starts them for a run: a launch
when a case needs one, spares of the shared topology behind a replaced shared engine, the next
topology a case will ask for (:data:`TOPOLOGY_HINTS`) while earlier cases run, and no second
try at a topology whose handshake already failed. Which engine serves which case is the
:class:`~.session.EngineManager`'s.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import zmq

from ..interrupts import deferred
from ..launch import AdapterPeer, AttachedPeer, CommandPeer, PeerHandle
from ..outcomes import CaseTimeout, PeerCrashed, PeerNeverStarted, Unsupported
from ..pace import LaunchRecord, Pace
from ..transcript import Transcript
from .harness_frontend import Addresses, HarnessFrontend

if TYPE_CHECKING:
    from .session import EngineRunConfig

#: shared-topology engines launched ahead in the background once the shared engine had to be
#: replaced (only for a COMMAND peer, whose launch costs seconds): an engine that stopped serving
#: after one bad message is likely to do so again in the next case
SPARES = 2

#: how long stopping a spare waits for its thread: the handshake checks its cancel event every 50 ms,
#: and a launch cancelled at once stops its peer (``CommandPeer.stop``: a few seconds at most)
SPARE_JOIN_S = 15.0

#: case id -> the topology (clients, engines, coordinator) it asks :meth:`EngineManager.fresh` for,
#: as a function of ``--engine-count``: the harness starts that launch in the background while the
#: cases before it run. Only a hint: a stale entry costs a launch reported "not needed", never a
#: verdict (tests/conformance/test_pace.py checks every entry against what its case asks for).
TOPOLOGY_HINTS: dict[str, Callable[[int], tuple[int, int, bool]]] = {
    **{cid: (lambda n: (2, 1, False)) for cid in ("ENG-HS-6", "ENG-OUT-3")},
    **{cid: (lambda n: (1, max(2, n), False)) for cid in ("ENG-DP-1", "ENG-DP-2", "ENG-DP-3")},
    **{cid: (lambda n: (1, max(2, n), True)) for cid in ("ENG-DP-4", "ENG-DP-5", "ENG-DP-6")},
}

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
            self.fe.exit_wait = self._exits_within
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
            return AdapterPeer(self.cfg.adapter, hs, self.engine_count, engine_start_index=self.cfg.engine_start_index)
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

    def _exits_within(self, seconds: float) -> bool:
        """Whether the engine's process exits within ``seconds`` (waited on, not polled)."""
        return self.handle is not None and self.handle.wait(seconds) is not None

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


class Launcher:
    """The launches of one run (see the module docstring)."""

    def __init__(self, cfg: EngineRunConfig, ctx: zmq.Context, transcript: Transcript, pace: Pace) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.transcript = transcript
        self.pace = pace
        #: launches so far (each gets the next number)
        self.count = 0
        #: some launch of this run reached the handshake
        self.ever_connected = False
        self._never_connected: EngineNeverConnected | None = None
        #: every launch that served, in order (the run's response time is read from them)
        self.logs: list[EngineUnderTest] = []
        #: how many selected cases run after the current one (None: unknown); bounds the spares
        self.remaining: int | None = None
        #: shared-topology engines launching in the background (see SPARES)
        self.spares: list[Spare] = []
        #: a launch of the next hinted topology (TOPOLOGY_HINTS), started while earlier cases run
        self.prepared: Spare | None = None
        #: topologies whose handshake failed -> (the case that tried it, the failure): fail fast
        self.failed_topologies: dict[Topology, tuple[str, Exception]] = {}

    def case_id(self) -> str:
        return getattr(self.transcript, "case_id", "") or "before the first case"

    def launch(self, clients: int, engine_count: int, coordinator: bool = False) -> EngineUnderTest:
        """A launch of this topology, its handshake done (the start-up time is recorded)."""
        if self.cfg.attach and self.count >= 1:
            raise Unsupported("needs another engine launch, which --attach cannot do")
        if self._never_connected is not None:
            raise self._never_connected
        self.count += 1
        self.transcript.note(f"launch {self.count}: {engine_count} engine(s), {clients} client(s)")
        record = self.pace.launch_started(self.count, describe((clients, engine_count, coordinator)), self.case_id())
        started = time.monotonic()
        try:
            eut = EngineUnderTest(self.cfg, self.ctx, self.transcript, self.count, clients, engine_count,
                                  coordinator, startup_timeout=self.pace.startup_budget())
        except EngineNeverConnected as exc:
            Pace.launch_failed(record, "no engine connected")
            if not self.ever_connected:
                # the run's engine never reached us once: waiting again per case would only multiply the wait
                self._never_connected = exc
            raise
        except PeerCrashed as exc:
            Pace.launch_failed(record, type(exc).__name__)
            exited = getattr(exc, "exited", None)
            if not self.ever_connected and exited is not None:
                # the command exits before any handshake of the run: every case would crash the same way
                raise PeerNeverStarted(f"{exc}", *exited) from exc
            raise
        except BaseException as exc:
            Pace.launch_failed(record, type(exc).__name__)
            raise
        Pace.launch_served(record, started)
        self.ever_connected = True
        self.logs.append(eut)
        return eut

    def plan(self, upcoming: list[str], kept: Topology | None) -> None:
        """The ids of the selected cases that run after the current one: no more spares than there are
        cases left, and the next topology another case needs (other than ``kept``, the one kept from
        the last case) starts now (one such launch at a time)."""
        self.remaining = len(upcoming)
        if self.prepared is not None or not self.cfg.command or self.cfg.attach or not self.ever_connected:
            return  # (until one launch came up, the command may not work at all: nothing starts ahead)
        for cid in upcoming:
            hint = TOPOLOGY_HINTS.get(cid)
            if hint is None or hint(self.cfg.engine_count) == kept:
                continue
            key = hint(self.cfg.engine_count)
            if key == (1, self.cfg.engine_count, False) or any(
                    all(k >= f for k, f in zip(key, failed)) for failed in self.failed_topologies):
                return
            self.count += 1
            record = self.pace.launch_started(self.count, describe(key), cid, ahead=True)
            with deferred():  # held before an interrupt can land: close() must find it to stop it
                self.prepared = Spare(self.cfg, self.ctx, self.count, record, self.pace.startup_budget(), key)
            return

    def take_prepared(self, key: Topology) -> EngineUnderTest | None:
        """The launch prepared for ``key``, once its handshake is done; None when none was prepared (or
        it was cancelled). A prepared launch whose handshake failed is this case's failure, as a launch
        of its own would have been."""
        spare = self.prepared
        if spare is None or spare.topology != key:
            return None
        eut = spare.take(spare.startup_timeout)
        self.prepared = None  # (only now: an interrupt while it waits leaves it for close() to stop)
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
        return eut

    def top_up_spares(self) -> None:
        wanted = SPARES if self.remaining is None else min(SPARES, self.remaining)
        while len(self.spares) < wanted:
            self.count += 1
            record = self.pace.launch_started(self.count, describe((1, self.cfg.engine_count, False)),
                                              self.case_id(), ahead=True)
            with deferred():  # held before an interrupt can land: close() must find it to stop it
                self.spares.append(Spare(self.cfg, self.ctx, self.count, record, self.pace.startup_budget()))

    def adopt_spare(self, role: str = "replaces the shared engine") -> EngineUnderTest | None:
        """The oldest spare that finished its handshake (waiting for it within the startup budget)."""
        while self.spares:
            spare = self.spares[0]
            eut = spare.take(spare.startup_timeout)
            self.spares.pop(0)  # (only now: an interrupt while it waits leaves it for close() to stop)
            if eut is None:
                spare.discard()
                continue
            eut.fe.transcript = self.transcript
            self.transcript.note(f"launch {spare.launch_no} (started ahead in the background) {role}")
            self.logs.append(eut)
            return eut
        return None

    def note_failed(self, key: Topology, exc: Exception) -> None:
        """The handshake with ``key`` failed in this case: no topology as demanding is launched again."""
        self.failed_topologies[key] = (getattr(self.transcript, "case_id", "an earlier case"), exc)

    def raise_if_blocked(self, key: Topology) -> None:
        """Fail fast: a topology at least as demanding as one whose handshake already failed in this
        run (as many engines, clients and coordinator, or more) is not launched again. The engine
        showed it cannot do it; waiting out the startup budget again per case would only multiply
        the wait. The case gets the first failure's outcome with that failure as evidence."""
        for failed, (case_id, exc) in self.failed_topologies.items():
            if all(k >= f for k, f in zip(key, failed)):
                blocked = type(exc)(f"blocked by {case_id}: the handshake with {describe(failed)} already failed "
                                    f"in this run, so {describe(key)} is not launched again (the first failure: "
                                    f"{exc})")
                self.transcript.note(f"not launching {describe(key)}: blocked by {case_id}")
                raise blocked

    def cancel_all(self) -> None:
        """Every launch started ahead stops its handshake at once (not one after the other)."""
        for spare in [*self.spares, *([self.prepared] if self.prepared else [])]:
            spare.cancel.set()

    def discard_all(self) -> None:
        for spare in [*self.spares, *([self.prepared] if self.prepared else [])]:
            spare.discard()
        self.spares = []
        self.prepared = None
