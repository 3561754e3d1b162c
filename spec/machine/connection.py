"""The two protocol machines: :class:`FrontendConnection` and :class:`EngineConnection`.

Sans-IO in h11's style: the transport hands :meth:`receive` what a socket
received and gets typed events back; it hands :meth:`send` an event and gets
the frames to put on which socket. Nothing here touches a socket, a thread or
an event loop. Every rule is a row of :mod:`.table`; this module only decides
which row applies (the qualified event) and carries out its effect.

* Local misuse -- sending what the protocol forbids in the current state --
  raises :class:`~ecp.spec.errors.LocalProtocolError` naming the clause;
  nothing is sent and no state changes.
* A peer breaking a rule raises :class:`~ecp.spec.errors.RemoteProtocolError`
  (decode errors are its subclasses) naming the clause; the offending message
  is rejected and no state changes (``ECP-ROB-1``: the receiver keeps serving).
  In **recording mode** (``mode="record"``) the violation is appended to
  :attr:`violations` with its socket and frames instead, and the machine
  carries on as the peer's message implies -- so a conformance harness sees
  every violation of a run, not just the first.
* :meth:`send_raw` puts frames on the wire *around* the rules (a test peer
  that misbehaves on purpose): nothing is checked, but the machine still
  follows what the frames say, so the peer's answers are judged against it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from ..codec import (
    ENGINE_DEAD, AbortMessage, AddMessage, StartDPWaveMessage, UtilityMessage, decode_handshake, decode_init,
    decode_input, decode_outputs, decode_ready_response, encode_abort, encode_add, encode_engine_dead,
    encode_handshake, encode_input, encode_outputs, encode_utility,
)
from ..control import StartDPWave, UtilityRequest
from ..enums import EEP_NOTIFICATION_CALL_ID, FT_STATUS_CALL_ID, FinishReason
from ..errors import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..handshake import (
    COORDINATOR_READY, XSUB_SUBSCRIBE, EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready,
    engine_identity, rank_of_identity,
)
from ..outputs import EngineCoreOutputs
from ..recover import recover_add_frames
from .events import (
    COORDINATOR, Abort, Add, CoordinatorReady, CoordinatorSubscribe, EngineDead, EngineHello, EngineReady, Event,
    Init, Outputs, Registration, Send, StartWave, UtilityCall, input_socket, output_socket, parse_socket,
)
from .table import HANDSHAKE, LIVENESS, REQUEST, SCHEDULER, UTILITY, WAVE, Row, Table

Mode = Literal["strict", "record"]

RESERVED_CALL_IDS = frozenset((EEP_NOTIFICATION_CALL_ID, FT_STATUS_CALL_ID))
#: request states after which the frontend no longer waits for anything
CLOSED_STATES = frozenset(("FINISHED", "ABORTED", "REJECTED", "INVALID"))
#: how many closed request ids an engine view remembers (to judge late outputs)
CLOSED_MEMORY = 1 << 16
#: utility methods that change the sleep/pause state (``ECP-UTIL-8``, ``ECP-REQ-7``)
SCHEDULER_METHODS = frozenset(("sleep", "wake_up", "pause_generation", "pause_scheduler", "resume_scheduler"))


@dataclass
class Violation:
    """A rule the peer broke, as recorded in recording mode."""

    error: RemoteProtocolError
    socket: str
    frames: list[bytes]
    rank: int | None = None

    @property
    def clause(self) -> str:
        return self.error.clause


@dataclass
class RequestState:
    state: str
    client: int
    #: ERROR outputs the engine owes for duplicate ADDs of this id (``ECP-REQ-2``)
    owed_errors: int = 0


@dataclass
class PendingCall:
    method: str
    args: list[Any]
    client: int
    count: int = 1


@dataclass
class EngineView:
    """Everything a machine knows about one engine (its own, for an engine)."""

    rank: int
    handshake: str = HANDSHAKE.initial
    #: number of input/output socket pairs INIT named
    clients: int | None = None
    coordinator: bool = False
    registered: set[int] = field(default_factory=set)
    gate_passed: bool = False
    hello: Hello | None = None
    ready: Ready | None = None
    responses: dict[int, EngineCoreReadyResponse | None] = field(default_factory=dict)
    liveness: str = LIVENESS.initial
    scheduler: str = SCHEDULER.initial
    wave_state: str = WAVE.initial
    wave: int = 0
    requests: dict[str, RequestState] = field(default_factory=dict)
    closed: OrderedDict[str, RequestState] = field(default_factory=OrderedDict)
    calls: dict[int, PendingCall] = field(default_factory=dict)

    @property
    def identity(self) -> bytes:
        return engine_identity(self.rank)

    @property
    def all_registered(self) -> bool:
        return self.clients is not None and len(self.registered) >= self.clients

    def request(self, rid: str) -> RequestState | None:
        return self.requests.get(rid) or self.closed.get(rid)

    def request_state(self, rid: str) -> str:
        r = self.request(rid)
        return "NONE" if r is None else r.state

    def set_request(self, rid: str, r: RequestState) -> None:
        if r.state in CLOSED_STATES:
            self.requests.pop(rid, None)
            self.closed[rid] = r
            self.closed.move_to_end(rid)
            while len(self.closed) > CLOSED_MEMORY:
                self.closed.popitem(last=False)
        else:
            self.closed.pop(rid, None)
            self.requests[rid] = r

    @property
    def scheduler_calls_pending(self) -> int:
        return sum(c.count for c in self.calls.values() if c.method in SCHEDULER_METHODS)


Effect = Callable[[], None]


class _Checker:
    """Collects the rows one message touches; raises or records before any effect runs."""

    def __init__(self, conn: "_Connection", local: bool, lenient: bool = False) -> None:
        self.conn, self.local, self.lenient = conn, local, lenient
        self.errors: list[ProtocolError] = []
        self.effects: list[Effect] = []

    def step(self, table: Table, state: str, event: str, what: str, effect: Callable[[Row], None] | None = None
             ) -> Row:
        row = table.step(state, event)
        bad = row.verdict == "illegal" or (row.verdict == "tolerated" and self.local)
        if bad and not self.lenient:
            why = row.note or f"{event} is not allowed in state {state}"
            cls = LocalProtocolError if self.local else HandshakeError if table is HANDSHAKE else RemoteProtocolError
            self.errors.append(cls(f"{what}: {why}", clause=row.clause, expected=f"an event the {table.area} "
                                   f"table allows in {state}", got=f"{event} in {state}"))
        if effect is not None and (row.verdict != "illegal" or self.lenient):
            self.effects.append(lambda: effect(row))
        return row

    def error(self, err: ProtocolError) -> None:
        self.errors.append(err)

    def finish(self, socket: str, frames: Sequence[bytes], rank: int | None) -> bool:
        """Raise (strict / local) or record; run the effects. False when the message was rejected."""
        if self.errors and not self.lenient:
            if self.local or self.conn.mode == "strict":
                raise self.errors[0]
            for err in self.errors:
                self.conn._record(err, socket, frames, rank)
        for effect in self.effects:
            effect()
        return True


class _Connection:
    """What both roles share: the views, the request/utility/scheduler rules, recording."""

    role = ""

    def __init__(self, mode: Mode) -> None:
        if mode not in ("strict", "record"):
            raise ValueError(f"mode must be 'strict' or 'record', not {mode!r}")
        self.mode: Mode = mode
        self.violations: list[Violation] = []

    # ------------------------------------------------------------------ errors
    def _record(self, err: ProtocolError, socket: str, frames: Sequence[bytes], rank: int | None) -> None:
        if not isinstance(err, RemoteProtocolError):
            raise err
        self.violations.append(Violation(err, socket, [bytes(f) for f in frames], rank))

    def _remote(self, err: RemoteProtocolError, socket: str, frames: Sequence[bytes], rank: int | None) -> None:
        """A peer message that cannot even be read: raise, or record in recording mode."""
        if self.mode == "strict":
            raise err
        self._record(err, socket, frames, rank)

    # ------------------------------------------------------------------ shared rules: inputs
    def _check_input(self, chk: _Checker, view: EngineView, client: int, what: str) -> None:
        key = "Input(registered input)" if client in view.registered else "Input(unregistered input)"
        chk.step(HANDSHAKE, view.handshake, key, what)
        chk.step(LIVENESS, view.liveness, "Input", what)

    def _add_key(self, view: EngineView, request: Any, undecodable: bool = False) -> str:
        if undecodable:
            return "Add(undecodable)"
        if request.abort_immediately:
            return "Add(abort_immediately)"
        if view.scheduler == "REJECTING" and view.scheduler_calls_pending == 0:
            return "Add(while rejecting)"
        return "Add"

    def _on_add(self, chk: _Checker, view: EngineView, rid: str, client: int, key: str,
                current_wave: int | None) -> None:
        def effect(row: Row) -> None:
            r = view.request(rid)
            if row.next is None:  # a duplicate in flight: the engine owes one ERROR output
                if r is not None:
                    r.owed_errors += 1
                return
            view.set_request(rid, RequestState(row.next, client, r.owed_errors if r is not None else 0))

        chk.step(REQUEST, view.request_state(rid), key, f"ADD {rid!r}", effect)
        if current_wave is not None and key != "Add(undecodable)":
            def wave_effect(row: Row) -> None:
                view.wave = max(view.wave, current_wave)
                if row.next:
                    view.wave_state = row.next
            chk.step(WAVE, view.wave_state, "Add", f"ADD {rid!r}", wave_effect)

    def _on_abort(self, chk: _Checker, view: EngineView, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            def effect(row: Row, rid: str = rid) -> None:
                r = view.request(rid)
                if row.next is not None and r is not None:
                    r.state = row.next
                    view.set_request(rid, r)
            chk.step(REQUEST, view.request_state(rid), "Abort", f"ABORT {rid!r}", effect)

    def _on_utility_call(self, chk: _Checker, view: EngineView, call: UtilityRequest) -> None:
        cid = call.call_id
        if cid in RESERVED_CALL_IDS:
            key = "UtilityCall(reserved id)"
        else:
            key = "UtilityCall"

        def effect(row: Row) -> None:
            if row.next is None and cid in view.calls:
                view.calls[cid].count += 1
            elif row.next == "PENDING":
                view.calls[cid] = PendingCall(call.method_name, list(call.args), call.client_index)
        chk.step(UTILITY, "PENDING" if cid in view.calls else "NONE", key,
                 f"UTILITY {call.method_name} (call_id {cid})", effect)

    def _on_start_wave(self, chk: _Checker, view: EngineView, wave: StartDPWave) -> None:
        newer = wave.wave >= view.wave and wave.exclude_engine_index != view.rank

        def effect(row: Row) -> None:
            if row.next is not None:
                view.wave_state = row.next
                view.wave = wave.wave
        chk.step(WAVE, view.wave_state, "StartWave(newer)" if newer else "StartWave(stale)",
                 f"START_DP_WAVE {wave.wave}", effect)

    # ------------------------------------------------------------------ shared rules: outputs
    def _check_outputs(self, chk: _Checker, view: EngineView, client: int, msg: EngineCoreOutputs) -> None:
        where = "the coordinator" if client == COORDINATOR else f"output[{client}]"
        chk.step(LIVENESS, view.liveness, "Outputs", f"a message on {where}")
        if client != COORDINATOR and (view.clients is None or not 0 <= client < view.clients):
            chk.step(LIVENESS, view.liveness, "Outputs(no such client)", f"a message for client {client}")
        target = "to the coordinator" if client == COORDINATOR else "to a client"
        if msg.wave_complete is not None:
            def done(row: Row, w: int = msg.wave_complete) -> None:
                if row.next is not None:
                    view.wave_state = row.next
                    view.wave = max(view.wave, w + 1)
            chk.step(WAVE, view.wave_state, f"Outputs(wave_complete) {target}",
                     f"wave_complete {msg.wave_complete} on {where}", done)
        if msg.start_wave is not None:
            chk.step(WAVE, view.wave_state, f"Outputs(start_wave) {target}", f"start_wave {msg.start_wave} on {where}")
        # effects run after every check passed, so later outputs of one message are judged
        # against the state the earlier ones lead to: (state, owed ERRORs) per id
        shadow: dict[str, tuple[str, int]] = {}
        for out in msg.outputs:
            rid = out.request_id
            r = view.request(rid)
            state, owed = shadow.get(rid) or (("NONE", 0) if r is None else (r.state, r.owed_errors))
            if out.finish_reason is None:
                key = "Output(tokens)"
            elif out.finish_reason == FinishReason.ERROR:
                key = "Output(owed ERROR)" if owed else "Output(terminal ERROR)"
            else:
                key = "Output(terminal)"

            def effect(row: Row, rid: str = rid, key: str = key) -> None:
                cur = view.request(rid)
                if cur is None:
                    return
                if key == "Output(owed ERROR)":
                    cur.owed_errors -= 1
                    return
                if row.next is not None:
                    cur.state = row.next
                    view.set_request(rid, cur)
            row = chk.step(REQUEST, state, key, f"output for {rid!r} on {where}", effect)
            if row.verdict != "illegal":
                if key == "Output(owed ERROR)":
                    owed -= 1
                elif row.next is not None:
                    state = row.next
            shadow[rid] = (state, owed)
            if r is not None and client != COORDINATOR and r.client != client and r.state not in CLOSED_STATES \
                    and self._routable(view, r.client):
                chk.step(LIVENESS, view.liveness, "Output(another client's request)",
                         f"output for {rid!r} (client {r.client}) on {where}")
        if msg.utility_output is not None:
            self._check_reply(chk, view, client, msg, where)

    @staticmethod
    def _routable(view: EngineView, client: int) -> bool:
        """Whether ``client`` has an output socket; an engine may answer a request or call whose
        ``client_index`` has none wherever it can (``ECP-ROB-4``)."""
        return view.clients is not None and 0 <= client < view.clients

    def _check_reply(self, chk: _Checker, view: EngineView, client: int, msg: EngineCoreOutputs, where: str) -> None:
        uo = msg.utility_output
        cid = uo.call_id
        if cid in RESERVED_CALL_IDS:
            key = "Reply(reserved id)"
        elif uo.failure_message is not None:
            key = "Reply(failure)"
        elif uo.result is not None:
            key = "Reply(result)"
        else:
            key = "Reply(no envelope)"
        call = view.calls.get(cid) if cid not in RESERVED_CALL_IDS else None

        def effect(row: Row) -> None:
            if row.next == "NONE" and cid in view.calls:
                view.calls[cid].count -= 1
                if view.calls[cid].count <= 0:
                    del view.calls[cid]
        what = f"utility reply (call_id {cid}) on {where}"
        chk.step(UTILITY, "PENDING" if call is not None else "NONE", key, what, effect)
        if call is None:
            return
        if call.client != client and self._routable(view, call.client):
            chk.step(LIVENESS, view.liveness, "Output(another client's request)",
                     f"{what}: the call named client {call.client}")
        if uo.failure_message is not None or uo.result is None:
            return
        value = uo.result.value
        skey = None
        m = call.method
        if m == "sleep":
            skey = "Reply(sleep: ok)"
        elif m == "wake_up" and isinstance(value, bool):
            skey = f"Reply(wake_up: {'true' if value else 'false'})"
        elif m == "pause_generation":
            mode = call.args[0] if call.args else "abort"
            skey = "Reply(pause: ok)" if mode == "keep" else "Reply(pause_generation abort|wait: ok)"
        elif m == "pause_scheduler":
            skey = "Reply(pause: ok)"
        elif m == "resume_scheduler":
            skey = "Reply(resume_scheduler: ok)"
        elif m == "is_sleeping" and isinstance(value, bool) and view.scheduler_calls_pending == 0:
            skey = f"Reply(is_sleeping: {'true' if value else 'false'})"
        if skey is not None:
            def sched(row: Row) -> None:
                if row.next is not None:
                    view.scheduler = row.next
            chk.step(SCHEDULER, view.scheduler, skey, f"{what}: {m} -> {value!r}", sched)


# ================================================================================== frontend
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
                 mode: Mode = "strict") -> None:
        super().__init__(mode)
        self.ranks = tuple(ranks)
        self.bootstrapped = bootstrapped
        self.engines: dict[int, EngineView] = {r: EngineView(r) for r in self.ranks}
        #: coordinator subscriptions seen on ``coordinator_input`` (the XPUB cannot tell engines apart)
        self.subscriptions = 0
        self.gate_open = False
        #: ``ENGINE_CORE_DEAD`` seen on a PULL shared by several engines (not attributable)
        self.dead_seen = False
        if bootstrapped:
            for v in self.engines.values():
                v.handshake, v.clients = "REGISTERING", clients

    # ------------------------------------------------------------------ views
    def engine(self, rank: int) -> EngineView:
        try:
            return self.engines[rank]
        except KeyError:
            raise LocalProtocolError(f"rank {rank} is not one of this frontend's engines {list(self.ranks)}",
                                     clause="ECP-HS-11", expected=list(self.ranks), got=rank) from None

    @property
    def handshake_done(self) -> bool:
        return all(v.handshake == "READY" or (self.bootstrapped and v.all_registered)
                   for v in self.engines.values())

    def missing(self, stage: str) -> list[int]:
        """Ranks that have not reached ``stage``: ``HELLO``, ``registration`` or ``READY``."""
        out = []
        for v in self.engines.values():
            if stage == "HELLO":
                done = self.bootstrapped or v.handshake != "START"
            elif stage == "registration":
                done = v.all_registered
            elif stage == "READY":
                done = self.bootstrapped or v.handshake == "READY"
            else:
                raise ValueError(stage)
            if not done:
                out.append(v.rank)
        return out

    def _rank_of(self, identity: bytes, socket: str, frames: Sequence[bytes]) -> int | None:
        try:
            rank = rank_of_identity(identity)
        except RemoteProtocolError as exc:
            exc.clause = "ECP-HS-11"
            self._remote(exc, socket, frames, None)
            return None
        if rank not in self.engines:
            self._remote(HandshakeError(
                f"{socket}: identity {identity.hex()} (rank {rank}) is not one of the configured engines",
                clause="ECP-HS-11", expected=list(self.ranks), got=rank), socket, frames, None)
            return None
        return rank

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
            msg = decode_handshake(frames[1])
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, rank)
            if view.handshake == "START":  # recording: a malformed first message stands for HELLO
                view.handshake = "HELLO"
            return []
        chk = _Checker(self, local=False)
        if isinstance(msg, Hello):
            def hello(row: Row) -> None:
                view.hello = msg
                view.handshake = row.next or view.handshake
            chk.step(HANDSHAKE, view.handshake, "EngineHello", f"HELLO from rank {rank}", hello)
            chk.finish(socket, frames, rank)
            return [EngineHello(rank, msg)]

        def ready(row: Row) -> None:
            view.ready = msg
            view.handshake = row.next or view.handshake
        chk.step(HANDSHAKE, view.handshake, self._ready_key(view), f"READY from rank {rank}", ready)
        chk.finish(socket, frames, rank)
        return [EngineReady(rank, msg)]

    def _ready_key(self, view: EngineView) -> str:
        if view.handshake != "REGISTERING":
            return "EngineReady"
        if view.coordinator and not self.gate_open:
            return "EngineReady(gate closed)"
        if not view.all_registered:
            return "EngineReady(inputs unseen)"
        return "EngineReady(registered, gate passed)"

    def _recv_registration(self, client: int, socket: str, frames: Sequence[bytes]) -> list[Event]:
        rank = self._rank_of(bytes(frames[0]), socket, frames) if frames else None
        if rank is None:
            return []
        view = self.engines[rank]
        key = ("Registration" if view.handshake in ("START", "HELLO") else
               "Registration(registered input)" if client in view.registered else "Registration(new input)")
        if len(frames) != 2:
            self._remote(HandshakeError(
                f"a registration is one frame after the identity, got {len(frames) - 1}", clause="ECP-HS-3",
                expected="2 frames at the ROUTER", got=len(frames)), socket, frames, rank)
            return []
        try:
            response = decode_ready_response(frames[1])
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, rank)
            response = None
            if self.mode == "strict":
                return []

        def register(row: Row) -> None:
            view.registered.add(client)
            view.responses[client] = response
            if row.next is not None:
                view.handshake = row.next
        chk = _Checker(self, local=False)
        chk.step(HANDSHAKE, view.handshake, key, f"registration of rank {rank} on input[{client}]", register)
        chk.finish(socket, frames, rank)
        return [Registration(rank, client, response)]

    def _recv_outputs(self, client: int, socket: str, frames: Sequence[bytes]) -> list[Event]:
        try:
            msg = decode_outputs(frames)
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, None)
            return []
        if msg is ENGINE_DEAD:
            if len(self.engines) == 1:
                view = next(iter(self.engines.values()))
                view.liveness = "DEAD"
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
            frames = encode_input(StartDPWaveMessage(event.wave))
            for view in self.engines.values():
                chk = _Checker(self, local=True)
                self._on_start_wave(chk, view, event.wave)
                chk.finish("coordinator_input", frames, view.rank)
            return [Send("coordinator_input", frames)]
        view = self.engine(event.rank)
        chk = _Checker(self, local=True)
        if isinstance(event, Init):
            frames = [view.identity, encode_handshake(event.init)]

            def init(row: Row) -> None:
                self._take_init(view, event.init, row.next)
            chk.step(HANDSHAKE, view.handshake, "Init", f"INIT to rank {view.rank}", init)
            chk.finish("handshake", frames, view.rank)
            return [Send("handshake", frames)]
        if isinstance(event, Add):
            client = event.on_client
            self._check_input(chk, view, client, f"ADD {event.request.request_id!r}")
            frames = [view.identity, *encode_add(event.request)]
            # outputs go to outputs[client_index] whatever input carried the ADD (ECP-SOCK-4)
            self._on_add(chk, view, event.request.request_id, event.request.client_index,
                         self._add_key(view, event.request),
                         event.request.current_wave)
        elif isinstance(event, Abort):
            client = event.client
            self._check_input(chk, view, client, "ABORT")
            frames = [view.identity, *encode_abort(event.request_ids)]
            self._on_abort(chk, view, event.request_ids)
        elif isinstance(event, UtilityCall):
            call = event.call
            client = call.client_index
            self._check_input(chk, view, client, f"UTILITY {call.method_name}")
            self._on_utility_call(chk, view, call)
            if chk.errors:
                raise chk.errors[0]
            frames = [view.identity, *encode_utility(client, call.call_id, call.method_name, call.args)]
        elif isinstance(event, StartWave):
            client = event.client
            self._check_input(chk, view, client, "START_DP_WAVE")
            frames = [view.identity, *encode_input(StartDPWaveMessage(event.wave))]
            self._on_start_wave(chk, view, event.wave)
        else:
            raise LocalProtocolError(f"a frontend does not send {type(event).__name__}", clause="ECP-SOCK-1",
                                     got=type(event).__name__)
        chk.finish(input_socket(client), frames, view.rank)
        return [Send(input_socket(client), frames)]

    def _take_init(self, view: EngineView, init: EngineHandshakeMetadata, next_state: str | None) -> None:
        if next_state is not None:
            view.handshake = next_state
        view.clients = len(init.addresses.inputs)
        view.coordinator = init.addresses.coordinator_input is not None

    def _send_gate(self, local: bool) -> list[Send]:
        waiting = [v for v in self.engines.values() if v.coordinator]
        if local and self.subscriptions < len(waiting):
            raise LocalProtocolError(
                f"the coordinator gate opens once every engine subscribed ({self.subscriptions} of "
                f"{len(waiting)})", clause="ECP-HS-6", expected=len(waiting), got=self.subscriptions)
        self.gate_open = True
        for v in waiting:
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
                    msg = decode_input(frames)
                except ProtocolError:
                    msg = None
                if isinstance(msg, StartDPWaveMessage):
                    for view in self.engines.values():
                        self._on_start_wave(chk, view, msg.wave)
            chk.finish(socket, frames, None)
            return Send(socket, frames)
        if kind not in ("handshake", "input") or not frames or len(frames[0]) != 2:
            return Send(socket, frames)
        view = self.engines.get(int.from_bytes(frames[0], "little"))
        if view is None:
            return Send(socket, frames)
        if kind == "handshake":
            try:
                init = decode_init(frames[-1])
            except ProtocolError:
                return Send(socket, frames)
            self._take_init(view, init, "REGISTERING" if view.handshake in ("START", "HELLO") else None)
            return Send(socket, frames)
        try:
            msg = decode_input(frames[1:])
        except ProtocolError:
            recovered = recover_add_frames(frames[1:])
            if recovered is not None:
                self._on_add(chk, view, recovered.request_id,
                             client if recovered.client_index is None else recovered.client_index,
                             "Add(undecodable)", None)
            chk.finish(socket, frames, view.rank)
            return Send(socket, frames)
        if isinstance(msg, AddMessage):
            self._on_add(chk, view, msg.request.request_id, msg.request.client_index,
                         self._add_key(view, msg.request), msg.request.current_wave)
        elif isinstance(msg, AbortMessage):
            self._on_abort(chk, view, msg.request_ids)
        elif isinstance(msg, UtilityMessage):
            self._on_utility_call(chk, view, msg.call)
        elif isinstance(msg, StartDPWaveMessage):
            self._on_start_wave(chk, view, msg.wave)
        chk.finish(socket, frames, view.rank)
        return Send(socket, frames)


# ================================================================================== engine
class EngineConnection(_Connection):
    """The engine role for global DP rank ``rank``: its handshake DEALER, input
    DEALERs, output PUSHes and (with a coordinator) its XSUB and PUSH."""

    role = "engine"

    def __init__(self, rank: int, *, mode: Mode = "strict") -> None:
        super().__init__(mode)
        self.rank = rank
        self.view = EngineView(rank)
        self.init: EngineHandshakeMetadata | None = None

    @property
    def ready(self) -> bool:
        return self.view.handshake == "READY"

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
                chk.step(HANDSHAKE, view.handshake, "CoordinatorReady", "the coordinator's READY", gate)
                chk.finish(socket, frames, self.rank)
                return [CoordinatorReady(self.rank)]
            try:
                msg = decode_input(frames)
            except RemoteProtocolError as exc:
                self._remote(exc, socket, frames, self.rank)
                return []
            if not isinstance(msg, StartDPWaveMessage):
                self._remote(RemoteProtocolError(
                    f"the coordinator sent {type(msg).__name__}; it only publishes START_DP_WAVE",
                    clause="ECP-DP-4", got=type(msg).__name__), socket, frames, self.rank)
                return []
            chk = _Checker(self, local=False)
            self._on_start_wave(chk, view, msg.wave)
            chk.finish(socket, frames, self.rank)
            return [StartWave(self.rank, msg.wave, COORDINATOR)]
        if kind != "input":
            raise LocalProtocolError(f"an engine receives nothing on {socket!r}", clause="ECP-SOCK-3", got=socket)
        try:
            msg = decode_input(frames)
        except RemoteProtocolError as exc:
            recovered = recover_add_frames(frames)
            if recovered is not None:
                exc.request_id = recovered.request_id
                exc.client_index = recovered.client_index
                chk = _Checker(self, local=False, lenient=True)
                self._on_add(chk, view, recovered.request_id,
                             client if recovered.client_index is None else recovered.client_index,
                             "Add(undecodable)", None)
                chk.finish(socket, frames, self.rank)
            self._remote(exc, socket, frames, self.rank)
            return []
        chk = _Checker(self, local=False)
        if isinstance(msg, AddMessage):
            req = msg.request
            self._on_add(chk, view, req.request_id, req.client_index, self._add_key(view, req), req.current_wave)
            event: Event = Add(self.rank, req, client)
        elif isinstance(msg, AbortMessage):
            self._on_abort(chk, view, msg.request_ids)
            event = Abort(self.rank, msg.request_ids, client)
        elif isinstance(msg, UtilityMessage):
            self._on_utility_call(chk, view, msg.call)
            event = UtilityCall(self.rank, msg.call)
        else:
            self._on_start_wave(chk, view, msg.wave)
            event = StartWave(self.rank, msg.wave, client)
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
            init = decode_init(frames[-1])
        except RemoteProtocolError as exc:
            self._remote(exc, socket, frames, self.rank)
            return []
        chk = _Checker(self, local=False)

        def take(row: Row) -> None:
            if row.next is not None:
                view.handshake = row.next
            self.init = init
            view.clients = len(init.addresses.inputs)
            view.coordinator = init.addresses.coordinator_input is not None
        chk.step(HANDSHAKE, view.handshake, "Init", "INIT", take)
        chk.finish(socket, frames, self.rank)
        return [Init(self.rank, init)]

    def send_raw(self, socket: str, frames: Sequence[bytes]) -> Send:
        """Send ``frames`` exactly as given, around the rules (a test peer misbehaving on purpose:
        a ready payload with extra keys, a second registration, READY too early).

        Nothing is checked; what the frames say still moves the machine as far as it can be read.
        """
        frames = [bytes(f) for f in frames]
        view = self.view
        kind, client = parse_socket(socket)
        if kind == "handshake" and len(frames) == 1:
            try:
                msg = decode_handshake(frames[0])
            except ProtocolError:
                msg = None
            if isinstance(msg, Hello) and view.handshake == "START":
                view.hello, view.handshake = msg, "HELLO"
            elif isinstance(msg, Ready):
                view.ready, view.handshake = msg, "READY"
        elif kind == "input" and view.handshake in ("REGISTERING", "READY") and client not in view.registered:
            view.registered.add(client)
        elif kind == "coordinator_input" and frames == [XSUB_SUBSCRIBE] and view.handshake == "REGISTERING":
            view.handshake = "SUBSCRIBED"
        elif kind in ("output", "coordinator_output"):
            try:
                msg = decode_outputs(frames)
            except ProtocolError:
                msg = None
            if msg is ENGINE_DEAD:
                view.liveness = "DEAD"
            elif msg is not None:
                chk = _Checker(self, local=True, lenient=True)
                self._check_outputs(chk, view, COORDINATOR if client is None else client, msg)
                chk.finish(socket, frames, self.rank)
        return Send(socket, frames)

    # ------------------------------------------------------------------ send
    def send(self, event: Event) -> list[Send]:
        """The frames that say ``event``; :class:`LocalProtocolError` if the rules forbid it now."""
        view = self.view
        if getattr(event, "rank", self.rank) != self.rank:
            raise LocalProtocolError(f"this is the machine of rank {self.rank}, not {event.rank}",
                                     clause="ECP-OUT-2", expected=self.rank, got=event.rank)
        chk = _Checker(self, local=True)
        if isinstance(event, EngineHello):
            def hello(row: Row) -> None:
                view.hello = event.hello
                view.handshake = row.next or view.handshake
            chk.step(HANDSHAKE, view.handshake, "EngineHello", "HELLO", hello)
            out = [Send("handshake", [encode_handshake(event.hello)])]
        elif isinstance(event, Registration):
            c = event.client
            if view.clients is not None and not 0 <= c < view.clients:
                raise LocalProtocolError(f"INIT named {view.clients} input(s), there is no input[{c}]",
                                         clause="ECP-SOCK-3", expected=f"0..{view.clients - 1}", got=c)
            key = ("Registration" if view.handshake in ("START", "HELLO") else
                   "Registration(registered input)" if c in view.registered else "Registration(new input)")

            def register(row: Row) -> None:
                view.registered.add(c)
                view.responses[c] = event.response
                view.handshake = row.next or view.handshake
            chk.step(HANDSHAKE, view.handshake, key, f"registration on input[{c}]", register)
            payload = b"" if event.response is None else encode_handshake(event.response)
            out = [Send(input_socket(c), [payload])]
        elif isinstance(event, CoordinatorSubscribe):
            if not view.coordinator:
                raise LocalProtocolError("INIT names no coordinator to subscribe to", clause="ECP-HS-6")
            key = "CoordinatorSubscribe"
            if view.handshake == "REGISTERING":
                key += "(all registered)" if view.all_registered else "(inputs missing)"

            def sub(row: Row) -> None:
                view.handshake = row.next or view.handshake
            chk.step(HANDSHAKE, view.handshake, key, "the coordinator subscription", sub)
            out = [Send("coordinator_input", [XSUB_SUBSCRIBE])]
        elif isinstance(event, EngineReady):
            if view.handshake == "REGISTERING":
                key = ("EngineReady(inputs missing)" if not view.all_registered else
                       "EngineReady(gate closed)" if view.coordinator else "EngineReady(registered, gate passed)")
            elif view.handshake == "SUBSCRIBED":
                key = "EngineReady(gate closed)"
            elif view.handshake == "GATED":
                key = "EngineReady(registered, gate passed)"
            else:
                key = "EngineReady"

            def ready(row: Row) -> None:
                view.ready = event.ready
                view.handshake = row.next or view.handshake
            chk.step(HANDSHAKE, view.handshake, key, "READY", ready)
            out = [Send("handshake", [encode_handshake(event.ready)])]
        elif isinstance(event, Outputs):
            msg = event.outputs
            if msg.engine_index != self.rank:
                raise LocalProtocolError(f"engine_index {msg.engine_index} is not this engine's rank {self.rank}",
                                         clause="ECP-OUT-2", expected=self.rank, got=msg.engine_index)
            if event.client == COORDINATOR and not view.coordinator:
                raise LocalProtocolError("INIT names no coordinator to send to", clause="ECP-OUT-6")
            self._check_outputs(chk, view, event.client, msg)
            if chk.errors:
                raise chk.errors[0]
            out = [Send(output_socket(event.client), encode_outputs(msg))]
        elif isinstance(event, EngineDead):
            def dead(row: Row) -> None:
                view.liveness = row.next or view.liveness
            chk.step(LIVENESS, view.liveness, "EngineDead", "ENGINE_CORE_DEAD", dead)
            clients = range(view.clients or 0) if event.client is None else [event.client]
            out = [Send(output_socket(c), encode_engine_dead()) for c in clients]
        else:
            raise LocalProtocolError(f"an engine does not send {type(event).__name__}", clause="ECP-SOCK-3",
                                     got=type(event).__name__)
        chk.finish(out[0].socket if out else "", out[0].frames if out else [], self.rank)
        return out
