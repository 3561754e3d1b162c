"""``EngineCoreClient``: the asyncio + pyzmq layer over the sans-IO pieces.

Sockets (``ECP-SOCK-1``): the client binds the handshake ROUTER (unless
bootstrapped), one input ROUTER and one output PULL, and with
``coordinator=True`` the coordinator XPUB/PULL pair. Engines connect.
Background tasks: the output loop (decode, dispatch, health), the auto-abort
worker (coalesced ABORTs), the peer monitor (engine disappearance) and the
coordinator loop. Every await in the public API is bounded or ends when the
client fails or shuts down.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import msgspec
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from ecp.spec import (
    EngineCoreOutput, EngineCoreReadyResponse, EngineCoreRequest, EngineHandshakeMetadata,
    EngineZmqAddresses, FinishReason, LocalProtocolError, ProtocolError, SamplingParams, UtilityOutput,
    UtilityRequest, engine_identity,
)
from ecp.spec.machine import Abort, Add, EngineDead, Event, FrontendConnection, Outputs, UtilityCall, Violation

from .abort_coalescer import MAX_DRAIN, AbortCause, AbortCoalescer
from .aggregation import UtilityAggregation
from .config import ClientConfig
from .coordinator import Coordinator
from .errors import (
    ClientClosed, DuplicateRequestId, EngineDeadError, EngineDisconnected, EngineUnresponsive, HandshakeTimeout,
    RequestStreamClosed, UnexpectedDPControl, UtilityTimeout,
)
from .faults import ClientFaults
from .handshake import STAGE_HELLO, STAGE_READY, HandshakeOwner, HandshakeResult
from .health import Health
from .registry import InFlight, RequestRegistry, group_by_engine
from .router import Router
from .stream import RequestStream, StreamSink

log = logging.getLogger("ecp.reference.client")

#: Longest run of back-to-back output frames handled before the event loop gets a turn.
OUTPUT_SLICE_S = 0.002

_SHUTDOWN_WAIT_S = 2.0


@dataclass
class ClientStats:
    """Counters for operators and benchmarks (read-only for callers)."""

    requests_added: int = 0
    outputs_dispatched: int = 0
    outputs_dropped: int = 0
    output_messages: int = 0
    #: ids sent in ABORT messages (explicit and auto), and the number of ABORT messages
    aborts_sent: int = 0
    abort_messages: int = 0
    abort_send_errors: int = 0
    utility_calls: int = 0
    unknown_utility_replies: int = 0
    rejection_notifications: int = 0
    unexpected_input_messages: int = 0
    liveness_probes: int = 0
    #: rules an engine broke, as the client's protocol machine recorded them (each logged with its clause)
    protocol_violations: int = 0
    in_flight: dict[int, int] = field(default_factory=dict)


def _abort_output(request_id: str) -> EngineCoreOutput:
    return EngineCoreOutput(request_id=request_id, new_token_ids=[], finish_reason=FinishReason.ABORT)


class EngineCoreClient:
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
        self._health = Health()
        self._closed = False
        self._bound = False
        self._ready = False
        self._ctx: zmq.asyncio.Context | None = None
        self._tmpdir: str | None = None
        self._handshake_sock: zmq.asyncio.Socket | None = None
        self._input: zmq.asyncio.Socket | None = None
        self._output: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._coordinator: Coordinator | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._registry: RequestRegistry[StreamSink] = RequestRegistry(self._ranks)
        self._router = Router(self._ranks)
        # the --bug faults bend these three seams (reference/client/faults.py); none without them
        faults = ClientFaults(self.config.bugs)
        self._coalescer = faults.coalescer(AbortCoalescer())
        self._abort_wakeup = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aggregation = faults.aggregation(UtilityAggregation())
        if faults:
            self._on_output_frames = faults.output_handler(self._on_output_frames)  # type: ignore[method-assign]
        self._pending_utility: dict[int, tuple[int, asyncio.Future[UtilityOutput]]] = {}
        self._call_ids = itertools.count((uuid.uuid1().int >> 64) & 0x7FFF_FFFF_FFFF_FFFF)
        self._handshake: HandshakeResult | None = None
        #: the frontend protocol machine: it ran the handshake, then every ADD, ABORT and UTILITY
        #: goes out through it and every output message is judged by it
        self._machine: FrontendConnection | None = None
        self._last_output_at = 0.0
        self._last_output_from: dict[int, float] = {}  # engine rank -> loop time of its last output
        self._stats = ClientStats()
        self.handshake_address: str | None = None
        self.input_address: str | None = None
        self.output_address: str | None = None

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
        self._loop = asyncio.get_running_loop()
        self._ctx = zmq.asyncio.Context()
        try:
            cfg = self.config
            if not cfg.bootstrapped:
                self._handshake_sock, self.handshake_address = self._bind(
                    zmq.ROUTER, self._pick_address(cfg.handshake_address, "handshake"))
            self._input, self.input_address = self._bind(zmq.ROUTER, self._pick_address(cfg.input_address, "input"))
            self._output, self.output_address = self._bind(zmq.PULL, self._pick_address(cfg.output_address, "output"))
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

        Raises :class:`HandshakeTimeout` naming the stage that did not finish,
        or the typed handshake error an engine provoked. Either way the
        client is left unusable (call :meth:`shutdown`).
        """
        if self._ready:
            return
        if not self._bound:
            await self.bind()
        self._check_open()
        cfg = self.config
        owner = HandshakeOwner(self._ranks, None if cfg.bootstrapped else self._init_message(),
                               bootstrapped=cfg.bootstrapped, limits=cfg.decode_limits)
        poller = zmq.asyncio.Poller()
        assert self._input is not None
        poller.register(self._input, zmq.POLLIN)
        if self._handshake_sock is not None:
            poller.register(self._handshake_sock, zmq.POLLIN)
        coord = self._coordinator
        if coord is not None:
            poller.register(coord.xpub, zmq.POLLIN)
        loop = asyncio.get_running_loop()
        hello_deadline = loop.time() + cfg.handshake_timeout_s
        ready_deadline: float | None = None
        while True:
            stage = owner.stage
            gate_open = coord is None or coord.gate_open
            if stage is None and gate_open:
                break
            if stage == STAGE_HELLO:
                deadline, timeout_s = hello_deadline, cfg.handshake_timeout_s
            else:
                if ready_deadline is None:
                    ready_deadline = loop.time() + cfg.ready_timeout_s
                deadline, timeout_s = ready_deadline, cfg.ready_timeout_s
            remaining = deadline - loop.time()
            if remaining <= 0:
                if coord is not None and not gate_open and stage in (STAGE_READY, None):
                    # engines send READY only after the gate: the gate is what is missing
                    raise HandshakeTimeout("coordinator subscriptions", owner.missing(STAGE_READY), timeout_s)
                assert stage is not None
                raise HandshakeTimeout(stage, owner.missing(stage), timeout_s)
            events = dict(await poller.poll(timeout=max(1, int(remaining * 1000))))
            if self._handshake_sock is not None and self._handshake_sock in events:
                frames = await self._handshake_sock.recv_multipart()
                for reply in owner.on_handshake_frames(frames):
                    await self._handshake_sock.send_multipart(reply)
            if self._input in events:
                owner.on_registration(await self._input.recv_multipart())
            if coord is not None and coord.xpub in events:
                frames = await coord.xpub.recv_multipart()
                owner.on_coordinator_subscription(frames)
                opened = coord.gate_open
                await coord.on_subscription(frames)
                if coord.gate_open and not opened:
                    owner.coordinator_gate_opened()
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

    # ================================================================== sending
    async def _send(self, event: Event) -> None:
        """Send ``event`` through the machine (:class:`~ecp.spec.LocalProtocolError` naming the
        clause if the rules forbid it now: nothing is sent); raises :class:`EngineDisconnected`
        when the engine is not connected (``ROUTER_MANDATORY``), e.g. in the grace period after
        it died."""
        assert self._machine is not None
        [send] = self._machine.send(event)
        await self._put(event.rank, send.frames[1:])  # frames[0] is the engine's identity

    async def _put(self, rank: int, frames: list[bytes]) -> None:
        """Put ``frames`` on the input ROUTER for engine ``rank`` (the wire, below the machine)."""
        assert self._input is not None
        try:
            await self._input.send_multipart([engine_identity(rank), *frames], copy=False)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                raise EngineDisconnected(f"engine {rank} is not connected (send failed: {exc})") from None
            raise

    # ================================================================== requests
    async def add(self, request: EngineCoreRequest) -> RequestStream:
        """Send ADD and return the request's stream.

        Raises :class:`DuplicateRequestId` (nothing sent) for an id already in
        flight, :class:`InvalidDataParallelRank` for a pinned rank that is not
        connected, or the client's sticky error. ``client_index`` and
        ``current_wave`` are stamped here (``ECP-REQ-6``, ``ECP-DP-5``).
        """
        self._check_ready()
        if request.request_id in self._registry:  # ECP-REQ-8: before routing, encoding or sending
            raise DuplicateRequestId(request.request_id)
        rank = self._router.choose(self._registry.counts(), request.data_parallel_rank)
        stamped = msgspec.structs.replace(request, client_index=self.config.client_index,
                                          current_wave=self.current_wave)
        sink = StreamSink(request.request_id, rank)
        self._registry.add(request.request_id, rank, sink)
        try:
            # on input 0, the only one this client has; outputs come on outputs[client_index]
            await self._send(Add(rank, stamped, 0))
        except BaseException as exc:
            self._registry.take(request.request_id)
            sink.end()
            if isinstance(exc, LocalProtocolError) and exc.clause == "ECP-REQ-8":
                # the engine has not answered an earlier ADD of this id yet (the machine knows)
                raise DuplicateRequestId(request.request_id) from None
            raise
        self._router.admitted(rank)
        self._stats.requests_added += 1
        return RequestStream(sink, self._on_stream_dropped)

    def _on_stream_dropped(self, sink: StreamSink, cause: AbortCause) -> None:
        # Called from RequestStream (possibly from a finaliser): only queue work.
        entry = self._registry.get(sink.request_id)
        if self._closed or entry is None or entry.sink is not sink:
            return
        self._coalescer.push(sink.request_id, cause, sink)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._abort_wakeup.set)

    def _take_owner(self, request_id: str, sink: StreamSink) -> int | None:
        entry = self._registry.get(request_id)
        if entry is None or entry.sink is not sink:  # finished (and maybe reused) since the drop
            return None
        self._registry.take(request_id)
        return entry.engine_rank

    async def _abort_worker(self) -> None:
        while True:
            await self._abort_wakeup.wait()
            self._abort_wakeup.clear()
            await self._settle_burst()
            while len(self._coalescer):
                grouped = self._coalescer.drain(self._take_owner, max_items=MAX_DRAIN)
                await self._send_aborts(grouped)

    async def _settle_burst(self, quiet_iterations: int = 2, max_iterations: int = 16) -> None:
        """Let a burst of drops that started in the same event-loop turn finish
        queueing before the drain (``ECP-ABORT-5``): HTTP disconnects reach their
        streams a few loop iterations apart, depending on where each handler
        was suspended. Waits until the queue stops growing for
        ``quiet_iterations`` iterations (bounded), so a lone drop still goes out
        at once."""
        size, quiet = len(self._coalescer), 0
        for _ in range(max_iterations):
            await asyncio.sleep(0)
            now = len(self._coalescer)
            quiet = quiet + 1 if now == size else 0
            size = now
            if quiet >= quiet_iterations:
                return

    async def _send_aborts(self, grouped: dict[int, list[str]]) -> None:
        for rank, ids in grouped.items():
            assert self._machine is not None
            # only ids the engine may still answer (ECP-ABORT-6): a terminal output that crossed
            # the drop on the wire has already ended the request
            ids = self._machine.abortable(rank, ids)
            if not ids:
                continue
            try:
                await self._send(Abort(rank, tuple(ids)))
            except Exception as exc:  # ECP-ABORT-8: one engine's failure does not stop the others
                self._stats.abort_send_errors += 1
                log.warning("failed to send ABORT of %d id(s) to engine %d: %s", len(ids), rank, exc)
                continue
            self._stats.abort_messages += 1
            self._stats.aborts_sent += len(ids)

    async def abort(self, request_ids: Iterable[str]) -> list[str]:
        """Abort requests explicitly (``ECP-ABORT-8``).

        Each id still in flight is finalised locally first (its stream gets
        an ABORT terminal output), then one ABORT per owning engine is sent;
        unknown or finished ids are never sent. Returns the aborted ids.
        """
        self._check_ready()
        entries: list[InFlight[StreamSink]] = []
        for request_id in dict.fromkeys(request_ids):
            entry = self._registry.take(request_id)
            if entry is None:
                continue
            entries.append(entry)
            if not entry.sink.dropped:
                entry.sink.push(_abort_output(request_id))
            entry.sink.end()
        await self._send_aborts(group_by_engine(entries))
        return [e.request_id for e in entries]

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
        rank = self._router.choose(self._registry.counts(), data_parallel_rank)
        notice = EngineCoreRequest(
            request_id=request_id,
            prompt_token_ids=[0],
            mm_features=None,
            sampling_params=SamplingParams(
                max_tokens=1, extra_args={"kv_transfer_params": dict(kv_transfer_params)},
                watermarking=False),
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=data_parallel_rank,
            client_index=self.config.client_index,
            current_wave=self.current_wave,
            abort_immediately=True,
        )
        await self._send(Add(rank, notice, 0))
        self._stats.rejection_notifications += 1
        return rank

    # ================================================================== utilities
    def _next_call_id(self) -> int:
        while True:
            call_id = next(self._call_ids) & 0xFFFF_FFFF_FFFF_FFFF
            if call_id not in self._pending_utility:
                return call_id

    async def call_utility(self, method: str, *args: Any) -> Any:
        """Call ``method(*args)`` on every engine and aggregate (see :mod:`.aggregation`).

        Waits for every engine (``ECP-UTIL-7``), bounded by
        ``utility_timeout_s``. Raises :class:`UtilityCallFailed`,
        :class:`UtilityResultDecode`, :class:`InconsistentUtilityResults`,
        :class:`UtilityTimeout` or the client's sticky error.
        """
        self._check_ready()
        loop = asyncio.get_running_loop()
        targets = self._aggregation.targets(method, self._ranks)
        calls: dict[int, tuple[int, asyncio.Future[UtilityOutput]]] = {}
        for rank in targets:
            call_id = self._next_call_id()
            fut: asyncio.Future[UtilityOutput] = loop.create_future()
            self._pending_utility[call_id] = (rank, fut)
            calls[rank] = (call_id, fut)
        self._stats.utility_calls += 1
        try:
            for rank, (call_id, fut) in calls.items():
                try:
                    await self._send(UtilityCall(rank, UtilityRequest(self.config.client_index, call_id, method,
                                                                      list(args)), 0))
                except EngineDisconnected as exc:  # that engine's failure; still wait for the others
                    if not fut.done():
                        fut.set_result(UtilityOutput(call_id, f"could not send {method} to engine {rank}: {exc}"))
                except ProtocolError:
                    raise
                except Exception as exc:  # count it as that engine's failure; still wait for the others
                    if not fut.done():
                        fut.set_result(UtilityOutput(call_id, f"could not send {method} to engine {rank}: {exc}"))
            futures = [fut for _, fut in calls.values()]
            done, pending = await asyncio.wait(futures, timeout=self.config.utility_timeout_s)
            errors = [fut.exception() for fut in done]  # retrieve every one: none is left unobserved
            for error in errors:
                if error is not None:
                    raise error.with_traceback(None)
            if pending:
                missing = [rank for rank, (_, fut) in calls.items() if fut in pending]
                raise UtilityTimeout(method, missing, self.config.utility_timeout_s)
        finally:
            for call_id, fut in calls.values():
                self._pending_utility.pop(call_id, None)
                if not fut.done():
                    fut.cancel()
        self._check_open()
        return self._aggregation.aggregate(method, {rank: fut.result() for rank, (_, fut) in calls.items()})

    async def is_sleeping(self) -> bool:
        return await self.call_utility("is_sleeping")

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        await self.call_utility("sleep", level, mode)

    async def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        return await self.call_utility("wake_up", None if tags is None else list(tags))

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_external: bool = False) -> bool:
        return await self.call_utility("reset_prefix_cache", reset_running_requests, reset_external)

    async def reset_mm_cache(self) -> None:
        await self.call_utility("reset_mm_cache")

    async def reset_encoder_cache(self) -> None:
        await self.call_utility("reset_encoder_cache")

    async def is_scheduler_paused(self) -> bool:
        return await self.call_utility("is_scheduler_paused")

    async def pause_generation(self, mode: str = "abort", clear_cache: bool = True) -> None:
        await self.call_utility("pause_generation", mode, clear_cache)

    async def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> None:
        await self.call_utility("pause_scheduler", mode, clear_cache)

    async def resume_scheduler(self) -> None:
        await self.call_utility("resume_scheduler")

    async def get_weight_version(self) -> str:
        return await self.call_utility("get_weight_version")

    async def profile(self, is_start: bool = True, prefix: str | None = None, delay_iterations: int | None = None,
                      max_iterations: int | None = None, profiler_kwargs: dict[str, Any] | None = None) -> None:
        # all 5 arguments, as vLLM 0.33 sends them (an engine older than 0.33 takes only the first 2)
        await self.call_utility("profile", is_start, prefix, delay_iterations, max_iterations, profiler_kwargs)

    async def collective_rpc(self, method: str, timeout: float | None = None, args: Sequence[Any] = (),
                             kwargs: dict[str, Any] | None = None) -> list[Any]:
        return await self.call_utility("collective_rpc", method, timeout, list(args), kwargs)

    async def get_supported_tasks(self) -> tuple[str, ...]:
        """Tasks every engine supports, in the first engine's order."""
        per_engine: dict[int, list[str]] = await self.call_utility("get_supported_tasks")
        lists = list(per_engine.values())
        common = set(lists[0]).intersection(*lists[1:]) if lists else set()
        return tuple(t for t in lists[0] if t in common) if lists else ()

    # ================================================================== receiving
    async def _output_loop(self) -> None:
        assert self._output is not None
        sock = self._output
        loop = asyncio.get_running_loop()
        yielded_at = loop.time()
        while True:
            frames = await sock.recv_multipart()
            now = self._last_output_at = loop.time()
            self._on_output_frames(frames)
            # A frame already queued in the socket is returned without a suspension, so a
            # backlog would be drained in one go while the streams it woke and new requests
            # wait (every token of a request then reaches its client in one write). Yield
            # after OUTPUT_SLICE_S of back-to-back frames: streams flush and requests are
            # admitted at least that often, and a deep backlog is still taken a few steps
            # at a time, which each stream then writes as one delta.
            if now - yielded_at >= OUTPUT_SLICE_S:
                await asyncio.sleep(0)
                yielded_at = loop.time()

    def _on_output_frames(self, frames: list[bytes]) -> None:
        self._stats.output_messages += 1
        machine = self._machine
        assert machine is not None
        events = machine.receive("output[0]", frames)
        if machine.violations:
            violations, machine.violations = machine.violations, []
            if not events:  # the message could not be read: the output stream can no longer be trusted
                self._fail(violations[0].error)
                return
            for v in violations:
                self._on_violation(v)
        if not events:
            return
        event = events[0]
        if isinstance(event, EngineDead):
            self._fail(EngineDeadError())
            return
        assert isinstance(event, Outputs)
        msg = event.outputs
        self._last_output_from[msg.engine_index] = self._last_output_at
        if msg.is_dp_control:
            self._fail(UnexpectedDPControl(msg.engine_index))
            return
        if msg.scheduler_stats is not None:
            self._router.on_stats(msg.engine_index, msg.scheduler_stats)
        registry = self._registry
        for out in msg.outputs:
            entry = registry.get(out.request_id)
            if entry is None:  # ECP-OUT-9: finished, aborted or unknown
                self._stats.outputs_dropped += 1
                continue
            sink = entry.sink
            if out.finish_reason is not None:
                registry.take(out.request_id)
            if sink.dropped:  # waiting for its auto-abort: nobody listens
                self._stats.outputs_dropped += 1
                continue
            sink.push(out)
            self._stats.outputs_dispatched += 1
            if out.finish_reason is not None:
                sink.end()
        if msg.finished_requests:
            for request_id in msg.finished_requests:
                entry = registry.take(request_id)
                if entry is not None and not entry.sink.dropped:
                    entry.sink.end(RequestStreamClosed(request_id, msg.engine_index))
        if msg.utility_output is not None:
            self._on_utility_output(msg.engine_index, msg.utility_output)

    def _on_violation(self, violation: Violation) -> None:
        """A rule an engine broke that the client survives: an output for an id it no longer
        waits for is dropped (``ECP-OUT-9``), a reply to an unknown call id too (``ECP-UTIL-10``);
        the machine names the clause."""
        self._stats.protocol_violations += 1
        err = violation.error
        log.debug("[%s] engine %s broke a rule on %s: %s", err.clause, violation.rank, violation.socket, err)

    async def _input_loop(self) -> None:
        # Engines send nothing on their input DEALER after the registration; read and drop
        # whatever comes (e.g. a restarted engine registering again) so it cannot pile up unseen.
        assert self._input is not None
        while True:
            frames = await self._input.recv_multipart()
            self._stats.unexpected_input_messages += 1
            log.warning("dropping an unexpected %d-frame message from engine identity %s on the input "
                        "socket after the handshake", len(frames) - 1, frames[0].hex())

    def _on_utility_output(self, engine_index: int, reply: UtilityOutput) -> None:
        pending = self._pending_utility.pop(reply.call_id, None)
        if pending is None:  # ECP-UTIL-10
            self._stats.unknown_utility_replies += 1
            log.warning("dropping utility reply with unknown call id %s from engine %d", reply.call_id,
                        engine_index)
            return
        rank, fut = pending
        if rank != engine_index:
            log.warning("utility reply for engine %d arrived from engine %d", rank, engine_index)
        if not fut.done():
            fut.set_result(reply)

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
        while True:
            await asyncio.sleep(timeout / 4)
            now = loop.time()
            suspects = [rank for rank, n in self._registry.counts().items()
                        if n and now - max(self._last_output_from.get(rank, started), started) >= quiet]
            if suspects:
                await asyncio.gather(*(self._probe(rank, timeout) for rank in suspects))

    async def _probe(self, rank: int, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        call_id = self._next_call_id()
        fut: asyncio.Future[UtilityOutput] = loop.create_future()
        self._pending_utility[call_id] = (rank, fut)
        sent_at = loop.time()
        self._stats.liveness_probes += 1
        try:
            await self._send(UtilityCall(rank, UtilityRequest(self.config.client_index, call_id, "is_sleeping", []),
                                         0))
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            if self._last_output_from.get(rank, 0.0) < sent_at:  # not even an output since the probe
                self._fail(EngineUnresponsive(rank, timeout))
        except Exception:  # noqa: BLE001 - a lost engine or a failed client is reported elsewhere
            pass
        finally:
            self._pending_utility.pop(call_id, None)

    async def _on_peer_lost(self, detail: str) -> None:
        # "No output and a dead peer": let outputs the engine sent before it died
        # arrive first (bounded), then fail closed.
        loop = asyncio.get_running_loop()
        grace = self.config.peer_loss_grace_s
        give_up = loop.time() + 5 * grace
        while loop.time() < give_up:
            await asyncio.sleep(grace)
            if loop.time() - self._last_output_at >= grace:
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
        for _, fut in list(self._pending_utility.values()):
            if not fut.done():
                fut.set_exception(error)
        self._pending_utility.clear()
        self._coalescer.drain(lambda _id, _token: None, max_items=len(self._coalescer))

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
        if self._input is not None and self._monitor is not None:
            try:
                self._input.disable_monitor()
            except zmq.ZMQError:
                pass
        for sock in (self._monitor, self._handshake_sock, self._input, self._output):
            if sock is not None:
                sock.close(linger=0)
        if self._coordinator is not None:
            self._coordinator.close()
        self._monitor = self._handshake_sock = self._input = self._output = None
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
