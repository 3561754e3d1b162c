"""What the two protocol machines share (:class:`~.frontend.FrontendConnection`,
:class:`~.engine.EngineConnection`): the view of an engine, the rules of requests, utility
calls, sleep/pause and waves, and recording.

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

from ..control import StartDPWave, UtilityRequest
from ..enums import EEP_NOTIFICATION_CALL_ID, FT_STATUS_CALL_ID, FinishReason
from ..errors import HandshakeError, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..handshake import EngineCoreReadyResponse, Hello, Ready, engine_identity
from ..outputs import EngineCoreOutputs
from .events import COORDINATOR, output_socket
from .table import HANDSHAKE, LIVENESS, REQUEST, SCHEDULER, UTILITY, WAVE, Row, Table

Mode = Literal["strict", "record"]

RESERVED_CALL_IDS = frozenset((EEP_NOTIFICATION_CALL_ID, FT_STATUS_CALL_ID))
#: request states after which the frontend no longer waits for anything
CLOSED_STATES = frozenset(("FINISHED", "ABORTED", "REJECTED", "INVALID"))
#: request states in which a second ADD of the id is a duplicate (``ECP-REQ-8``: the REQUEST
#: table's rows where an ADD leaves the state unchanged)
IN_FLIGHT_STATES = frozenset(r_state for row in REQUEST.rows if row.event == "Add" and row.next is None
                             for r_state in row.states)
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

    def request_state(self, rid: str) -> str:
        r = self.request(rid)
        return "NONE" if r is None else r.state

    def set_request(self, rid: str, r: RequestState) -> None:
        """Every change of a request's state goes through here."""
        old = self.requests.get(rid)
        if old is not None and old.client != r.client and old.client in self.running:
            self.running[old.client].discard(rid)
        if r.state == "RUNNING":
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
ABORT_ROWS = {state: REQUEST.step(state, "Abort") for state in REQUEST.states}

#: the row the outputs check takes without a lookup (tokens for a running request)
_STEADY = REQUEST.step("RUNNING", "Output(tokens)")
if _STEADY.verdict != "legal" or _STEADY.next != "RUNNING":
    raise ImportError("the outputs fast path of _check_outputs no longer matches the REQUEST table")


class _Checker:
    """Collects the rows one message touches; raises or records before any effect runs."""

    def __init__(self, conn: "_Connection", local: bool, lenient: bool = False) -> None:
        self.conn, self.local, self.lenient = conn, local, lenient
        self.errors: list[ProtocolError] = []
        self.effects: list[Effect] = []

    def step(self, table: Table, state: str, event: str, what: str | Callable[[], str],
             effect: Callable[[Row], None] | None = None) -> Row:
        """Look the row up; note its violation (``what``: the message, or a callable making it only
        when needed) and queue its effect."""
        row = table.step(state, event)
        bad = row.verdict == "illegal" or (row.verdict == "tolerated" and self.local)
        if bad and not self.lenient:
            why = row.note or f"{event} is not allowed in state {state}"
            cls = LocalProtocolError if self.local else HandshakeError if table is HANDSHAKE else RemoteProtocolError
            text = what if isinstance(what, str) else what()
            self.errors.append(cls(f"{text}: {why}", clause=row.clause, expected=f"an event the {table.area} "
                                   f"table allows in {state}", got=f"{event} in {state}"))
        if effect is not None and (row.verdict != "illegal" or self.lenient):
            self.effects.append(lambda: effect(row))
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
    def _check_input(self, chk: _Checker, view: EngineView, client: int, what: str | Callable[[], str]) -> None:
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

        what = lambda: f"ADD {rid!r}"  # noqa: E731 - formatted only for a violation
        chk.step(REQUEST, view.request_state(rid), key, what, effect)
        if current_wave is not None and key != "Add(undecodable)":
            def wave_effect(row: Row) -> None:
                view.wave = max(view.wave, current_wave)
                if row.next:
                    view.wave_state = row.next
            chk.step(WAVE, view.wave_state, "Add", what, wave_effect)

    def _on_abort(self, chk: _Checker, view: EngineView, request_ids: Sequence[str]) -> None:
        # one ABORT may name thousands of ids: the legal moves are looked up per state and applied
        # by one effect; anything else goes through the checker, which reports it
        moves: list[tuple[str, str]] = []
        others: list[str] = []
        for rid in request_ids:
            r = view.requests.get(rid) or view.closed.get(rid)
            row = ABORT_ROWS["NONE" if r is None else r.state]
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
        where = "the coordinator" if client == COORDINATOR else output_socket(client)
        chk.step(LIVENESS, view.liveness, "Outputs", lambda: f"a message on {where}")
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
        outs = msg.outputs
        running = view.running.get(client)
        tokens = [o.request_id for o in outs if o.finish_reason is None] if running else None
        if tokens and len(tokens) == len(outs) and running.issuperset(tokens):
            # tokens, each for a running request of this client (the _STEADY row: legal, no change)
            outs = ()
        shadow: dict[str, tuple[str, int]] = {}
        requests = view.requests
        # legal moves of this client's requests (first tokens, terminal outputs), applied by one effect
        moves: list[tuple[str, str]] = []
        for out in outs:
            rid = out.request_id
            r = requests.get(rid)
            # the common case, once per token batch: more tokens for a running request of this
            # client (the _STEADY row: legal, no change), judged without building a check
            if r is not None and out.finish_reason is None and r.state == "RUNNING" and rid not in shadow \
                    and (r.client == client or client == COORDINATOR):
                continue
            if r is None:
                r = view.closed.get(rid)
            state, owed = shadow.get(rid) or (("NONE", 0) if r is None else (r.state, r.owed_errors))
            if out.finish_reason is None:
                key = "Output(tokens)"
            elif out.finish_reason == FinishReason.ERROR:
                key = "Output(owed ERROR)" if owed else "Output(terminal ERROR)"
            else:
                key = "Output(terminal)"
            if r is not None and (r.client == client or client == COORDINATOR) and key != "Output(owed ERROR)":
                row = REQUEST.step(state, key)
                if row.verdict == "legal":
                    if row.next is not None and row.next != state:
                        if not moves:
                            chk.effects.append(lambda: self._move(view, moves))
                        moves.append((rid, row.next))
                        state = row.next
                    shadow[rid] = (state, owed)
                    continue

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
            row = chk.step(REQUEST, state, key, lambda rid=rid: f"output for {rid!r} on {where}", effect)
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
    def _move(view: EngineView, moves: list[tuple[str, str]]) -> None:
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
