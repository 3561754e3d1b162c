"""Frontend lifetimes for the frontend role: one shared launch, fresh ones on demand.

A launch is the frontend process (a :class:`~ecp.conformance.launch.CommandPeer`
running the user's COMMAND with fresh ports) plus ``engine_count`` scripted
engines that join its handshake. Most cases share one launch and reprogram
its engines; cases that need a frontend in another state (an engine that
withholds READY, a ready payload of another shape, no KV connector, an engine
that dies) use :meth:`FrontendManager.fresh`.

Everything asynchronous (zmq engines, httpx) runs on one event loop in a
background thread (:class:`LoopThread`), so that synchronous pytest cases can
share a launch across tests: a case body is an ``async def`` taking the
manager, run with :meth:`FrontendManager.run` under the case's time budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, ClassVar, Iterable, TypeVar

import zmq
import zmq.asyncio

from ..interrupts import deferred
from ..launch import AdapterPeer, CommandPeer, LaunchError, PeerHandle, fill_template
from ..outcomes import CaseTimeout, PeerCrashed, PeerNeverStarted, Unsupported, CaseFailure
from ..pace import STARTUP_TIMEOUT_S, LaunchRecord, Pace
from ..release import VERSION_CHANNEL
from ..transcript import Transcript
from .engine_release import EngineRelease, engine_release
from .scripted_engines import EngineHandshakeFailed, ScriptedEngine
from .http_driver import HttpDriver
from .launcher import Placeholders, has_kv_connector, without_kv_connector, without_kv_trust
from .probe import Capabilities, probe
from .recorder import FrameRecord
from ecp.spec import VLLM_RELEASE

T = TypeVar("T")

#: How often process liveness and ``/health`` are polled while waiting (neither has an event).
POLL_S = 0.1


@dataclass
class FrontendRunConfig:
    """Everything the frontend role needs to launch and drive frontends (JSON-serialisable).

    ``attach`` is the handshake address of a frontend the user started
    (``tcp://HOST:PORT``, its ``--data-parallel-rpc-port``) and ``http_url``
    its HTTP base URL; the harness then cannot relaunch it, nor read from its
    command line whether it has a KV connector (``attach_kv_connector``).
    """

    command: list[str] = field(default_factory=list)
    #: ``MODULE:FUNCTION``: the frontend runs in this process, ``FUNCTION(argv)`` with ``command`` filled in
    #: as its arguments (``--adapter``); it returns an object with ``stop()``
    adapter: str | None = None
    attach: str | None = None
    http_url: str | None = None
    #: with ``attach``: whether the attached frontend has a KV connector (the harness cannot see its command)
    attach_kv_connector: bool = True
    engine_count: int = 2
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    case_timeout_s: float = 30.0
    quiet_window_s: float = 0.3
    workdir: str = ""
    #: capabilities the frontend lacks, declared with ``--frontend-lacks`` (ecp.conformance.capabilities)
    lacks: list[str] = field(default_factory=list)
    #: the vLLM release the scripted engines speak (``--vllm``: a shipped release, a layout file, a vLLM tree)
    vllm: str = VLLM_RELEASE


#: How long an interrupted coroutine and the loop's teardown get to finish their cleanup (closing
#: what they launched: a frontend's stop takes up to its SIGTERM grace plus the SIGKILL wait).
SETTLE_S = 30.0
#: How long an interrupt waits for a coroutine it cancelled to show it had started.
START_WAIT_S = 2.0


class LoopThread:
    """An asyncio loop on a daemon thread; :meth:`run` executes a coroutine there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="ecp-frontend-role", daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], deadline: Callable[[], float], what: str) -> T:
        """Run ``coro`` on the loop; cancel it at ``deadline()`` (re-read, so it may be extended).
        Interrupted while it runs (Ctrl-C, or SIGTERM under :mod:`..interrupts`), it is cancelled
        and its cleanup (closing what it launched) finishes before the interrupt goes on."""
        running, settled = threading.Event(), threading.Event()

        async def settling() -> T:
            running.set()
            try:
                return await coro
            finally:
                settled.set()

        future = None
        try:
            with deferred():  # an interrupt goes on only once the coroutine is held, to be cancelled
                future = asyncio.run_coroutine_threadsafe(settling(), self.loop)
            started = time.monotonic()
            while True:
                remaining = deadline() - time.monotonic()
                try:
                    return future.result(max(0.0, min(remaining, 0.5)))
                except TimeoutError:
                    if future.done() or time.monotonic() < deadline():
                        continue
                    future.cancel()
                    raise CaseTimeout(f"{what} did not finish within {time.monotonic() - started:.1f} s") from None
        except KeyboardInterrupt:
            if future is not None:
                future.cancel()
                # a coroutine cancelled before its first step never runs and has nothing to clean up;
                # one whose first step was already queued runs it first (the loop keeps its order)
                if running.wait(START_WAIT_S):
                    settled.wait(SETTLE_S)
            raise

    def close(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(drain(), self.loop).result(SETTLE_S)
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def _record_to_transcript(transcript: Transcript) -> Callable[[FrameRecord], None]:
    def sink(rec: FrameRecord) -> None:
        direction = "recv" if rec.direction == "in" else "sent"
        channel = f"engine{rec.rank}/{rec.channel}" + ("" if rec.client_index is None else f"[{rec.client_index}]")
        transcript.record(direction, channel, rec.frames,
                          (lambda: rec.error.to_dict()) if rec.error is not None else (lambda: rec.message))
    return sink


#: The shortest window in which a frontend that must refuse a handshake shows whether it serves.
REFUSAL_MIN_S = 1.5
#: How long a broken HTTP connection waits for the frontend's process to show it exited.
EXIT_GRACE_S = 0.5
#: The share of a case's budget one HTTP request may wait for its answer.
REQUEST_SHARE = 0.8


class FrontendUnderTest:
    """One launch: the frontend process, its scripted engines, an HTTP driver."""

    def __init__(self, cfg: FrontendRunConfig, ctx: zmq.asyncio.Context, transcript: Transcript,
                 launch_no: int, *, engine_count: int, argv: list[str], scripts: list[Any] | None) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.transcript = transcript
        self.launch_no = launch_no
        self.engine_count = engine_count
        self.argv = argv
        self.kv_connector = has_kv_connector(argv) if not cfg.attach else cfg.attach_kv_connector
        self.handle: PeerHandle | None = None
        if cfg.attach:
            host_port = cfg.attach.removeprefix("tcp://")
            host, _, port = host_port.rpartition(":")
            http_port = int((cfg.http_url or "").rsplit(":", 1)[-1].split("/")[0] or 0)
            self.placeholders = Placeholders(int(port), http_port, engine_count, host)
            self.base_url = (cfg.http_url or "").rstrip("/")
        else:
            self.placeholders = Placeholders.fresh(engine_count)
            self.base_url = self.placeholders.http_url
        to_transcript = _record_to_transcript(transcript)
        # Set on every frame any engine sends or receives: waits wake on it.
        self._changed = asyncio.Event()

        def sink(rec: FrameRecord) -> None:
            to_transcript(rec)
            self._changed.set()

        #: the release every scripted engine of this launch speaks
        self.release: EngineRelease = engine_release(cfg.vllm)
        self.engines = [
            ScriptedEngine(ctx, rank, engine_count, self.placeholders.handshake_address,
                           scripts[rank] if scripts else None, release=self.release)
            for rank in range(engine_count)
        ]
        for engine in self.engines:
            engine.recorder.sink = sink
        # one request's bound stays inside the case's budget, so a frontend that never answers is
        # reported with the request it left unanswered
        self.driver = HttpDriver(self.base_url, timeout=cfg.case_timeout_s * REQUEST_SHARE)
        self.driver.on_connection_lost = self._connection_lost
        self.driver.log = transcript.http
        self.caps: Capabilities | None = None
        #: seconds the capability probe took (its requests are the launch's first answers)
        self.probe_s: float | None = None
        #: a launch that a case judges itself: the task that records its start-up (``FrontendManager``)
        self.watch: asyncio.Task | None = None
        #: seconds from the last engine's READY to GET /health 200 (measured by start())
        self.healthy_after_s: float | None = None
        #: engines outside the configured ranks that a case added (``ECP-HS-11``), stopped at close()
        self.strangers: list[ScriptedEngine] = []
        self._sink = sink

    # -- lifecycle -------------------------------------------------------------------
    async def start(self, *, wait_healthy: bool = True, wait_registered: bool = True) -> None:
        """Join the handshake with every engine, then (optionally) wait for ``/health`` 200 and probe.

        ``wait_registered=False`` returns once the process is launched: the case judges the
        handshake itself (a frontend that must refuse it may exit at once)."""
        for engine in self.engines:
            engine.start(self.cfg.startup_timeout_s)
        if self.cfg.adapter:
            self.handle = AdapterPeer(self.cfg.adapter, fill_template(self.argv, self.placeholders.values()))
        elif not self.cfg.attach:
            log = Path(self.cfg.workdir or ".") / f"frontend-{self.launch_no}.log"
            self.handle = CommandPeer(self.argv, self.placeholders.values(), log)
        self.transcript.note(f"launch {self.launch_no}: {self.engine_count} engine(s) joining "
                             f"{self.placeholders.handshake_address}, HTTP {self.base_url}")
        if not wait_registered:
            return
        await self.until(self._engines_registered, self.cfg.startup_timeout_s,
                         "every scripted engine to finish its handshake with the frontend")
        if wait_healthy:
            registered = time.monotonic()
            self.driver.attributing = False   # the launch's own requests are the harness's, not the case's
            try:
                await self.wait_health(lambda s: s == 200, self.cfg.startup_timeout_s, "GET /health to answer 200")
                self.healthy_after_s = time.monotonic() - registered
                await self.probe()
            finally:
                self.driver.attributing = True

    async def probe(self) -> Capabilities:
        """Read what the frontend serves (once per launch): its model name above all, which every later
        request names (``ECP-HTTP-4``). Its requests are the harness's, not the case's."""
        if self.caps is None:
            attributing, self.driver.attributing = self.driver.attributing, False
            started = time.monotonic()
            try:
                self.caps = await probe(self.driver, kv_connector=self.kv_connector)
                self.probe_s = time.monotonic() - started
                await self._announce_version()
            finally:
                self.driver.attributing = attributing
            self.transcript.note(f"capabilities: {self.caps.describe()}")
        return self.caps

    async def _announce_version(self) -> None:
        """``GET /version``'s answer, to the transcript's ``http/version`` channel: the release the frontend
        announces is one fact of its fingerprint (:mod:`ecp.conformance.release`); a frontend without the
        route says nothing."""
        try:
            reply = await self.driver.request("GET", "/version")
        except Exception:  # noqa: BLE001 - a fact for the fingerprint, never a case's failure
            return
        if reply.ok and isinstance(reply.body, dict) and isinstance(reply.body.get("version"), str):
            self.transcript.record("recv", VERSION_CHANNEL, [reply.body["version"].encode()],
                                   lambda: f"GET /version: {reply.body['version']}")

    async def serving(self, timeout: float) -> None:
        """Wait until ``GET /health`` answers 200, then probe: for a launch started without waiting for
        health, before its first request (which must name a model the frontend lists)."""
        await self.wait_health(lambda s: s == 200, timeout, "GET /health to answer 200")
        await self.probe()

    def stranger(self, rank: int, script: Any = None) -> ScriptedEngine:
        """A scripted engine with a rank outside the configured ones (``ECP-HS-11``), started: it says
        HELLO on the frontend's handshake socket and follows whatever the frontend answers."""
        engine = ScriptedEngine(self.ctx, rank, self.engine_count, self.placeholders.handshake_address, script,
                                release=self.release)
        engine.recorder.sink = self._sink
        self.strangers.append(engine)
        engine.start(self.cfg.startup_timeout_s)
        return engine

    def _engines_registered(self) -> bool:
        for engine in self.engines:
            if engine.failure is not None:
                if isinstance(engine.failure, EngineHandshakeFailed) and "does not decode" in str(engine.failure):
                    raise CaseFailure(str(engine.failure), clause="ECP-HS-2")
                raise CaseTimeout(str(engine.failure))
        return all(e.registered.is_set() for e in self.engines)

    def alive(self) -> bool:
        return self.handle is None or self.handle.alive()

    async def _connection_lost(self, detail: str) -> None:
        """An HTTP connection broke without a response: CRASH if the process is exiting.

        A dying process's sockets close before its parent can see it exit, so the
        process gets ``EXIT_GRACE_S`` to show it; if it is still running, the broken
        connection is the frontend's answer (the caller reports it as a violation).
        """
        if self.handle is None:
            return
        loop = asyncio.get_running_loop()
        status = await loop.run_in_executor(None, self.handle.wait, EXIT_GRACE_S)
        if status is not None:
            raise PeerCrashed(f"the frontend exited with status {status} during the case ({detail})")

    @contextlib.contextmanager
    def frozen(self):
        """Stop the frontend's process group (SIGSTOP) for the body, then continue it.

        Used to drop a crowd of streams *at once* as the frontend sees it: the
        disconnects queue up in the kernel and reach its event loop in one
        batch, instead of the first few waking it while the harness is still
        closing the rest. An in-process frontend (``--adapter``) is held by its
        adapter's ``frozen()`` (``ecp serve`` in a thread: its event loop), where
        it has one (:meth:`require_freeze`). Without a peer the harness started
        (``--attach``) this does nothing.
        """
        if self.handle is None:
            yield
            return
        with self.handle.frozen():
            yield

    def log_tail(self) -> str:
        return self.handle.log_tail() if self.handle else ""

    async def close(self) -> None:
        if self.watch is not None:
            self.watch.cancel()
            await asyncio.gather(self.watch, return_exceptions=True)
        for engine in [*self.engines, *self.strangers]:
            await engine.stop()
        await self.driver.aclose()
        if self.handle is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.handle.stop)

    # -- waiting ---------------------------------------------------------------------
    async def until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Wait until ``predicate()`` is truthy and return it; CRASH if the frontend exits.

        Re-checked whenever an engine sends or receives a frame (engine state
        only changes then), and every ``POLL_S`` for the process's liveness.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            value = predicate()
            if value:
                return value
            if not self.alive():
                raise PeerCrashed(f"the frontend exited with status {self.handle.exit_status()} "
                                  f"while the harness waited for {what}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CaseTimeout(f"waited {timeout:.1f} s for {what}")
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, POLL_S))
            except asyncio.TimeoutError:
                pass

    async def wait_health(self, accept: Callable[[int | None], bool], timeout: float, what: str) -> int | None:
        """Poll ``GET /health`` until ``accept(status)``; return the status."""
        status: list[int | None] = [None]

        async def poll() -> None:
            deadline = time.monotonic() + timeout
            while True:
                status[0] = await self.driver.health()
                if accept(status[0]):
                    return
                if not self.alive():
                    raise PeerCrashed(f"the frontend exited with status {self.handle.exit_status()} "
                                      f"while the harness waited for {what}")
                if time.monotonic() >= deadline:
                    raise CaseTimeout(f"waited {timeout:.1f} s for {what} (last status {status[0]})")
                await asyncio.sleep(POLL_S)

        await poll()
        return status[0]

    async def quiet(self) -> None:
        """Let late frames arrive before asserting that something did *not* happen."""
        await asyncio.sleep(self.cfg.quiet_window_s)

    # -- per-case state --------------------------------------------------------------
    async def reset(self) -> None:
        """Default scripts, no held requests left, empty records (between shared cases)."""
        from .script import EngineScript

        leftovers = any(e.generation.active for e in self.engines)
        for engine in self.engines:
            engine.script = EngineScript()
            engine.release()
        await self.until(lambda: all(not e.generation.active for e in self.engines), 10.0,
                         "leftover requests of the previous case to finish")
        if leftovers:
            await self.quiet()   # late ABORTs for them land before the records are cleared
        for engine in self.engines:
            engine.recorder.clear()
            engine.generation.finished_ids.clear()
            engine.generation.aborted_ids.clear()
            engine.generation.immediately_aborted_ids.clear()

    # -- capability gates ----------------------------------------------------------
    def require_dev_endpoints(self) -> None:
        if not (self.caps and self.caps.dev_endpoints):
            raise Unsupported("the frontend does not expose the dev endpoints (GET /is_sleeping is 404); "
                              "start it in dev mode (vLLM: VLLM_SERVER_DEV_MODE=1)")

    def require_abort_api(self):
        if not (self.caps and self.caps.abort_api):
            raise Unsupported("the frontend exposes no explicit-abort endpoint "
                              "(/abort_requests or /v1/abort_requests)")
        return self.caps.abort_api

    def require_engines(self, n: int) -> None:
        if self.engine_count < n:
            raise Unsupported(f"needs at least {n} engines (--engine-count {n})")

    def require_freeze(self) -> None:
        """A case that drops streams at once (:meth:`frozen`) cannot judge an in-process frontend whose
        adapter cannot hold it."""
        if self.handle is not None and not self.handle.can_freeze:
            raise Unsupported("needs a frontend the harness can hold while it drops streams at once: the "
                              "adapter's object has no frozen() (run with -- COMMAND)")

    def require_collective_rpc(self) -> None:
        if not (self.caps and self.caps.collective_rpc):
            raise Unsupported("the frontend exposes no POST /collective_rpc (vLLM: a dev endpoint, "
                              "VLLM_SERVER_DEV_MODE=1)")


def raise_open_file_limit(wanted: int = 16384) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` towards ``wanted`` (capped by the hard limit).

    A burst case holds thousands of connections open, and so does the
    frontend, which inherits the limit when the harness launches it.
    Returns the soft limit now in force.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class CaseDeadline:
    """When the running case's time is up: set when its body starts, paused while a launch is under way
    (a launch has its own bounds, ``--startup-timeout`` per stage; launches side by side count once),
    grown when the pace measured during the case grants a larger budget or a wait needs a window."""

    def __init__(self) -> None:
        self.at: float | None = None
        #: the budget ``at`` grants; grows with the pace measured during the case
        self._budget_s: float | None = None
        self._launching = 0
        self._launching_since = 0.0

    def set(self, at: float | None) -> None:
        self.at = at
        self._budget_s = None if at is None else at - time.monotonic()

    def current(self) -> float:
        """The deadline; none while a launch is under way."""
        assert self.at is not None
        return math.inf if self._launching else self.at

    def launch_begins(self) -> None:
        if self._launching == 0:
            self._launching_since = time.monotonic()
        self._launching += 1

    def launch_ends(self) -> None:
        """One launch is serving, judged or gone: once none is under way, the deadline moves by the
        time some launch was."""
        self._launching -= 1
        if self._launching == 0 and self.at is not None:
            self.at += time.monotonic() - self._launching_since

    def grant(self, budget: float) -> None:
        """The case's budget is now ``budget`` (a pace measured during it): the deadline grows to match."""
        if self.at is not None and self._budget_s is not None and budget > self._budget_s:
            self.at += budget - self._budget_s
            self._budget_s = budget

    def extend(self, seconds: float) -> None:
        if self.at is not None:
            self.at += seconds


class FrontendManager:
    """Owns the loop thread, the zmq context, the shared launch and fresh launches (the frontend role's
    ``ecp.conformance.plugin.PeerManager``)."""

    role: ClassVar[str] = "frontend"
    Config: ClassVar[type] = FrontendRunConfig

    @staticmethod
    def run_phase(case: Any) -> int:
        """One phase: the cases run in catalogue order (each launch is the case's own or the shared one)."""
        return 0

    def release_facts(self) -> dict[str, Any]:
        """Nothing beyond the fingerprint: the frontend role's release is chosen before the run
        (``--vllm auto``: :mod:`ecp.conformance.frontend.auto_release`)."""
        return {}

    def failed_closed(self) -> bool:
        """A frontend has no ENGINE_CORE_DEAD: its death is a crash."""
        return False

    def death_detail(self) -> str:
        return ""

    def __init__(self, cfg: FrontendRunConfig, transcript: Transcript) -> None:
        self.open_file_limit = raise_open_file_limit()
        self.cfg = cfg
        self.transcript = transcript
        self.loop = LoopThread()
        self.ctx = zmq.asyncio.Context()
        self._launches = 0
        self.pace = Pace("frontend", cfg.case_timeout_s, cfg.startup_timeout_s)
        self._shared: FrontendUnderTest | None = None
        #: the first shared launch failed (timeout, crash, cannot start) before any launch of this
        #: run ever came up: every later launch reports it at once instead of waiting again
        self.startup_failure: Exception | None = None
        self._ever_started = False
        self._dirty = False
        self.touched: list[FrontendUnderTest] = []
        #: id(engine) -> how many violations it had recorded when the case began (the shared launch)
        self._violation_marks: dict[int, int] = {}
        #: the running case's deadline (launches under way pause it)
        self.deadline = CaseDeadline()
        #: burst size -> result, shared by a burst's exact-ids and coalescing cases
        self.bursts: dict[int, Any] = {}
        #: the longest time a launch of this run took from its last engine's READY to GET /health 200
        self.healthy_after_s: float | None = None
        #: the release the scripted engines speak (``--vllm``): cases ask it what the release has
        self.release: EngineRelease = engine_release(cfg.vllm)

    def release_layout(self) -> Any:
        """The layout of the release the scripted engines speak (the release under test)."""
        return self.release.layout

    # -- running case bodies -------------------------------------------------------
    def run(self, body: Callable[["FrontendManager"], Awaitable[T]]) -> T:
        """Run an ``async def body(manager)`` on the loop under the case budget.

        The budget is the plugin's deadline (``set_deadline``), or
        ``case_timeout_s`` from now; time spent launching frontends extends it.
        """
        if self.deadline.at is None:
            self.set_deadline(time.monotonic() + self.case_budget())
        return self.loop.run(body(self), self.deadline.current, "the case")

    def set_deadline(self, deadline: float | None) -> None:
        """Called by the plugin when a case body starts (its time budget)."""
        self.deadline.set(deadline)

    def case_budget(self) -> float:
        """The time budget of the case about to run (:mod:`ecp.conformance.pace`)."""
        return self.pace.case_budget()

    def plan(self, upcoming: list[str]) -> None:
        """Nothing to plan: frontend launches are per case (the engine role starts engines ahead)."""

    def launches(self) -> dict:
        """Every launch of the run with its start-up time, for the reports."""
        return self.pace.summary()

    def _measured(self, fut: FrontendUnderTest, record: LaunchRecord, started: float) -> None:
        """``fut`` serves: record its start-up; the first probe sets the response time. Later launches
        and waits then use the budgets that follow from them."""
        Pace.launch_served(record, started)
        if fut.probe_s is not None:
            self.pace.note_response(fut.probe_s)
        # the start-up budget in force for every later launch and for the cases' own handshake waits
        self.cfg.startup_timeout_s = self.pace.startup_budget()
        # a case whose own launch measured the pace gets the budget that pace sets, as later cases
        # do: its deadline was fixed before the measurement, its requests' timeout is set after it
        self.deadline.grant(self.case_budget())
        fut.driver.set_timeout(self.case_budget() * REQUEST_SHARE)

    async def _watch_start(self, fut: FrontendUnderTest, record: LaunchRecord, started: float) -> None:
        """A launch the case judges itself is under way until the frontend answered a HELLO (its
        handshake socket is up: what start-up means for it) or exited, or its start-up budget ran out."""
        try:
            await fut.until(lambda: any(e.init is not None for e in fut.engines) or not fut.alive(),
                            self.cfg.startup_timeout_s, "the frontend to answer a HELLO")
            if any(e.init is not None for e in fut.engines):
                self._measured(fut, record, started)
            else:
                Pace.launch_failed(record, "exited before answering a HELLO")
        except (CaseTimeout, PeerCrashed) as exc:
            Pace.launch_failed(record, str(exc))
        finally:
            Pace.launch_failed(record, "closed before answering a HELLO")   # no-op once it served
            self.deadline.launch_ends()

    # -- lifetimes -------------------------------------------------------------------
    async def _launch(self, *, engine_count: int | None = None, argv: list[str] | None = None,
                      scripts: list[Any] | None = None, wait_healthy: bool = True,
                      wait_registered: bool = True) -> FrontendUnderTest:
        if self.startup_failure is not None:
            raise self.startup_failure
        if self.cfg.attach and self._launches >= 1:
            raise Unsupported("needs another frontend launch, which --attach cannot do")
        if not self.cfg.attach and not self.cfg.command:
            raise LaunchError("no frontend command given after --")
        self._launches += 1
        self.deadline.launch_begins()
        started = time.monotonic()
        count = engine_count or self.cfg.engine_count
        record = self.pace.launch_started(self._launches, f"{count} engine(s)" + (
            "" if wait_healthy else ", judged by the case"), getattr(self.transcript, "case_id", "") or "")
        fut = FrontendUnderTest(self.cfg, self.ctx, self.transcript, self._launches, engine_count=count,
                                argv=list(argv if argv is not None else self.cfg.command), scripts=scripts)
        fut.driver.set_timeout(self.case_budget() * REQUEST_SHARE)
        self.touched.append(fut)
        watching = False
        try:
            await fut.start(wait_healthy=wait_healthy, wait_registered=wait_registered)
            self._ever_started = True
            if fut.healthy_after_s is not None:
                self.healthy_after_s = max(self.healthy_after_s or 0.0, fut.healthy_after_s)
            if wait_registered:
                self._measured(fut, record, started)
            else:
                # start-up (and the pause of the case's deadline) lasts until the frontend answers
                fut.watch = asyncio.get_running_loop().create_task(self._watch_start(fut, record, started))
                watching = True
        except BaseException as exc:
            Pace.launch_failed(record, str(exc) or type(exc).__name__)
            status = fut.handle.exit_status() if isinstance(exc, PeerCrashed) and fut.handle is not None else None
            if status is not None:  # the process is gone: its status and last lines, for PeerNeverStarted
                exc.exited = (status, [ln for ln in fut.log_tail().splitlines() if ln.strip()][-8:])  # type: ignore[attr-defined]
            await fut.close()
            raise
        finally:
            # Start-up time does not eat the case budget.
            if not watching:
                self.deadline.launch_ends()
        return fut

    async def shared(self) -> FrontendUnderTest:
        """The shared launch (started, or restarted after a crash), reset for a new case."""
        if self.cfg.attach:
            self._dirty = False   # cannot relaunch: the reset below is all we can do
        if self._shared is not None and (self._dirty or not self._shared.alive()):
            await self._shared.close()
            self._shared = None
        self._dirty = False
        if self._shared is None:
            try:
                self._shared = await self._launch()
            except (CaseTimeout, PeerCrashed, LaunchError) as exc:
                exited = getattr(exc, "exited", None)
                if not self._ever_started and exited is not None:
                    # the command exits before it ever served: every case would crash the same way
                    raise PeerNeverStarted(str(exc), *exited) from exc
                if not self._ever_started and self.startup_failure is None:
                    # The plain COMMAND never came up once: a bad command (a missing placeholder, a
                    # wrong option) fails every launch alike, and waiting --startup-timeout per case
                    # would only multiply the wait.
                    self.startup_failure = type(exc)(
                        f"{exc} (the run's first start of the frontend failed like this; later cases "
                        f"report it without trying again)")
                raise
        else:
            self.touched.append(self._shared)
        try:
            await self._shared.reset()
        except CaseTimeout:
            self._dirty = True
            raise
        return self._shared

    def mark_broken(self) -> None:
        """The harness broke mid-case (a case ERROR): the shared frontend's state is unknown."""
        self.mark_dirty()

    def mark_dirty(self) -> None:
        """The shared frontend may be in a state later cases must not see: relaunch before reuse."""
        self._dirty = True

    def after_failure(self) -> str | None:
        """A case failed: a frontend's state is opaque to the harness, so relaunch before reuse."""
        self.mark_dirty()
        return None

    @contextlib.asynccontextmanager
    async def fresh(self, *, engine_count: int | None = None, argv: list[str] | None = None,
                    scripts: list[Any] | None = None, wait_healthy: bool = True, wait_registered: bool = True
                    ) -> AsyncIterator[FrontendUnderTest]:
        """A dedicated launch for one case, closed afterwards."""
        if self.cfg.attach:
            raise Unsupported("needs a frontend launched by the harness in a special state "
                              "(not possible with --attach)")
        fut = await self._launch(engine_count=engine_count, argv=argv, scripts=scripts,
                                 wait_healthy=wait_healthy, wait_registered=wait_registered)
        try:
            yield fut
        finally:
            await fut.close()

    async def refusal_window(self) -> float:
        """How long a frontend that would serve needs to show it (GET /health 200) after its last
        engine's READY: three times the longest this run measured (the shared launch is started to
        measure it if no launch did yet), and at least ``REFUSAL_MIN_S``. The case's budget grows by it."""
        if self.healthy_after_s is None and not self.cfg.attach:
            await self.shared()
        window = max(REFUSAL_MIN_S, 3 * (self.healthy_after_s or 0.0))
        # the window scales with the frontend's start-up, which never eats the case budget
        self.deadline.extend(window)
        return window

    def command_without_kv_connector(self) -> list[str]:
        return without_kv_connector(self.cfg.command)

    def command_without_kv_trust(self) -> list[str]:
        return without_kv_trust(self.cfg.command)

    def begin_case(self) -> None:
        """Called by the plugin before each case: no deadline yet, nothing touched."""
        self.deadline.set(None)
        self.touched = []
        shared = self._shared
        self._violation_marks = {id(e): len(e.violations) for e in shared.engines} if shared else {}
        if shared is not None:
            shared.driver.routes_used.clear()

    def uncited_routes(self, cited: Iterable[str]) -> list[str]:
        """The HTTP routes this case drove whose governing clause (``ecp.spec.http``) is not among
        ``cited``, or that the route table does not list at all: a catalogue entry that does not say
        which HTTP behaviour its case relies on (a harness error, found by the self-proof runs)."""
        from ecp.spec.http import uncited

        return uncited((k for fut in self.touched for k in fut.driver.routes_used), cited)

    def violations(self) -> list:
        """The rules the frontend broke during this case, as the engines' machines recorded them
        (recording mode): the plugin reports those outside the case's focus as findings."""
        out: list = []
        for fut in dict.fromkeys(self.touched):
            for engine in fut.engines:
                out += engine.violations[self._violation_marks.get(id(engine), 0):]
        return out

    def case_crashed(self) -> bool:
        """The shared frontend died during the case (fresh launches are judged by their cases)."""
        shared = self._shared
        return shared is not None and shared in self.touched and not shared.alive()

    def log_tail(self) -> str:
        return "\n".join(t for t in (f.log_tail() for f in self.touched[-2:]) if t)

    def close(self) -> None:
        async def close_all() -> None:
            if self._shared is not None:
                await self._shared.close()
                self._shared = None

        try:
            deadline = time.monotonic() + 30
            self.loop.run(close_all(), lambda: deadline, "closing the shared frontend")
        finally:
            self.loop.close()
            # the loop has stopped: a socket a cut-short teardown left open must not hold the exit
            # (term() waits for every socket of the context to close)
            self.ctx.destroy(linger=0)
