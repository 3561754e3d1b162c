"""The frontend (client) role's protocol machine; see :mod:`.connection` for the model."""

from __future__ import annotations

from typing import Any, Sequence

from ..codec import ENGINE_DEAD
from ..control import StartDPWave, UtilityRequest
from ..limits import DEFAULT_LIMITS, DecodeLimits
from ..errors import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..handshake import COORDINATOR_READY, XSUB_SUBSCRIBE, Hello, rank_of_identity
from ..recover import recover_add_frames, recover_utility_frames
from ..request import EngineCoreRequest
from . import qualify
from .connection import ABORT_ROWS, EngineView, Mode, _Checker, _Connection
from .events import (
    COORDINATOR, Abort, Add, CoordinatorReady, CoordinatorSubscribe, EngineDead, EngineHello, EngineReady, Event,
    Init, Outputs, Registration, Send, StartWave, UtilityCall, input_socket, parse_socket,
)
from .table import HandshakeState, RequestEvent


class FrontendConnection(_Connection):
    """The frontend (client) role for the engines of global ranks ``ranks``.

    One machine serves every engine of a deployment: the handshake ROUTER,
    the input ROUTERs and the output PULLs are shared between engines, so
    the machine routes by identity (ROUTER frames start with it) and by
    ``engine_index`` (outputs). ``bootstrapped=True``: there is no handshake
    socket, engines register directly (as for vllm-rs started with
    ``--engine-start-index``); then ``clients`` is the number of inputs.
    """

    role = "frontend"

    def __init__(self, ranks: Sequence[int], *, clients: int = 1, bootstrapped: bool = False,
                 mode: Mode = "strict", limits: DecodeLimits = DEFAULT_LIMITS, codec: Any = None) -> None:
        """``limits``: what the output sockets' messages are decoded under (``ECP-ROB-*``).
        ``codec``: a release's (:func:`ecp.spec.profile.wire_codec`); vLLM 0.33's by default."""
        super().__init__(mode, codec)
        self.limits = limits
        self.ranks = tuple(ranks)
        self.bootstrapped = bootstrapped
        self.engines: dict[int, EngineView] = {r: EngineView(r) for r in self.ranks}
        #: coordinator subscriptions seen on ``coordinator_input`` (the XPUB cannot tell engines apart)
        self.subscriptions = 0
        self.gate_open = False
        #: ``ENGINE_CORE_DEAD`` seen on a PULL shared by several engines (not attributable)
        self.dead_seen = False
        if bootstrapped:  # the engines were given INIT's addresses: the handshake starts at registration
            for v in self.engines.values():
                v.handshake, v.clients = HandshakeState.REGISTERING, clients

    # ------------------------------------------------------------------ views
    def engine(self, rank: int) -> EngineView:
        try:
            return self.engines[rank]
        except KeyError:
            raise LocalProtocolError(f"rank {rank} is not one of this frontend's engines {list(self.ranks)}",
                                     clause="ECP-HS-11", expected=list(self.ranks), got=rank) from None

    @property
    def handshake_done(self) -> bool:
        return all(v.handshake is HandshakeState.READY or (self.bootstrapped and v.all_registered)
                   for v in self.engines.values())

    def missing(self, stage: str) -> list[int]:
        """Ranks that have not reached ``stage``: ``HELLO``, ``registration`` or ``READY``."""
        out = []
        for v in self.engines.values():
            if stage == "HELLO":
                done = self.bootstrapped or v.handshake is not HandshakeState.START
            elif stage == "registration":
                done = v.all_registered
            elif stage == "READY":
                done = self.bootstrapped or v.handshake is HandshakeState.READY
            else:
                raise ValueError(stage)
            if not done:
                out.append(v.rank)
        return out

    def _rank_of(self, identity: bytes, socket: str, frames: Sequence[bytes]) -> int | None:
        try:
            rank = rank_of_identity(identity)
        except RemoteProtocolError as exc:
            self._remote(exc.replace(clause="ECP-HS-11"), socket, frames, None)
            return None
        if rank not in self.engines:
            self._remote(HandshakeError(
                f"{socket}: identity {identity.hex()} (rank {rank}) is not one of the configured engines",
                clause="ECP-HS-11", expected=list(self.ranks), got=rank), socket, frames, None)
            return None
        return rank

    def abortable(self, rank: int, request_ids: Sequence[str]) -> list[str]:
        """The ids of ``request_ids`` an ABORT to engine ``rank`` may name now (the REQUEST table's
        legal ``Abort`` rows: in flight, or rejected and not yet answered); a frontend never sends
        the others (``ECP-ABORT-6``)."""
        view = self.engine(rank)
        return [rid for rid in dict.fromkeys(request_ids)
                if ABORT_ROWS[view.request_state(rid)].verdict == "legal"]

    # ------------------------------------------------------------------ receive
    def receive(self, socket: str, frames: Sequence[bytes]) -> list[Event]:
        """Feed what ``socket`` received (ROUTER frames start with the identity); get the events."""
        kind, index = parse_socket(socket)
        if kind == "handshake":
            return self._recv_handshake(socket, frames)
        if kind == "input":
            return self._recv_registration(index, socket, frames)
        if kind == "output":
            return self._recv_outputs(index, socket, frames)
        if kind == "coordinator_output":
            return self._recv_outputs(COORDINATOR, socket, frames)
        if kind == "coordinator_input":
            if frames and bytes(frames[0])[:1] == XSUB_SUBSCRIBE:
                self.subscriptions += 1
                return [CoordinatorSubscribe(-1)]
            return []
        raise LocalProtocolError(f"a frontend has no socket {socket!r}", clause="ECP-SOCK-1", got=socket)

    def _recv_handshake(self, socket: str, frames: Sequence[bytes]) -> list[Event]:
        rank = self._rank_of(bytes(frames[0]), socket, frames) if frames else None
        if rank is None:
            return []
        view = self.engines[rank]
        if len(frames) != 2:
            self._remote(HandshakeError(
                f"a handshake message is one frame after the identity, got {len(frames) - 1}",
                clause="ECP-HS-7", expected="2 frames at the ROUTER", got=len(frames)), socket, frames, rank)
            if len(frames) < 2:
                return []
        try:
            msg = self.codec.decode_handshake(frames[1])
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, rank)
            # recording: the message is followed as far as it can be read (it stands for HELLO where one is due)
            chk = _Checker(self, local=False, lenient=True)
            self._on_handshake_message(chk, view, None, f" from rank {rank}")
            chk.finish(socket, frames, rank)
            return []
        chk = _Checker(self, local=False)
        self._on_handshake_message(chk, view, msg, f" from rank {rank}")
        chk.finish(socket, frames, rank)
        return [EngineHello(rank, msg) if isinstance(msg, Hello) else EngineReady(rank, msg)]

    def _recv_registration(self, client: int, socket: str, frames: Sequence[bytes]) -> list[Event]:
        rank = self._rank_of(bytes(frames[0]), socket, frames) if frames else None
        if rank is None:
            return []
        view = self.engines[rank]
        if len(frames) != 2:
            self._remote(HandshakeError(
                f"a registration is one frame after the identity, got {len(frames) - 1}", clause="ECP-HS-3",
                expected="2 frames at the ROUTER", got=len(frames)), socket, frames, rank)
            return []
        try:
            response = self.codec.decode_ready_response(frames[1])
        except RemoteProtocolError as exc:
            if client in view.registered:
                # not a second ready payload but something else on an input DEALER after the
                # registration: an output sent to the wrong socket (ECP-HS-3.2), most often the ERROR
                # answering an undecodable ADD, whose place is outputs[client] (ECP-ROB-2.2)
                exc = HandshakeError(
                    f"rank {rank} sent a message that is not a ready payload on {socket} after its registration "
                    f"({exc.message}); the registration is the only message an engine sends on an input "
                    f"socket (ECP-HS-3.2): every output, an ERROR answering an undecodable ADD included, goes "
                    f"to an output socket, outputs[{client}] for an ADD that came in on {socket} (ECP-ROB-2.2)",
                    clause="ECP-HS-3", expected="nothing after the registration", got="a further message")
                self._remote(exc, socket, frames, rank)
                return []
            self._remote(exc, socket, frames, rank)
            response = None
            if self.mode == "strict":
                return []
        chk = _Checker(self, local=False)
        self._on_registration(chk, view, client, response, f"registration of rank {rank} on input[{client}]")
        chk.finish(socket, frames, rank)
        return [Registration(rank, client, response)]

    def _recv_outputs(self, client: int, socket: str, frames: Sequence[bytes]) -> list[Event]:
        try:
            msg = self.codec.decode_outputs(frames, self.limits)
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, None)
            return []
        if msg is ENGINE_DEAD:
            if len(self.engines) == 1:
                view = next(iter(self.engines.values()))
                chk = _Checker(self, local=False)
                self._on_engine_dead(chk, view, f"ENGINE_CORE_DEAD on {socket}")
                chk.finish(socket, frames, view.rank)
                return [EngineDead(view.rank, client)]
            self.dead_seen = True
            return [EngineDead(-1, client)]
        rank = msg.engine_index
        view = self.engines.get(rank)
        if view is None:
            self._remote(RemoteProtocolError(
                f"{socket}: engine_index {rank} is not one of this frontend's engines {list(self.ranks)}",
                clause="ECP-OUT-2", expected=list(self.ranks), got=rank), socket, frames, None)
            return [Outputs(rank, client, msg)]
        chk = _Checker(self, local=False)
        self._check_outputs(chk, view, client, msg)
        chk.finish(socket, frames, rank)
        return [Outputs(rank, client, msg)]

    # ------------------------------------------------------------------ send
    def send(self, event: Event) -> list[Send]:
        """The frames that say ``event``; :class:`LocalProtocolError` if the rules forbid it now."""
        if isinstance(event, CoordinatorReady):
            return self._send_gate(local=True)
        if isinstance(event, StartWave) and event.client == COORDINATOR:
            frames = self.codec.encode_input(event.wave)
            for view in self.engines.values():
                chk = _Checker(self, local=True)
                self._on_start_wave(chk, view, event.wave)
                chk.finish("coordinator_input", frames, view.rank)
            return [Send("coordinator_input", frames)]
        view = self.engine(event.rank)
        chk = _Checker(self, local=True)
        if isinstance(event, Init):
            frames = [view.identity, self.codec.encode_handshake(event.init)]
            self._on_init(chk, view, event.init, f"INIT to rank {view.rank}")
            chk.finish("handshake", frames, view.rank)
            return [Send("handshake", frames)]
        if isinstance(event, Add):
            client = event.on_client
            self._check_input(chk, view, client, lambda: f"ADD {event.request.request_id!r}")
            frames = [view.identity, *self.codec.encode_add(event.request)]
            # outputs go to outputs[client_index] whatever input carried the ADD (ECP-SOCK-4)
            self._on_add(chk, view, event.request.request_id, event.request.client_index,
                         qualify.add(view, event.request), event.request.current_wave)
        elif isinstance(event, Abort):
            client = event.client
            self._check_input(chk, view, client, "ABORT")
            frames = [view.identity, *self.codec.encode_abort(event.request_ids)]
            self._on_abort(chk, view, event.request_ids)
        elif isinstance(event, UtilityCall):
            call = event.call
            client = event.client
            self._check_input(chk, view, client, f"UTILITY {call.method_name}")
            self._on_utility_call(chk, view, call)
            if chk.errors:
                raise chk.errors[0]
            frames = [view.identity, *self.codec.encode_utility(call.client_idx, call.call_id, call.method_name, call.args)]
        elif isinstance(event, StartWave):
            client = event.client
            self._check_input(chk, view, client, "START_DP_WAVE")
            frames = [view.identity, *self.codec.encode_input(event.wave)]
            self._on_start_wave(chk, view, event.wave)
        else:
            raise LocalProtocolError(f"a frontend does not send {type(event).__name__}", clause="ECP-SOCK-1",
                                     got=type(event).__name__)
        chk.finish(input_socket(client), frames, view.rank)
        return [Send(input_socket(client), frames)]

    def _send_gate(self, local: bool) -> list[Send]:
        waiting = [v for v in self.engines.values() if v.coordinator]
        if local and self.subscriptions < len(waiting):
            raise LocalProtocolError(
                f"the coordinator gate opens once every engine subscribed ({self.subscriptions} of "
                f"{len(waiting)})", clause="ECP-HS-6", expected=len(waiting), got=self.subscriptions)
        self.gate_open = True
        for v in self.engines.values():  # published to every engine, whether it waits for it or not
            v.gate_passed = True
        return [Send("coordinator_input", [COORDINATOR_READY])]

    def send_raw(self, socket: str, frames: Sequence[bytes]) -> Send:
        """Send ``frames`` exactly as given, around the rules (a peer misbehaving on purpose).

        Nothing is checked; what the frames say still moves the machine (an
        ADD with an id in flight makes the engine owe an ERROR output, an
        undecodable ADD whose id can be read makes an ERROR answer legal), so
        the engine's replies are judged as the protocol says they must be.
        """
        frames = [bytes(f) for f in frames]
        kind, client = parse_socket(socket)
        chk = _Checker(self, local=True, lenient=True)
        if kind == "coordinator_input":
            if frames == [COORDINATOR_READY]:
                self._send_gate(local=False)
            else:
                try:
                    msg = self.codec.decode_input(frames)
                except ProtocolError:
                    msg = None
                if isinstance(msg, StartDPWave):
                    for view in self.engines.values():
                        self._on_start_wave(chk, view, msg)
            chk.finish(socket, frames, None)
            return Send(socket, frames)
        if kind not in ("handshake", "input") or not frames or len(frames[0]) != 2:
            return Send(socket, frames)
        view = self.engines.get(int.from_bytes(frames[0], "little"))
        if view is None:
            return Send(socket, frames)
        if kind == "handshake":
            try:
                init = self.codec.decode_init(frames[-1])
            except ProtocolError:
                return Send(socket, frames)
            self._on_init(chk, view, init, f"INIT to rank {view.rank}")
            chk.finish(socket, frames, view.rank)
            return Send(socket, frames)
        try:
            msg = self.codec.decode_input(frames[1:])
        except ProtocolError:
            recovered = recover_add_frames(frames[1:])
            if recovered is not None:
                self._on_add(chk, view, recovered.request_id,
                             client if recovered.client_index is None else recovered.client_index,
                             RequestEvent.ADD_UNDECODABLE, None)
            refused = recover_utility_frames(frames[1:])
            if refused is not None:
                self._on_refused_call(chk, view, refused.call_id)
            chk.finish(socket, frames, view.rank)
            return Send(socket, frames)
        if isinstance(msg, EngineCoreRequest):
            self._on_add(chk, view, msg.request_id, msg.client_index, qualify.add(view, msg), msg.current_wave)
        elif isinstance(msg, list):  # ABORT: the request ids
            self._on_abort(chk, view, msg)
        elif isinstance(msg, UtilityRequest):
            self._on_utility_call(chk, view, msg)
        elif isinstance(msg, StartDPWave):
            self._on_start_wave(chk, view, msg)
        chk.finish(socket, frames, view.rank)
        return Send(socket, frames)
