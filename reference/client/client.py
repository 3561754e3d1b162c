"""``EngineCoreClient``: the asyncio + pyzmq layer over the sans-IO pieces.

Sockets (``ECP-SOCK-1``): the client binds the handshake ROUTER (unless
bootstrapped), one input ROUTER and one output PULL, and with
``coordinator=True`` the coordinator XPUB/PULL pair. Engines connect.
Background tasks: the output loop (decode, dispatch, health), the auto-abort
worker (coalesced ABORTs), the peer monitor (engine disappearance) and the
coordinator loop. Every await in the public API is bounded or ends when the
client fails or shuts down.

The client owns three parts, each built here with exactly what it uses:
:class:`~.lifecycle.RequestLifecycle` (ADD, ABORT, the auto-abort worker),
:class:`~.dispatch.OutputDispatch` (the output loop) and
:class:`~.utilities.UtilityCalls` (UTILITY calls in flight). The public API
checks the client's state and delegates to them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from typing import Any, Iterable

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from ecp.spec import (
    EngineCoreReadyResponse, EngineCoreRequest, EngineHandshakeMetadata, EngineZmqAddresses, UtilityRequest,
)
from ecp.spec.machine import Add, Event, FrontendConnection, UtilityCall
from ecp.spec.peer.zmq_io import AsyncFrontendSockets, stop_monitors

from .abort_coalescer import AbortCoalescer
from .aggregation import UtilityAggregation
from .config import ClientConfig
from .coordinator import Coordinator
from .dispatch import OutputDispatch
from .errors import ClientClosed, EngineDisconnected, EngineUnresponsive
from .faults import ClientFaults
from .handshake import ClientHooks, HandshakeOwner, HandshakeResult
from .health import Health
from .lifecycle import RequestLifecycle
from .outbox import Outbox
from .release import ClientRelease
from .registry import RequestRegistry
from .router import Router
from .stats import ClientStats
from .stream import RequestStream, StreamSink
from .utilities import UtilityCalls, UtilityMethods

log = logging.getLogger("ecp.reference.client")

_SHUTDOWN_WAIT_S = 2.0


class EngineCoreClient(UtilityMethods):
    """The frontend side of the engine-core protocol for one client index.

    Use ``client = await EngineCoreClient.start(config)``, or, to launch
    engines after the sockets exist::

        client = EngineCoreClient(config)
        await client.bind()
        launch_engines(client.handshake_address)
        await client.wait_ready()
    """

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self._ranks = self.config.engine_ranks
        #: the release the engines speak: the machine's codec and the UTILITY methods it has
        self.release = ClientRelease(self.config.vllm)
        self._health = Health()
        self._closed = False
        self._bound = False
        self._ready = False
        self._ctx: zmq.asyncio.Context | None = None
        self._tmpdir: str | None = None
        self._handshake_sock: zmq.asyncio.Socket | None = None
        self._input: zmq.asyncio.Socket | None = None
        self._input_plain: zmq.Socket | None = None  # the same socket, read and written without futures
        self._input_reader_running = False
        #: the input socket's sends, batched per event-loop turn (see _put)
        self._outbox: Outbox | None = None
        self._output: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._coordinator: Coordinator | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._handshake: HandshakeResult | None = None
        #: the frontend protocol machine: it ran the handshake, then every ADD, ABORT and UTILITY
        #: goes out through it and every output message is judged by it
        self._machine: FrontendConnection | None = None
        self._stats = ClientStats()
        self._registry: RequestRegistry[StreamSink] = RequestRegistry(self._ranks)
        self.handshake_address: str | None = None
        self.input_address: str | None = None
        self.output_address: str | None = None
        # the --bug faults bend these seams (reference/client/faults.py); none without them
        faults = self._faults = ClientFaults(self.config.bugs)
        if faults:
            self._send = faults.sender(self._send)  # type: ignore[method-assign]
        router = faults.router(Router(self._ranks))
        self._aggregation = faults.aggregation(UtilityAggregation())
        self._utilities = UtilityCalls(client_index=self.config.client_index,
                                       timeout_s=self.config.utility_timeout_s, send=self._send, stats=self._stats)
        dispatch = self._dispatch = OutputDispatch(registry=self._registry, router=router, stats=self._stats,
                                                   machine=self._serving_machine, fail=self._fail,
                                                   on_utility_reply=self._utilities.on_reply)
        if faults:
            dispatch.on_frames = faults.output_handler(dispatch.on_frames, self)  # type: ignore[method-assign]
        self._requests = RequestLifecycle(client_index=self.config.client_index, registry=self._registry,
                                          router=router, coalescer=faults.coalescer(AbortCoalescer()),
                                          stats=self._stats, send=self._send, machine=self._serving_machine,
                                          listener_due=self._dispatch.listener_due)

    # ================================================================== startup
    @classmethod
    async def start(cls, config: ClientConfig | None = None) -> "EngineCoreClient":
        """Bind, then complete the handshake with every configured engine."""
        client = cls(config)
        await client.bind()
        try:
            await client.wait_ready()
        except BaseException:
            await client.shutdown()
            raise
        return client

    def _pick_address(self, explicit: str | None, tag: str) -> str:
        if explicit is not None:
            return explicit
        if self.config.transport == "tcp":
            return f"tcp://{self.config.host}:*"
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="ecp-client-")
        return f"ipc://{os.path.join(self._tmpdir, tag)}"

    def _bind(self, kind: int, address: str) -> tuple[zmq.asyncio.Socket, str]:
        assert self._ctx is not None
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)  # ECP-SOCK-5: never drop a burst
        sock.setsockopt(zmq.RCVHWM, 0)
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unknown peer → error, not a silent drop
        sock.bind(address)
        return sock, sock.getsockopt_string(zmq.LAST_ENDPOINT)

    async def bind(self) -> None:
        """Bind every socket; afterwards ``handshake_address`` (or, bootstrapped,
        ``input_address``/``output_address``) is where engines connect."""
        if self._bound:
            return
        self._ctx = zmq.asyncio.Context()
        try:
            cfg = self.config
            if not cfg.bootstrapped:
                self._handshake_sock, self.handshake_address = self._bind(
                    zmq.ROUTER, self._pick_address(cfg.handshake_address, "handshake"))
            self._input, self.input_address = self._bind(zmq.ROUTER, self._pick_address(cfg.input_address, "input"))
            self._output, self.output_address = self._bind(zmq.PULL, self._pick_address(cfg.output_address, "output"))
            # the plain send is the same zmq socket without asyncio's futures: it costs a fraction
            # of an awaited one (a future, event registration and flag arithmetic per message)
            self._input_plain = zmq.Socket.shadow(self._input.underlying)
            self._outbox = Outbox(self._input_plain.send_multipart, self._input.send_multipart,
                                  self._on_send_lost, self._after_input_sends)
            self._monitor = self._input.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            if cfg.coordinator:
                self._coordinator = Coordinator(self._ctx, len(self._ranks),
                                                self._pick_address(None, "coord-in"),
                                                self._pick_address(None, "coord-out"))
        except BaseException:
            self._close_sockets()
            raise
        self._bound = True

    def _init_message(self) -> EngineHandshakeMetadata:
        assert self.input_address and self.output_address
        coord = self._coordinator
        return EngineHandshakeMetadata(
            addresses=EngineZmqAddresses(
                inputs=[self.input_address], outputs=[self.output_address],
                coordinator_input=coord.input_address if coord else None,
                coordinator_output=coord.output_address if coord else None,
            ),
            parallel_config={},
        )

    async def wait_ready(self) -> None:
        """Run the handshake until every engine is registered and READY.

        Raises :class:`~.errors.HandshakeTimeout` naming the stage that did not finish,
        or the typed handshake error an engine provoked. Either way the
        client is left unusable (call :meth:`shutdown`).
        """
        if self._ready:
            return
        if not self._bound:
            await self.bind()
        self._check_open()
        cfg = self.config
        owner = self._faults.handshake(HandshakeOwner(self._ranks, None if cfg.bootstrapped else self._init_message(),
                                                      bootstrapped=cfg.bootstrapped, limits=cfg.decode_limits,
                                                      codec=self.release.codec))
        assert self._input is not None
        sockets: dict[str, zmq.asyncio.Socket] = {"input[0]": self._input}
        if self._handshake_sock is not None:
            sockets["handshake"] = self._handshake_sock
        coord = self._coordinator
        if coord is not None:
            sockets["coordinator_input"] = coord.xpub   # the loop publishes the gate on it (ECP-HS-6)
        await AsyncFrontendSockets(owner, sockets, ClientHooks()).handshake(
            cfg.handshake_timeout_s, ready_timeout_s=cfg.ready_timeout_s)
        self._handshake = owner.result()
        # after the handshake an engine's violations are recorded, not raised: what the client does
        # about each is its policy (_on_output_frames); the machine keeps following the engine
        self._machine = owner.machine
        self._machine.mode = "record"
        self._ready = True
        assert self._monitor is not None
        while await self._monitor.poll(0):  # connection churn during startup is not a lost engine
            await self._monitor.recv_multipart()
        loops = [self._output_loop(), self._abort_worker(), self._monitor_loop(), self._input_loop()]
        if coord is not None:
            loops.append(coord.serve())
        if self.config.liveness_timeout_s is not None:
            loops.append(self._liveness_loop(self.config.liveness_timeout_s))
        for coro in loops:
            task = asyncio.ensure_future(coro)
            task.add_done_callback(self._on_task_done)
            self._tasks.append(task)
        log.info("engine-core client ready: ranks %s, max_model_len %s", list(self._ranks),
                 self._handshake.max_model_len)

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        # A background loop only ends by cancellation; anything else must not leave waiters hanging.
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("engine-core client background task %r crashed", task, exc_info=error)
            self._fail(error)

    # ================================================================== properties
    @property
    def engine_ranks(self) -> tuple[int, ...]:
        return self._ranks

    @property
    def max_model_len(self) -> int | None:
        """Minimum ``max_model_len`` over the engines (``ECP-HS-9``)."""
        return self._handshake.max_model_len if self._handshake else None

    @property
    def ready_responses(self) -> dict[int, EngineCoreReadyResponse | None]:
        """Each engine's ready payload by rank (``None`` = empty payload)."""
        return dict(self._handshake.ready_responses) if self._handshake else {}

    @property
    def healthy(self) -> bool:
        return self._health.healthy and not self._closed

    @property
    def error(self) -> BaseException | None:
        """The first fatal error (sticky), or ``None``."""
        return self._health.error

    @property
    def current_wave(self) -> int:
        return self._coordinator.current_wave if self._coordinator else 0

    @property
    def stats(self) -> ClientStats:
        """Counters, with ``in_flight`` (per engine rank) as of now."""
        self._stats.in_flight = self._registry.counts()
        return self._stats

    def in_flight(self) -> dict[int, int]:
        """In-flight requests per engine rank."""
        return self._registry.counts()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed()
        self._health.check()

    def _check_ready(self) -> None:
        self._check_open()
        if not self._ready:
            raise ClientClosed("the client has not completed its handshake (call wait_ready())")

    # ================================================================== requests and utility calls
    async def add(self, request: EngineCoreRequest) -> RequestStream:
        """Send ADD and return the request's stream.

        Raises :class:`DuplicateRequestId` (nothing sent) for an id already in
        flight, :class:`InvalidDataParallelRank` for a pinned rank that is not
        connected, or the client's sticky error. ``client_index`` and
        ``current_wave`` are stamped here (``ECP-REQ-6``, ``ECP-DP-5``).
        """
        self._check_ready()
        return await self._requests.add(request, self.current_wave)

    async def abort(self, request_ids: Iterable[str]) -> list[str]:
        """Abort requests explicitly (``ECP-ABORT-8``).

        Each id still in flight is finalised locally first (its stream gets
        an ABORT terminal output), then one ABORT per owning engine is sent;
        unknown or finished ids are never sent. Returns the aborted ids.
        """
        self._check_ready()
        return await self._requests.abort(request_ids)

    async def abort_all(self) -> list[str]:
        """Abort every in-flight request."""
        return await self.abort(self._registry.ids())

    async def notify_kv_transfer_request_rejected(self, request_id: str, kv_transfer_params: dict[str, Any],
                                                  data_parallel_rank: int | None = None) -> int:
        """Send vLLM's rejection notice (``ECP-REJECT-2``): an ``abort_immediately``
        ADD with prompt ``[0]``, ``max_tokens`` 1 and the request's
        ``kv_transfer_params``, to the pinned or least-loaded engine, without
        registering a stream. Returns the engine rank it went to."""
        self._check_ready()
        return await self._requests.notify_rejected(request_id, kv_transfer_params, data_parallel_rank,
                                                    self.current_wave)

    async def call_utility(self, method: str, *args: Any, each: bool = False) -> Any:
        """Call ``method(*args)`` on every engine and aggregate (see :mod:`.aggregation`); with
        ``each``, ``(result, {rank: value})``, so that a caller can say which engine answered what.

        Waits for every engine (``ECP-UTIL-7``), bounded by
        ``utility_timeout_s``. Raises :class:`UtilityCallFailed`,
        :class:`UtilityResultDecode`, :class:`InconsistentUtilityResults`,
        :class:`UtilityTimeout` or the client's sticky error; :class:`~ecp.spec.LocalProtocolError`
        naming the release (nothing sent) for a method or arity the engines' release lacks
        (``ClientConfig.vllm``).
        """
        self._check_ready()
        args = self.release.fit(method, args)  # the release's method table: nothing sent that it lacks
        replies = await self._utilities.call(method, args, self._aggregation.targets(method, self._ranks))
        self._check_open()
        return self._aggregation.aggregate(method, replies, each=each)

    # ================================================================== sending
    def _serving_machine(self) -> FrontendConnection:
        """The protocol machine that ran the handshake (the parts ask for it once the client is ready)."""
        assert self._machine is not None
        return self._machine

    async def _send(self, event: Event) -> None:
        """Send ``event`` through the machine (:class:`~ecp.spec.LocalProtocolError` naming the
        clause if the rules forbid it now: nothing is sent); raises :class:`EngineDisconnected`
        when the engine is known not to be connected (an earlier send to it found it gone, e.g.
        in the grace period after it died). The message goes out at the end of this event-loop
        turn (:class:`~.outbox.Outbox`); if it then finds its engine gone, an ADD's stream ends
        with :class:`EngineDisconnected` and a utility call's waiter gets that engine's failure."""
        assert self._machine is not None
        [send] = self._machine.send(event)
        await self._put(event.rank, send.frames[1:], event)  # frames[0] is the engine's identity

    async def _put(self, rank: int, frames: list[bytes], event: Event | None = None) -> None:
        """Put ``frames`` on the input ROUTER for engine ``rank`` (the wire, below the machine)."""
        assert self._outbox is not None
        self._outbox.put(rank, frames, event)

    def _on_send_lost(self, rank: int, event: Event | None, error: BaseException) -> None:
        """A queued input message found its engine gone: what waited for it ends as the send's
        failure would have ended it, had it been sent at once."""
        if isinstance(event, Add):
            entry = self._registry.get(event.request.request_id)
            if entry is not None and entry.engine_rank == rank:
                self._registry.take(event.request.request_id)
                entry.sink.end(error)
        elif isinstance(event, UtilityCall):
            self._utilities.unsent(event.call.call_id, error, event.call.method_name)

    # ================================================================== background loops
    async def _output_loop(self) -> None:
        assert self._output is not None
        await self._dispatch.run(self._output)

    async def _abort_worker(self) -> None:
        await self._requests.run_abort_worker()

    async def _input_loop(self) -> None:
        # Engines send nothing on their input DEALER after the registration; read and drop
        # whatever comes (e.g. a restarted engine registering again) so it cannot pile up unseen.
        assert self._input is not None
        self._input_reader_running = True
        try:
            while True:
                self._drain_input()
                await self._input.poll(flags=zmq.POLLIN)
        finally:
            self._input_reader_running = False

    def _after_input_sends(self) -> None:
        # The outbox's plain sends may have taken the signal the awaited poll above waits for:
        # what arrived before them is read here instead of waiting for the next arrival.
        plain = self._input_plain
        if self._input_reader_running and plain is not None and plain.get(zmq.EVENTS) & zmq.POLLIN:
            self._drain_input()

    def _drain_input(self) -> None:
        assert self._input_plain is not None
        recv = self._input_plain.recv_multipart
        while True:
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._stats.unexpected_input_messages += 1
            log.warning("dropping an unexpected %d-frame message from engine identity %s on the input "
                        "socket after the handshake", len(frames) - 1, frames[0].hex())

    # ================================================================== liveness
    async def _monitor_loop(self) -> None:
        assert self._monitor is not None
        while True:
            event = parse_monitor_message(await self._monitor.recv_multipart())
            if event["event"] != zmq.EVENT_DISCONNECTED:
                continue
            endpoint = event["endpoint"]
            endpoint = endpoint.decode(errors="replace") if isinstance(endpoint, bytes) else endpoint
            await self._on_peer_lost(f"input connection on {endpoint} closed")
            return

    async def _liveness_loop(self, timeout: float) -> None:
        # No heartbeat exists on the wire; outputs are the evidence of life while requests run,
        # and a utility reply when they stop coming (a paused or KV-waiting engine still answers).
        loop = asyncio.get_running_loop()
        quiet = timeout / 2
        started = loop.time()
        last_output_from = self._dispatch.last_output_from
        while True:
            await asyncio.sleep(timeout / 4)
            now = loop.time()
            suspects = [rank for rank, n in self._registry.counts().items()
                        if n and now - max(last_output_from.get(rank, started), started) >= quiet]
            if suspects:
                await asyncio.gather(*(self._probe(rank, timeout) for rank in suspects))

    async def _probe(self, rank: int, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        call_id, fut = self._utilities.expect(rank)
        sent_at = loop.time()
        self._stats.liveness_probes += 1
        try:
            await self._send(UtilityCall(rank, UtilityRequest(self.config.client_index, call_id, "is_sleeping", []),
                                         0))
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            if self._dispatch.last_output_from.get(rank, 0.0) < sent_at:  # not even an output since the probe
                self._fail(EngineUnresponsive(rank, timeout))
        except Exception:  # noqa: BLE001 - a lost engine or a failed client is reported elsewhere
            pass
        finally:
            self._utilities.forget(call_id)

    async def _on_peer_lost(self, detail: str) -> None:
        # "No output and a dead peer": let outputs the engine sent before it died
        # arrive first (bounded), then fail closed.
        loop = asyncio.get_running_loop()
        grace = self.config.peer_loss_grace_s
        give_up = loop.time() + 5 * grace
        while loop.time() < give_up:
            await asyncio.sleep(grace)
            if loop.time() - self._dispatch.last_output_at >= grace:
                break
        self._fail(EngineDisconnected(detail))

    # ================================================================== failure and shutdown
    def _fail(self, error: BaseException) -> None:
        """Fail closed (``ECP-ROB-3``): the first error reaches every stream and waiter."""
        if not self._health.fail(error):
            return
        self._end_everything(error)

    def _end_everything(self, error: BaseException) -> None:
        for entry in self._registry.take_all():
            entry.sink.end(error)
        self._utilities.fail_all(error)
        self._requests.clear()

    async def shutdown(self) -> None:
        """End every stream and waiter with :class:`ClientClosed`, stop the
        background tasks and close the sockets. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._end_everything(ClientClosed())
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_SHUTDOWN_WAIT_S)
        self._close_sockets()

    def _close_sockets(self) -> None:
        if self._outbox is not None:
            self._outbox.close()
            self._outbox = None
        if self._input is not None and self._monitor is not None:
            stop_monitors([self._input])  # before the reader closes (stop_monitors says why)
        for sock in (self._monitor, self._handshake_sock, self._input, self._output):
            if sock is not None:
                sock.close(linger=0)
        if self._coordinator is not None:
            self._coordinator.close()
        self._monitor = self._handshake_sock = self._input = self._output = None
        self._input_plain = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    async def __aenter__(self) -> "EngineCoreClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()
