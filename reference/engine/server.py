"""The pyzmq layer of one engine core (one DP rank): handshake, sockets, IO loop.

:class:`EngineServer` joins a frontend-owned handshake as a vLLM engine does
(spec/PROTOCOL.md §2): HELLO on a DEALER whose identity is the 2-byte rank, INIT, one
input DEALER and one output PUSH per client, the ready payload on every input,
the coordinator gate when INIT names a coordinator, READY. Then it loops:
drain every readable socket, feed the decoded messages to the sans-IO
:class:`~ecp.reference.engine.core.EngineCore`, run one step, send what the
core queued. A malformed message is logged with its clause and, when its
request id can be read, answered with an ERROR output; the loop keeps serving
(``ECP-ROB-1``). An unexpected exception sends ``ENGINE_CORE_DEAD`` on every
output socket before the server returns 1 (``ECP-OUT-8``). Setting the stop
event aborts in-flight requests with ABORT outputs, flushes and returns 0
(``ECP-ROB-5``).
"""

from __future__ import annotations

import importlib
import logging
import random
import threading
from typing import Any

import zmq

from ecp.spec import (
    EngineCoreOutputs, EngineCoreReadyResponse, EngineHandshakeMetadata, HandshakeTimeout, Hello,
    Ready, RemoteProtocolError, decode_any, encode_payload,
)
from ecp.spec.machine import COORDINATOR, Abort, Add, Event, Outputs, StartWave, UtilityCall, input_socket, output_socket
from ecp.spec.peer import EnginePeer
from ecp.spec.peer.zmq_io import EngineSockets
from ecp.spec.profile import wire_codec

from .config import EngineConfig
from .core import EngineCore
from .faults import FaultLayer, InjectedCrash
from .kv_connector import ProducerAllowList, ReferenceKVConnector
from .kv_notices import NoticeSockets
from .log_limit import RepeatLimiter

log = logging.getLogger("ecp.engine")
# A peer's bad messages are logged on a child logger whose lines are rate-limited per
# template, so a flood of garbage costs bounded log volume (docs/reliability.md).
bad_input_log = logging.getLogger("ecp.engine.bad_input")
bad_input_log.addFilter(RepeatLimiter())

IDLE_POLL_MS = 50  # how often an idle engine looks at its stop event
MAX_DRAIN = 4096  # messages taken from one socket per loop turn, so outputs keep flowing


class EngineStartupError(Exception):
    """The handshake or startup failed; the engine never became ready."""


def make_executor(config: EngineConfig) -> Any:
    """The configured executor; the torch one is imported only when asked for."""
    if config.executor == "torch":
        module = importlib.import_module("ecp.reference.engine.torch_executor")
        return module.TorchExecutor(config.model, config.device, config.seed, config.dtype)
    from .synthetic import SyntheticExecutor

    return SyntheticExecutor(
        seed=config.seed, vocab_size=config.vocab_size,
        output_token_chunk_size=config.output_token_chunk_size, step_time_ms=config.step_time_ms,
        prefill_token_cost_us=config.prefill_token_cost_us, decode_token_cost_us=config.decode_token_cost_us,
        eos_every=config.eos_every, eos_token_id=config.eos_token_id)


def rank_side_channel(address: str, local_index: int) -> str:
    """Rank ``local_index``'s side-channel address: tcp ports count up, ipc paths get a suffix."""
    if local_index == 0:
        return address
    if address.startswith("tcp://"):
        host, _, port = address[6:].rpartition(":")
        if port.isdigit() and int(port) != 0:
            return f"tcp://{host}:{int(port) + local_index}"
        return address
    return f"{address}-{local_index}"


class EngineServer:
    """One engine core process (or thread) for global DP rank ``rank``."""

    def __init__(self, config: EngineConfig, *, rank: int, handshake_address: str,
                 data_parallel_size: int | None = None, local_index: int = 0,
                 stop_event: threading.Event | None = None) -> None:
        self.config = config
        self.rank = rank
        self.local_index = local_index
        self.handshake_address = handshake_address
        self.dp_size = data_parallel_size or config.data_parallel_size or (rank + 1)
        self.stop_event = stop_event or threading.Event()
        #: the release spoken on the wire (``--vllm``): the core thinks in vLLM 0.33's messages, the
        #: machine's codec writes and reads them as that release does
        self.profile = config.profile()
        self.instance_id = str(random.getrandbits(63))
        self.core: EngineCore | None = None
        #: the engine side of the protocol: the skeleton's machine sees every frame in and out (the
        #: handshake, then the request lifecycle, utility calls, waves); the server only moves frames
        self.peer: EnginePeer | None = None
        #: ``peer.machine``, kept at hand for the serving loop
        self.machine = None
        self.io: EngineSockets | None = None
        #: the deliberate faults of ``--bug`` (inactive without any), between the sockets and the core
        self.faults = FaultLayer(config.bugs, rank)
        self.ready = threading.Event()
        self.exit_code: int | None = None
        self.bad_frames = 0
        self._ctx: zmq.Context | None = None
        self._inputs: list[zmq.Socket] = []
        self._outputs: list[zmq.Socket] = []
        self._coord_sub: zmq.Socket | None = None
        self._coord_push: zmq.Socket | None = None
        self._side_pull: zmq.Socket | None = None
        #: the consumer's sockets to KV producers (addresses a request names): bounded, LRU
        self._side_push: NoticeSockets | None = None

    # ------------------------------------------------------------------ entry
    def run(self) -> int:
        """Handshake, serve until stopped; returns the exit code (0 graceful, 1 failure)."""
        self._ctx = zmq.Context()
        try:
            try:
                self._startup()
            except EngineStartupError as exc:
                log.error("engine rank %d failed to start: %s", self.rank, exc)
                self.exit_code = 1
                return 1
            except Exception as exc:  # a bad address, a model that cannot load, no such device …
                log.error("engine rank %d failed to start: %s: %s", self.rank, type(exc).__name__, exc)
                self.exit_code = 1
                return 1
            if self.stop_event.is_set() and self.core is None:
                self.exit_code = 0
                return 0
            self.exit_code = self._serve()
            return self.exit_code
        finally:
            self._close()

    # ------------------------------------------------------------------ startup
    def _startup(self) -> None:
        """The handshake, through the engine skeleton (:class:`~ecp.spec.peer.EnginePeer`): the
        server only builds its core once INIT says how many clients it serves."""
        cfg = self.config
        hello = self.faults.on_hello(Hello(local=cfg.local, headless=not cfg.local))
        self.peer = EnginePeer(self.rank, hello=hello,
                               ready=self.faults.on_ready(Ready(
                                   local=cfg.local, headless=not cfg.local,
                                   parallel_config_hash=self._parallel_config_hash() if self.dp_size > 1 else None)),
                               payload=self._on_init, codec=wire_codec(self.profile))
        self.machine = self.peer.machine
        self.io = EngineSockets(self._ctx, self.peer, stop=self.stop_event.is_set, linger_ms={"handshake": 5000})
        try:
            served = self.io.handshake(self.handshake_address, cfg.handshake_timeout_s,
                                       gate_timeout_s=cfg.coordinator_timeout_s, on_event=self._before_ready,
                                       on_bad_message=self._bad_coordinator_message)
        except HandshakeTimeout as exc:
            raise EngineStartupError(f"timed out after {exc.timeout_s:.0f}s waiting for {exc.stage} "
                                     f"({exc.clause})") from None
        except RemoteProtocolError as exc:
            raise EngineStartupError(f"bad INIT: {exc}") from None
        except zmq.ZMQError as exc:
            raise EngineStartupError(f"cannot connect to {self.handshake_address!r} or an address INIT "
                                     f"named: {exc}") from exc
        finally:
            # stopped mid-handshake: an undelivered HELLO must not hold ctx.term() for the linger time
            hs = self.io.sockets.pop("handshake", None)
            if hs is not None:
                hs.close(0 if self.stop_event.is_set() else None)
        if not served:
            return
        sockets = self.io.sockets
        self._inputs = [sockets[input_socket(c)] for c in range(self.peer.clients)]
        self._outputs = [sockets[output_socket(c)] for c in range(self.peer.clients)]
        self._coord_sub = sockets.get("coordinator_input")
        self._coord_push = sockets.get("coordinator_output")
        self.ready.set()
        log.info("engine rank %d ready: %d client(s), %d KV blocks x %d, coordinator=%s",
                 self.rank, len(self._inputs), self.core.num_blocks, cfg.block_size, self.peer.coordinator)

    def _on_init(self, init: EngineHandshakeMetadata) -> EngineCoreReadyResponse:
        """INIT arrived: build the core for the clients it names; the ready payload describes it."""
        addrs = init.addresses
        self.core = EngineCore(self.config, make_executor(self.config), engine_index=self.rank,
                               num_clients=len(addrs.inputs), has_coordinator=addrs.coordinator_input is not None,
                               connector=self._make_connector())
        return self._ready_response()

    def _before_ready(self, event: Event) -> None:
        if isinstance(event, StartWave):  # a wave published before the gate opened
            self.core.start_dp_wave(event.wave.new_wave, event.wave.exclude_eng_index)

    @staticmethod
    def _bad_coordinator_message(exc: RemoteProtocolError, socket: str) -> None:
        bad_input_log.warning("[%s] dropped a bad message on %s: %s", exc.clause, socket, exc)

    def _make_connector(self) -> ReferenceKVConnector | None:
        cfg = self.config
        if cfg.kv_connector != "reference":
            return None
        engine_id = cfg.kv_engine_id or f"ecp-{self.instance_id}-{self.rank}"
        host = port = None
        # ECP-SEC-4: the producers this engine's configuration names, and its own side channel
        producers = ProducerAllowList(cfg.kv_producers)
        if cfg.kv_role in ("producer", "both"):
            address = rank_side_channel(cfg.kv_side_channel or "tcp://127.0.0.1:0", self.local_index)
            pull = self._ctx.socket(zmq.PULL)
            pull.setsockopt(zmq.LINGER, 0)
            try:
                pull.bind(address)
            except zmq.ZMQError as exc:
                pull.close()
                raise EngineStartupError(f"cannot bind the KV side channel {address}: {exc}") from None
            self._side_pull = pull
            bound = pull.getsockopt_string(zmq.LAST_ENDPOINT)
            if bound.startswith("tcp://"):
                h, _, p = bound[6:].rpartition(":")
                host, port = h, int(p)
            else:
                host = bound
            try:
                producers.add(bound)
            except ValueError:  # an address no request can name the same way (e.g. an abstract ipc name)
                pass
            log.info("KV side channel (producer) at %s", bound)
        return ReferenceKVConnector(engine_id=engine_id, role=cfg.kv_role, free_blocks=lambda b: None,
                                    host=host, port=port, lease_s=cfg.kv_lease_s, producers=producers)

    def _ready_response(self) -> EngineCoreReadyResponse:
        cfg = self.config
        core = self.core
        kv_tokens = core.num_blocks * cfg.block_size
        return EngineCoreReadyResponse(
            max_model_len=core.max_model_len, num_gpu_blocks=core.num_blocks, block_size=cfg.block_size,
            dp_stats_address=None, dtype=core.executor.dtype,
            # the release's own version; the codec leaves out the fields that release's payload lacks
            vllm_version=self.profile.vllm_version, world_size=1,
            data_parallel_size=self.dp_size, tensor_parallel_size=1, pipeline_parallel_size=1,
            decode_context_parallel_size=1, data_parallel_rank=self.rank, max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens, instance_id=self.instance_id,
            supports_lora=cfg.max_loras > 0, max_loras=cfg.max_loras, kv_cache_size_tokens=kv_tokens,
            kv_cache_max_concurrency=kv_tokens / core.max_model_len, enable_sleep_mode=True,
            effective_attention_block_size=cfg.block_size)

    def _parallel_config_hash(self) -> str:
        import hashlib

        return hashlib.sha256(f"dp={self.dp_size};tp=1;pp=1".encode()).hexdigest()[:16]

    # ------------------------------------------------------------------ serving
    def _serve(self) -> int:
        core = self.core
        poller = zmq.Poller()
        for s in self._inputs:
            poller.register(s, zmq.POLLIN)
        for s in (self._coord_sub, self._side_pull):
            if s is not None:
                poller.register(s, zmq.POLLIN)
        client_of = {s: i for i, s in enumerate(self._inputs)}
        self._input_names = [f"input[{i}]" for i in range(len(self._inputs))]
        self._output_names = [f"output[{i}]" for i in range(len(self._outputs))]
        busy = False
        try:
            while not self.stop_event.is_set():
                timeout = 0 if busy else IDLE_POLL_MS
                if not busy and core.connector is not None:
                    deadline = core.connector.next_deadline()
                    if deadline is not None:
                        timeout = max(0, min(timeout, int((deadline - core.clock()) * 1000) + 1))
                for sock, _ in poller.poll(timeout):
                    for _ in range(MAX_DRAIN):
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        if sock is self._side_pull:
                            self._on_side_channel(frames)
                        elif sock is self._coord_sub:
                            self._on_coordinator(frames)
                        else:
                            self._on_input(frames, client_of[sock])
                    self._flush()
                busy = core.step()
                self._flush()
            core.shutdown()
            self._flush()
            return 0
        except _Fatal as exc:
            log.error("engine rank %d: fatal: %s; sending ENGINE_CORE_DEAD", self.rank, exc)
        except Exception:
            log.exception("engine rank %d: fatal error; sending ENGINE_CORE_DEAD", self.rank)
        self._send_dead()
        return 1

    def _on_input(self, frames: list[bytes], client: int) -> None:
        """Feed one input message to the machine and act on the event it returns."""
        try:
            events = self.machine.receive(self._input_names[client], frames)
        except RemoteProtocolError as exc:
            self.bad_frames += 1
            bad_input_log.warning("[%s] dropped a bad input message from client %d: %s",
                                  exc.clause, client, exc)
            try:
                self.faults.on_bad_frame(exc)
            except InjectedCrash as crash:
                raise _Fatal(str(crash)) from None
            if exc.request_id is not None:
                # the machine read the id of an undecodable ADD: it is owed one ERROR, on
                # outputs[client_index] when element 11 is an int, else on the output of the input it
                # came in on, never on the input socket itself (ECP-ROB-2.2, ECP-HS-3.2)
                to = client if exc.client_index is None else exc.client_index
                if 0 <= to < len(self._outputs):
                    self.core.reject(exc.request_id, to, "invalid_request", f"[{exc.clause}] {exc.message}")
                else:  # no such output socket: dropped and logged (ECP-ROB-4)
                    bad_input_log.warning("[ECP-ROB-4] undecodable ADD %r names client_index %d; its ERROR "
                                          "is dropped", exc.request_id, to)
            elif exc.call_id is not None:
                # the machine read the call id of an undecodable UTILITY: answered with its failure on
                # outputs[client_index] where that exists, else the socket it came in on (ECP-ROB-1)
                to = exc.client_index if exc.client_index is not None and 0 <= exc.client_index < len(
                    self._outputs) else client
                self.core.utilities.refuse(exc.call_id, to, f"refused: {exc}")
            return
        for event in events:
            self._dispatch(event, client)

    def _dispatch(self, event: Event, client: int) -> None:
        core = self.core
        if self.faults:
            event = self.faults.on_input(event)
            if event is None:
                return
        if isinstance(event, Add):
            core.add_request(event.request, client, duplicate=event.duplicate)
        elif isinstance(event, Abort):
            core.abort_requests(event.request_ids)
        elif isinstance(event, UtilityCall):
            core.handle_utility(event.call, client)
        elif isinstance(event, StartWave):
            core.start_dp_wave(event.wave.new_wave, event.wave.exclude_eng_index)

    def _on_coordinator(self, frames: list[bytes]) -> None:
        try:
            events = self.machine.receive("coordinator_input", frames)
        except RemoteProtocolError as exc:
            bad_input_log.warning("[%s] dropped a bad coordinator message: %s", exc.clause, exc)
            return
        for event in events:
            if isinstance(event, StartWave):
                self.core.start_dp_wave(event.wave.new_wave, event.wave.exclude_eng_index)

    def _on_side_channel(self, frames: list[bytes]) -> None:
        try:
            payload = decode_any(frames[0])
        except RemoteProtocolError as exc:
            bad_input_log.warning("[%s] dropped a bad KV side-channel message: %s", exc.clause, exc)
            return
        self.core.connector.on_notice(payload)

    # ------------------------------------------------------------------ sending
    def _flush(self) -> None:
        core = self.core
        outbox = core.take_outbox()
        if self.faults:
            outbox = [out for ob in outbox for out in self.faults.on_output(ob)]
        machine = self.machine
        for ob in outbox:
            client = ob.client_index
            if client == COORDINATOR:
                sock = self._coord_push
            elif 0 <= client < len(self._outputs):
                sock = self._outputs[client]
            else:
                sock = None
            if sock is None:
                log.warning("[ECP-ROB-4] dropped an output for client %d (no such output socket)", client)
                continue
            if self.faults and client != COORDINATOR and self.faults.misroutes(ob.payload):
                # a deliberate fault: the output goes back on the input socket, around the machine
                self._inputs[client].send_multipart(machine.codec.encode_outputs(ob.payload))
                continue
            if self.faults:
                # a deliberate fault goes out around the rules; the machine still follows it
                socket = "coordinator_output" if client == COORDINATOR else self._output_names[client]
                raw = ob.payload
                frames = machine.send_raw(socket, machine.codec.encode_outputs(raw) if isinstance(raw, EngineCoreOutputs)
                                          else encode_payload(raw)).frames
            else:
                # the machine checks every message against the rules (a LocalProtocolError is a
                # bug of this engine: fatal, ENGINE_CORE_DEAD) and encodes it
                [send] = machine.send(Outputs(self.rank, client, ob.payload))
                frames = send.frames
            sock.send_multipart(frames, copy=len(frames[0]) < 65536)
        connector = core.connector
        if connector is not None and connector.outbox:
            if self._side_push is None:
                self._side_push = NoticeSockets(self._ctx)
            for notice in connector.outbox:
                self._side_push.send(notice)
            connector.outbox.clear()

    def _send_dead(self) -> None:
        if self.peer is None:
            return
        for send in self.peer.die():  # nothing if already dead: nothing follows ENGINE_CORE_DEAD (ECP-OUT-8)
            sock = self.io.sockets.get(send.socket)
            if sock is None:
                continue
            try:
                sock.send_multipart(send.frames, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass

    def _close(self) -> None:
        if self.io is not None:
            self.io.close()
        if self._side_push is not None:
            self._side_push.close()
        if self._side_pull is not None:
            self._side_pull.close()
        if self._ctx is not None:
            self._ctx.term()


class _Fatal(Exception):
    """Raised inside the loop to take the ENGINE_CORE_DEAD exit."""
