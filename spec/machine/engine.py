"""The engine role's protocol machine; see :mod:`.connection` for the model."""

from __future__ import annotations

from typing import Any, Sequence

from ..codec import ENGINE_DEAD
from ..control import StartDPWave, UtilityRequest
from ..errors import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..handshake import COORDINATOR_READY, XSUB_SUBSCRIBE, EngineHandshakeMetadata
from ..recover import recover_add_frames, recover_utility_frames
from ..request import EngineCoreRequest
from . import qualify
from .connection import IN_FLIGHT_STATES, EngineView, Mode, _Checker, _Connection
from .events import (
    COORDINATOR, Abort, Add, CoordinatorReady, CoordinatorSubscribe, EngineDead, EngineHello, EngineReady, Event,
    Init, Outputs, Registration, Send, StartWave, UtilityCall, input_socket, output_socket, parse_socket,
)
from .table import HANDSHAKE, HandshakeEvent, HandshakeState, RequestEvent, Row


class EngineConnection(_Connection):
    """The engine role for global DP rank ``rank``: its handshake DEALER, input
    DEALERs, output PUSHes and (with a coordinator) its XSUB and PUSH."""

    role = "engine"

    def __init__(self, rank: int, *, mode: Mode = "strict", bootstrapped: bool = False, clients: int = 1,
                 codec: Any = None) -> None:
        """``bootstrapped=True``: there is no handshake socket; the engine was given ``clients``
        input/output address pairs and registers on each directly (a frontend started with
        ``--engine-start-index``). ``codec``: a release's (:func:`ecp.spec.profile.wire_codec`);
        vLLM 0.33's by default."""
        super().__init__(mode, codec)
        self.rank = rank
        self.view = EngineView(rank)
        self.init: EngineHandshakeMetadata | None = None
        self.bootstrapped = bootstrapped
        if bootstrapped:  # INIT was given on the command line: the handshake starts at registration
            self.view.handshake, self.view.clients = HandshakeState.REGISTERING, clients

    @property
    def ready(self) -> bool:
        """The handshake is over: READY went out (bootstrapped: every input registered)."""
        return self.view.handshake is HandshakeState.READY or (self.bootstrapped and self.view.all_registered)

    # ------------------------------------------------------------------ receive
    def receive(self, socket: str, frames: Sequence[bytes]) -> list[Event]:
        """Feed what ``socket`` received (DEALER/XSUB frames carry no identity); get the events.

        An undecodable ADD whose request id can be read raises (or records) its
        decode error with ``request_id``/``client_index`` set: answer it with
        an ERROR output (``ECP-ROB-2``), which the machine then allows."""
        kind, client = parse_socket(socket)
        view = self.view
        if kind == "handshake":
            return self._recv_init(socket, frames)
        if kind == "coordinator_input":
            if [bytes(f) for f in frames] == [COORDINATOR_READY]:
                chk = _Checker(self, local=False)

                def gate(row: Row) -> None:
                    if row.next is not None:
                        view.handshake = row.next
                        view.gate_passed = True
                chk.step(HANDSHAKE, view.handshake, HandshakeEvent.COORDINATOR_READY, "the coordinator's READY", gate)
                chk.finish(socket, frames, self.rank)
                return [CoordinatorReady(self.rank)]
            try:
                msg = self.codec.decode_input(frames)
            except RemoteProtocolError as exc:
                self._remote(exc, socket, frames, self.rank)
                return []
            if not isinstance(msg, StartDPWave):
                self._remote(RemoteProtocolError(
                    f"the coordinator sent {type(msg).__name__}; it only publishes START_DP_WAVE",
                    clause="ECP-DP-4", got=type(msg).__name__), socket, frames, self.rank)
                return []
            chk = _Checker(self, local=False)
            self._on_start_wave(chk, view, msg)
            chk.finish(socket, frames, self.rank)
            return [StartWave(self.rank, msg, COORDINATOR)]
        if kind != "input":
            raise LocalProtocolError(f"an engine receives nothing on {socket!r}", clause="ECP-SOCK-3", got=socket)
        try:
            msg = self.codec.decode_input(frames)
        except RemoteProtocolError as exc:
            recovered = recover_add_frames(frames)
            if recovered is not None:
                exc = exc.replace(request_id=recovered.request_id, client_index=recovered.client_index)
                chk = _Checker(self, local=False, lenient=True)
                self._on_add(chk, view, recovered.request_id,
                             client if recovered.client_index is None else recovered.client_index,
                             RequestEvent.ADD_UNDECODABLE, None)
                chk.finish(socket, frames, self.rank)
            refused = recover_utility_frames(frames)
            if refused is not None:
                exc = exc.replace(call_id=refused.call_id, client_index=refused.client_index)
                chk = _Checker(self, local=False, lenient=True)
                self._on_refused_call(chk, view, refused.call_id)
                chk.finish(socket, frames, self.rank)
            self._remote(exc, socket, frames, self.rank)
            return []
        chk = _Checker(self, local=False)
        if isinstance(msg, EngineCoreRequest):
            req = msg
            duplicate = view.request_state(req.request_id) in IN_FLIGHT_STATES
            self._on_add(chk, view, req.request_id, req.client_index, qualify.add(view, req), req.current_wave)
            event: Event = Add(self.rank, req, client, duplicate)
        elif isinstance(msg, list):  # ABORT: the request ids
            self._on_abort(chk, view, msg)
            event = Abort(self.rank, msg, client)
        elif isinstance(msg, UtilityRequest):
            self._on_utility_call(chk, view, msg)
            event = UtilityCall(self.rank, msg, client)
        else:
            self._on_start_wave(chk, view, msg)
            event = StartWave(self.rank, msg, client)
        chk.finish(socket, frames, self.rank)
        return [event]

    def _recv_init(self, socket: str, frames: Sequence[bytes]) -> list[Event]:
        view = self.view
        if len(frames) != 1:
            self._remote(HandshakeError(f"INIT is one frame, got {len(frames)}", clause="ECP-HS-7",
                                             expected="1 frame", got=len(frames)), socket, frames, self.rank)
            if not frames:
                return []
        try:
            init = self.codec.decode_init(frames[-1])
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, self.rank)
            return []
        chk = _Checker(self, local=False)

        def take() -> None:
            self.init = init
        self._on_init(chk, view, init, "INIT", take)
        chk.finish(socket, frames, self.rank)
        return [Init(self.rank, init)]

    def _send_outputs(self, chk: _Checker, event: Outputs) -> list[Send]:
        view, msg = self.view, event.outputs
        if msg.engine_index != self.rank:
            raise LocalProtocolError(f"engine_index {msg.engine_index} is not this engine's rank {self.rank}",
                                     clause="ECP-OUT-2", expected=self.rank, got=msg.engine_index)
        if event.client == COORDINATOR and not view.coordinator:
            raise LocalProtocolError("INIT names no coordinator to send to", clause="ECP-OUT-6")
        self._check_outputs(chk, view, event.client, msg)
        if chk.errors:
            raise chk.errors[0]
        out = [Send(output_socket(event.client), self.codec.encode_outputs(msg))]
        chk.finish(out[0].socket, out[0].frames, self.rank)
        return out

    def send_raw(self, socket: str, frames: Sequence[bytes]) -> Send:
        """Send ``frames`` exactly as given, around the rules (a test peer misbehaving on purpose:
        a ready payload with extra keys, a second registration, READY too early).

        Nothing is raised; what the frames say, as far as it can be read, still goes through the
        tables (a lenient step: an illegal row moves the machine only where it names ``followed``,
        e.g. a READY sent too early leaves it READY).
        """
        frames = [bytes(f) for f in frames]
        view = self.view
        kind, client = parse_socket(socket)
        chk = _Checker(self, local=True, lenient=True)
        if kind == "handshake" and len(frames) == 1:
            try:
                msg = self.codec.decode_handshake(frames[0])
            except ProtocolError:
                msg = None  # stands for HELLO where one is due: the frontend may still answer with INIT
            self._on_handshake_message(chk, view, msg, "")
        elif kind == "input" and client is not None:
            try:
                response = self.codec.decode_ready_response(frames[0]) if len(frames) == 1 else None
            except ProtocolError:
                response = None
            self._on_registration(chk, view, client, response, f"registration on input[{client}]")
        elif kind == "coordinator_input" and frames == [XSUB_SUBSCRIBE]:
            chk.step(HANDSHAKE, view.handshake, qualify.subscribe(view), "the coordinator subscription",
                     self._subscribed)
        elif kind in ("output", "coordinator_output"):
            try:
                msg = self.codec.decode_outputs(frames)
            except ProtocolError:
                msg = None
            if msg is ENGINE_DEAD:
                self._on_engine_dead(chk, view, "ENGINE_CORE_DEAD")
            elif msg is not None:
                self._check_outputs(chk, view, COORDINATOR if client is None else client, msg)
        chk.finish(socket, frames, self.rank)
        return Send(socket, frames)

    def _subscribed(self, row: Row) -> None:
        if row.next is not None:
            self.view.handshake = row.next

    # ------------------------------------------------------------------ send
    def send(self, event: Event) -> list[Send]:
        """The frames that say ``event``; :class:`LocalProtocolError` if the rules forbid it now."""
        view = self.view
        if getattr(event, "rank", self.rank) != self.rank:
            raise LocalProtocolError(f"this is the machine of rank {self.rank}, not {event.rank}",
                                     clause="ECP-OUT-2", expected=self.rank, got=event.rank)
        chk = _Checker(self, local=True)
        if type(event) is Outputs:  # the hot path first
            return self._send_outputs(chk, event)
        if isinstance(event, EngineHello):
            self._on_hello(chk, view, event.hello, "HELLO")
            out = [Send("handshake", [self.codec.encode_handshake(event.hello)])]
        elif isinstance(event, Registration):
            c = event.client
            if view.clients is not None and not 0 <= c < view.clients:
                raise LocalProtocolError(f"INIT named {view.clients} input(s), there is no input[{c}]",
                                         clause="ECP-SOCK-3", expected=f"0..{view.clients - 1}", got=c)
            self._on_registration(chk, view, c, event.response, f"registration on input[{c}]")
            payload = b"" if event.response is None else self.codec.encode_handshake(event.response)
            out = [Send(input_socket(c), [payload])]
        elif isinstance(event, CoordinatorSubscribe):
            if not view.coordinator:
                raise LocalProtocolError("INIT names no coordinator to subscribe to", clause="ECP-HS-6")
            chk.step(HANDSHAKE, view.handshake, qualify.subscribe(view), "the coordinator subscription",
                     self._subscribed)
            out = [Send("coordinator_input", [XSUB_SUBSCRIBE])]
        elif isinstance(event, EngineReady):
            self._on_ready(chk, view, event.ready, "READY")
            out = [Send("handshake", [self.codec.encode_handshake(event.ready)])]
        elif isinstance(event, Outputs):
            return self._send_outputs(chk, event)
        elif isinstance(event, EngineDead):
            self._on_engine_dead(chk, view, "ENGINE_CORE_DEAD")
            clients = range(view.clients or 0) if event.client is None else [event.client]
            out = [Send(output_socket(c), self.codec.encode_engine_dead()) for c in clients]
        else:
            raise LocalProtocolError(f"an engine does not send {type(event).__name__}", clause="ECP-SOCK-3",
                                     got=type(event).__name__)
        chk.finish(out[0].socket if out else "", out[0].frames if out else [], self.rank)
        return out
