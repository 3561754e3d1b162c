"""What the two protocol machines share (:class:`~.frontend.FrontendConnection`,
:class:`~.engine.EngineConnection`): the view of an engine, the rules of requests, utility
calls, sleep/pause and waves, and recording.

Sans-IO in h11's style: the transport hands :meth:`receive` what a socket
received and gets typed events back; it hands :meth:`send` an event and gets
the frames to put on which socket. Nothing here touches a socket, a thread or
an event loop. Every rule is a row of :mod:`.table`; this module steps the
table with the qualified event :mod:`.qualify` names for a message and carries
out the row's effect, the only way any state changes.

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
  that misbehaves on purpose): nothing is raised, but every frame that can be
  read still goes through its row (a lenient step: a legal or tolerated row
  applies, an illegal one only where it names ``followed``), so the peer's
  answers are judged against what it was sent. No state changes but by a row.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from .. import codec as _codec
from ..control import StartDPWave, UtilityRequest
from ..errors import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready, engine_identity
from ..outputs import EngineCoreOutputs
from . import qualify
from .events import COORDINATOR, output_socket
from .qualify import RESERVED_CALL_IDS
from .table import (
    HANDSHAKE, LIVENESS, REQUEST, SCHEDULER, UTILITY, WAVE, HandshakeEvent, HandshakeState, LivenessEvent,
    LivenessState, QualifiedEvent, RequestEvent, RequestStatus, Row, SchedulerState, State, Table, UtilityEvent, UtilityState,
    WaveEvent, WaveState,
)

Mode = Literal["strict", "record"]

_Q = RequestStatus
#: request states after which the frontend no longer waits for anything
CLOSED_STATES = frozenset((_Q.FINISHED, _Q.ABORTED, _Q.REJECTED, _Q.INVALID))
#: request states in which a second ADD of the id is a duplicate (``ECP-REQ-8``: the REQUEST
#: table's rows where an ADD leaves the state unchanged)
IN_FLIGHT_STATES = frozenset(r_state for row in REQUEST.rows if row.event is RequestEvent.ADD and row.next is None
                             for r_state in row.states)
# members bound once (an enum member's attribute lookup costs as much as a table lookup)
_NONE, _RUNNING = _Q.NONE, _Q.RUNNING
_ADD_UNDECODABLE, _ABORT = RequestEvent.ADD_UNDECODABLE, RequestEvent.ABORT
_OUTPUTS, _INPUT, _FOREIGN_CLIENT = LivenessEvent.OUTPUTS, LivenessEvent.INPUT, LivenessEvent.FOREIGN_CLIENT
_WAVE_ADD = WaveEvent.ADD
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


@dataclass(slots=True)
class RequestState:
    state: RequestStatus
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
    handshake: HandshakeState = HANDSHAKE.initial
    #: number of input/output socket pairs INIT named
    clients: int | None = None
    coordinator: bool = False
    registered: set[int] = field(default_factory=set)
    #: the coordinator's READY reached this engine (``ECP-HS-6``)
    gate_passed: bool = False
    hello: Hello | None = None
    ready: Ready | None = None
    responses: dict[int, EngineCoreReadyResponse | None] = field(default_factory=dict)
    liveness: LivenessState = LIVENESS.initial
    scheduler: SchedulerState = SCHEDULER.initial
    wave_state: WaveState = WAVE.initial
    wave: int = 0
    requests: dict[str, RequestState] = field(default_factory=dict)
    closed: OrderedDict[str, RequestState] = field(default_factory=OrderedDict)
    calls: dict[int, PendingCall] = field(default_factory=dict)
    #: call id -> how many refused (undecodable) UTILITY messages of that id are not answered yet: a
    #: failure may answer each
    refused: dict[int, int] = field(default_factory=dict)
    #: client -> ids in ``RUNNING`` whose outputs go to that client (kept by :meth:`set_request`), so
    #: a message of token outputs for running requests is judged with one set operation
    running: dict[int, set[str]] = field(default_factory=dict)

    @property
    def identity(self) -> bytes:
        return engine_identity(self.rank)

    @property
    def all_registered(self) -> bool:
        return self.clients is not None and len(self.registered) >= self.clients

    def request(self, rid: str) -> RequestState | None:
        return self.requests.get(rid) or self.closed.get(rid)

    def call_state(self, cid: int) -> UtilityState:
        if cid in self.calls:
            return UtilityState.PENDING
        return UtilityState.REFUSED if cid in self.refused else UtilityState.NONE

    def request_state(self, rid: str) -> RequestStatus:
        r = self.request(rid)
        return _NONE if r is None else r.state

    def set_request(self, rid: str, r: RequestState) -> None:
        """Every change of a request's state goes through here."""
        old = self.requests.get(rid)
        if old is not None and old.client != r.client and old.client in self.running:
            self.running[old.client].discard(rid)
        if r.state is _RUNNING:
            self.running.setdefault(r.client, set()).add(rid)
        elif r.client in self.running:
            self.running[r.client].discard(rid)
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

#: the REQUEST table's ``Abort`` row for each state (one ABORT may name thousands of ids)
ABORT_ROWS = {state: REQUEST.step(state, RequestEvent.ABORT) for state in RequestStatus}

#: the row the outputs check takes without a lookup (tokens for a running request)
_STEADY = REQUEST.step(_RUNNING, RequestEvent.OUTPUT_TOKENS)
if _STEADY.verdict != "legal" or _STEADY.next is not _RUNNING:
    raise ImportError("the outputs fast path of _check_outputs no longer matches the REQUEST table")


class _Checker:
    """Collects the rows one message touches; raises or records before any effect runs."""

    def __init__(self, conn: "_Connection", local: bool, lenient: bool = False) -> None:
        """``lenient``: follow frames sent around the rules (``send_raw``): record nothing, apply
        legal and tolerated rows, and illegal ones only where they name ``followed``."""
        self.conn, self.local, self.lenient = conn, local, lenient
        self.errors: list[ProtocolError] = []
        self.effects: list[Effect] = []

    def step(self, table: Table, state: State, event: QualifiedEvent, what: str | Callable[[], str],
             effect: Callable[[Row], None] | None = None) -> Row:
        """Look the row up; note its violation (``what``: the message, or a callable making it only
        when needed) and queue its effect, which moves the state to ``row.next`` (if any)."""
        row = table.step(state, event)
        bad = row.verdict == "illegal" or (row.verdict == "tolerated" and self.local)
        if bad and not self.lenient:
            why = row.note or f"{event} is not allowed in state {state}"
            cls = LocalProtocolError if self.local else HandshakeError if table is HANDSHAKE else RemoteProtocolError
            text = what if isinstance(what, str) else what()
            self.errors.append(cls(f"{text}: {why}", clause=row.clause, expected=f"an event the {table.area} "
                                   f"table allows in {state}", got=f"{event} in {state}"))
        if effect is not None:
            if row.verdict != "illegal":
                self.effects.append(lambda: effect(row))
            elif self.lenient and row.followed is not None:
                followed = Table.followed_row(row)
                self.effects.append(lambda: effect(followed))
        return row

    def error(self, err: ProtocolError) -> None:
        self.errors.append(err)

    def finish(self, socket: str, frames: Sequence[bytes], rank: int | None) -> None:
        """Raise (local misuse, or a peer's violation in strict mode: nothing changes), or record
        the violations (recording mode); then run the effects."""
        if self.errors and not self.lenient:
            if self.local or self.conn.mode == "strict":
                raise self.errors[0]
            for err in self.errors:
                self.conn._record(err, socket, frames, rank)
        for effect in self.effects:
            effect()


class _Connection:
    """What both roles share: the views, the request/utility/scheduler rules, recording."""

    role = ""

    def __init__(self, mode: Mode, codec: Any = None) -> None:
        if mode not in ("strict", "record"):
            raise ValueError(f"mode must be 'strict' or 'record', not {mode!r}")
        self.mode: Mode = mode
        #: the frames' codec: :mod:`ecp.spec.codec` (vLLM 0.33), or a release's
        #: (:func:`ecp.spec.profile.wire_codec`); messages are 0.33's types either way
        self.codec: Any = _codec if codec is None else codec
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
    def _check_input(self, chk: _Checker, view: EngineView, client: int, what: str | Callable[[], str]) -> None:
        chk.step(HANDSHAKE, view.handshake, qualify.input_message(view, client), what)
        chk.step(LIVENESS, view.liveness, _INPUT, what)

    # ------------------------------------------------------------------ shared rules: handshake
    def _on_hello(self, chk: _Checker, view: EngineView, hello: Hello | None, what: str) -> None:
        """A HELLO (``None``: a first message that cannot be read, which stands for one)."""
        def effect(row: Row) -> None:
            view.hello = hello
            if row.next is not None:
                view.handshake = row.next
        chk.step(HANDSHAKE, view.handshake, HandshakeEvent.ENGINE_HELLO, what, effect)

    def _on_ready(self, chk: _Checker, view: EngineView, ready: Ready | None, what: str) -> None:
        def effect(row: Row) -> None:
            view.ready = ready
            if row.next is not None:
                view.handshake = row.next
        chk.step(HANDSHAKE, view.handshake, qualify.ready(view, sender=self.role == "engine"), what, effect)

    def _on_handshake_message(self, chk: _Checker, view: EngineView, msg: Hello | Ready | None, what: str) -> None:
        """A message on the handshake socket, ``None`` if it cannot be read."""
        if isinstance(msg, Ready):
            self._on_ready(chk, view, msg, f"READY{what}")
        else:
            self._on_hello(chk, view, msg, f"HELLO{what}")

    def _on_init(self, chk: _Checker, view: EngineView, init: EngineHandshakeMetadata, what: str,
                 then: Callable[[], None] | None = None) -> None:
        """INIT; ``then``: what the receiving engine keeps besides the view (the message itself)."""
        def effect(row: Row) -> None:
            if row.next is not None:
                view.handshake = row.next
            view.clients = len(init.addresses.inputs)
            view.coordinator = init.addresses.coordinator_input is not None
            if then is not None:
                then()
        chk.step(HANDSHAKE, view.handshake, HandshakeEvent.INIT, what, effect)

    def _on_registration(self, chk: _Checker, view: EngineView, client: int,
                         response: EngineCoreReadyResponse | None, what: str) -> None:
        def effect(row: Row) -> None:
            view.registered.add(client)
            view.responses[client] = response
            if row.next is not None:
                view.handshake = row.next
        chk.step(HANDSHAKE, view.handshake, qualify.registration(view, client), what, effect)

    def _on_engine_dead(self, chk: _Checker, view: EngineView, what: str) -> None:
        def effect(row: Row) -> None:
            if row.next is not None:
                view.liveness = row.next
        chk.step(LIVENESS, view.liveness, LivenessEvent.ENGINE_DEAD, what, effect)

    # ------------------------------------------------------------------ shared rules: requests
    def _on_add(self, chk: _Checker, view: EngineView, rid: str, client: int, key: RequestEvent,
                current_wave: int | None) -> None:
        def effect(row: Row) -> None:
            r = view.request(rid)
            if row.next is None:  # a duplicate in flight: the engine owes one ERROR output
                if r is not None:
                    r.owed_errors += 1
                return
            view.set_request(rid, RequestState(row.next, client, r.owed_errors if r is not None else 0))

        what = lambda: f"ADD {rid!r}"  # noqa: E731 - formatted only for a violation
        chk.step(REQUEST, view.request_state(rid), key, what, effect)
        if current_wave is not None and key is not _ADD_UNDECODABLE:
            def wave_effect(row: Row) -> None:
                view.wave = max(view.wave, current_wave)
                if row.next:
                    view.wave_state = row.next
            chk.step(WAVE, view.wave_state, _WAVE_ADD, what, wave_effect)

    def _on_abort(self, chk: _Checker, view: EngineView, request_ids: Sequence[str]) -> None:
        # one ABORT may name thousands of ids: the legal moves are looked up per state and applied
        # by one effect; anything else goes through the checker, which reports it
        moves: list[tuple[str, RequestStatus]] = []
        others: list[str] = []
        for rid in request_ids:
            r = view.requests.get(rid) or view.closed.get(rid)
            row = ABORT_ROWS[_NONE if r is None else r.state]
            if row.verdict == "legal" and row.next is not None:
                moves.append((rid, row.next))
            else:
                others.append(rid)
        if moves:
            chk.effects.append(lambda: self._move(view, moves))
        for rid in others:
            def effect(row: Row, rid: str = rid) -> None:
                r = view.request(rid)
                if row.next is not None and r is not None:
                    r.state = row.next
                    view.set_request(rid, r)
            chk.step(REQUEST, view.request_state(rid), _ABORT, f"ABORT {rid!r}", effect)

    def _on_utility_call(self, chk: _Checker, view: EngineView, call: UtilityRequest) -> None:
        cid = call.call_id

        def effect(row: Row) -> None:
            if row.next is None and cid in view.calls:
                view.calls[cid].count += 1
            elif row.next is UtilityState.PENDING:
                # refused messages of this id not answered yet may still be answered, each with its failure
                view.calls[cid] = PendingCall(call.method_name, list(call.args), call.client_idx,
                                              count=1 + view.refused.pop(cid, 0))
        chk.step(UTILITY, view.call_state(cid), qualify.call(cid), f"UTILITY {call.method_name} (call_id {cid})",
                 effect)

    def _on_refused_call(self, chk: _Checker, view: EngineView, cid: int) -> None:
        """A UTILITY that failed to decode, whose call id was recovered (``ECP-ROB-1``)."""
        def effect(row: Row) -> None:
            if row.next is UtilityState.REFUSED:
                view.refused[cid] = view.refused.get(cid, 0) + 1
            elif row.next is None and cid in view.calls:  # pending: a failure may answer either message
                view.calls[cid].count += 1
        chk.step(UTILITY, view.call_state(cid), UtilityEvent.CALL_UNDECODABLE,
                 f"undecodable UTILITY (call_id {cid})", effect)

    def _on_start_wave(self, chk: _Checker, view: EngineView, wave: StartDPWave) -> None:
        def effect(row: Row) -> None:
            if row.next is not None:
                view.wave_state = row.next
                view.wave = wave.new_wave
        chk.step(WAVE, view.wave_state, qualify.start_wave(view, wave), f"START_DP_WAVE {wave.new_wave}", effect)

    # ------------------------------------------------------------------ shared rules: outputs
    def _check_outputs(self, chk: _Checker, view: EngineView, client: int, msg: EngineCoreOutputs) -> None:
        where = "the coordinator" if client == COORDINATOR else output_socket(client)
        chk.step(LIVENESS, view.liveness, _OUTPUTS, lambda: f"a message on {where}")
        if client != COORDINATOR and (view.clients is None or not 0 <= client < view.clients):
            chk.step(LIVENESS, view.liveness, LivenessEvent.NO_SUCH_CLIENT, f"a message for client {client}")
        if msg.wave_complete is not None:
            def done(row: Row, w: int = msg.wave_complete) -> None:
                if row.next is not None:
                    view.wave_state = row.next
                    view.wave = max(view.wave, w + 1)
            chk.step(WAVE, view.wave_state, qualify.wave_control(True, client == COORDINATOR),
                     f"wave_complete {msg.wave_complete} on {where}", done)
        if msg.start_wave is not None:
            chk.step(WAVE, view.wave_state, qualify.wave_control(False, client == COORDINATOR),
                     f"start_wave {msg.start_wave} on {where}")
        # effects run after every check passed, so later outputs of one message are judged
        # against the state the earlier ones lead to: (state, owed ERRORs) per id
        outs = msg.outputs
        output_event = qualify.output  # bound once: called per output that changes a request
        running = view.running.get(client)
        tokens = [o.request_id for o in outs if o.finish_reason is None] if running else None
        if tokens and len(tokens) == len(outs) and running.issuperset(tokens):
            # tokens, each for a running request of this client (the _STEADY row: legal, no change)
            outs = ()
        shadow: dict[str, tuple[RequestStatus, int]] = {}
        requests = view.requests
        # legal moves of this client's requests (first tokens, terminal outputs), applied by one effect
        moves: list[tuple[str, RequestStatus]] = []
        for out in outs:
            rid = out.request_id
            r = requests.get(rid)
            # the common case, once per token batch: more tokens for a running request of this
            # client (the _STEADY row: legal, no change), judged without building a check
            if r is not None and out.finish_reason is None and r.state is _RUNNING and rid not in shadow \
                    and (r.client == client or client == COORDINATOR):
                continue
            if r is None:
                r = view.closed.get(rid)
            state, owed = shadow.get(rid) or ((_NONE, 0) if r is None else (r.state, r.owed_errors))
            key = output_event(out.finish_reason, owed)
            if r is not None and (r.client == client or client == COORDINATOR):
                row = REQUEST.step(state, key)
                if row.verdict == "legal" and not row.settles_owed:
                    if row.next is not None and row.next != state:
                        if not moves:
                            chk.effects.append(lambda: self._move(view, moves))
                        moves.append((rid, row.next))
                        state = row.next
                    shadow[rid] = (state, owed)
                    continue

            def effect(row: Row, rid: str = rid) -> None:
                cur = view.request(rid)
                if cur is None:
                    return
                if row.settles_owed:
                    cur.owed_errors -= 1
                if row.next is not None:
                    cur.state = row.next
                    view.set_request(rid, cur)
            row = chk.step(REQUEST, state, key, lambda rid=rid: f"output for {rid!r} on {where}", effect)
            if row.verdict != "illegal":
                if row.settles_owed:
                    owed -= 1
                if row.next is not None:
                    state = row.next
            shadow[rid] = (state, owed)
            if r is not None and client != COORDINATOR and r.client != client and r.state not in CLOSED_STATES \
                    and self._routable(view, r.client):
                chk.step(LIVENESS, view.liveness, _FOREIGN_CLIENT,
                         f"output for {rid!r} (client {r.client}) on {where}")
        if msg.utility_output is not None:
            self._check_reply(chk, view, client, msg, where)

    @staticmethod
    def _move(view: EngineView, moves: list[tuple[str, RequestStatus]]) -> None:
        for rid, nxt in moves:
            r = view.request(rid)
            if r is not None:
                r.state = nxt
                view.set_request(rid, r)

    @staticmethod
    def _routable(view: EngineView, client: int) -> bool:
        """Whether ``client`` has an output socket; an engine may answer a request or call whose
        ``client_index`` has none wherever it can (``ECP-ROB-4``)."""
        return view.clients is not None and 0 <= client < view.clients

    def _check_reply(self, chk: _Checker, view: EngineView, client: int, msg: EngineCoreOutputs, where: str) -> None:
        uo = msg.utility_output
        cid = uo.call_id
        call = view.calls.get(cid) if cid not in RESERVED_CALL_IDS else None

        state = UtilityState.PENDING if call is not None else (
            UtilityState.REFUSED if cid in view.refused and cid not in RESERVED_CALL_IDS else UtilityState.NONE)

        def effect(row: Row) -> None:
            if row.next is UtilityState.NONE and cid in view.calls:
                view.calls[cid].count -= 1
                if view.calls[cid].count <= 0:
                    del view.calls[cid]
            elif row.next is UtilityState.NONE and cid in view.refused:
                view.refused[cid] -= 1
                if view.refused[cid] <= 0:
                    del view.refused[cid]
        what = f"utility reply (call_id {cid}) on {where}"
        chk.step(UTILITY, state, qualify.reply(uo), what, effect)
        if call is None:
            return
        if call.client != client and self._routable(view, call.client):
            chk.step(LIVENESS, view.liveness, _FOREIGN_CLIENT,
                     f"{what}: the call named client {call.client}")
        if uo.failure_message is not None or uo.result is None:
            return
        value = uo.result.value
        skey = qualify.scheduler_reply(view, call, value)
        if skey is not None:
            def sched(row: Row) -> None:
                if row.next is not None:
                    view.scheduler = row.next
            chk.step(SCHEDULER, view.scheduler, skey, f"{what}: {call.method} -> {value!r}", sched)
