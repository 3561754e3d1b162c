"""The transition tables: every rule of the protocol machines, as data.

Everything that affects a machine's state lives here, one table per area
(as h11 keeps its machine in one place). A row says: in these states, this
event (qualified by what the machine can see, e.g. ``Output(terminal)``)
leads to that state, and is

* ``legal`` -- either side may do it;
* ``tolerated`` -- a conforming sender never does it (the sender's machine
  raises :class:`~ecp.spec.errors.LocalProtocolError` naming the clause), but
  the receiver handles it as the clause says (e.g. a duplicate ADD is answered
  with one ERROR output, ``ECP-REQ-2``);
* ``illegal`` -- the sender's machine raises ``LocalProtocolError``, the
  receiver's raises (or, in recording mode, records)
  :class:`~ecp.spec.errors.RemoteProtocolError`, both naming the clause. Such a
  row changes nothing, except where it names ``followed``: the state a machine
  moves to when it follows the frames anyway (``send_raw``, a peer misbehaving
  on purpose).

Keys are typed, as python-hyper h2 keys its machine by ``ConnectionState`` x
``ConnectionInputs``: each table has an enum of its states (a :class:`State`,
``str``-valued, so ``view.handshake == "READY"`` holds) and one of its
qualified events (a :class:`QualifiedEvent`, compared by identity). A row that
names a state or an event of another table, or of none, fails when this module
is imported; so does a lookup with a key that is no member of the table's
enums (:meth:`Table.step`). Every table also says on purpose what a pair
without a row means (``unlisted``, with its reason), and
``spec/PROTOCOL.md`` renders all of it (section 13) through
:func:`render_table`, so the prose cannot drift from the machine. Which
qualified event a message is, given what a machine sees, is decided in
:mod:`.qualify`, once for both roles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Generic, Literal, TypeVar

Verdict = Literal["legal", "tolerated", "illegal"]
Unlisted = Literal["ignore", "illegal"]

#: a row's state that stands for every state of its table
ANY = "*"

_VERDICTS = ("legal", "tolerated", "illegal")
E, F, C = "engine", "frontend", "coordinator"


class State(str, Enum):
    """A state of one table. ``str``-valued (value = name), so it compares and hashes like its
    name and prints as it: code that reads ``view.handshake == "READY"`` keeps working."""

    __str__ = str.__str__
    __format__ = str.__format__


class QualifiedEvent(Enum):
    """An event of one table, qualified by what the machine can see (``EngineReady(inputs
    missing)``). Compared by identity: a string, or another table's event, is never one."""

    __hash__ = object.__hash__  # a C-level hash: lookups run once per message

    def __str__(self) -> str:
        return self.value


S = TypeVar("S", bound=State)
V = TypeVar("V", bound=QualifiedEvent)


class TableError(TypeError):
    """A table (or a lookup in it) names a state or an event that is not its own: a bug in the
    spec itself, raised when the module that holds the row is imported."""


@dataclass(frozen=True)
class Row:
    """One transition: ``states`` × ``event`` → ``next`` (``None``: unchanged). ``followed``
    (illegal rows only): where a machine goes that follows the frames anyway (``send_raw``)."""

    states: tuple[State | str, ...]
    event: QualifiedEvent
    sender: str
    next: State | None
    verdict: Verdict
    clause: str
    note: str = ""
    followed: State | None = None
    #: request outputs only: the output takes the place of one ERROR the engine owed for a duplicate ADD
    settles_owed: bool = False


@dataclass(frozen=True, kw_only=True)
class Table(Generic[S, V]):
    """The transitions of one area, keyed by its ``states`` × ``events`` enums. A pair without a
    row is ``unlisted``: legal and unchanged (``"ignore"``) or illegal under ``unlisted_clause``;
    ``unlisted_why`` says why that is the right reading for this area (PROTOCOL.md prints it)."""

    area: str
    title: str
    scope: str
    states: type[S]
    events: type[V]
    initial: S
    rows: tuple[Row, ...]
    unlisted: Unlisted
    unlisted_clause: str
    unlisted_why: str

    def __post_init__(self) -> None:
        def fail(what: str) -> TableError:
            return TableError(f"the {self.area} table: {what}")

        if not isinstance(self.initial, self.states):
            raise fail(f"initial state {self.initial!r} is not a {self.states.__name__}")
        if self.unlisted not in ("ignore", "illegal") or not self.unlisted_clause or not self.unlisted_why:
            raise fail("say what an unlisted pair means: unlisted ('ignore' or 'illegal'), its clause and why")
        index: dict[tuple[State | str, QualifiedEvent], Row] = {}
        for row in self.rows:
            if not isinstance(row.event, self.events):
                raise fail(f"row event {row.event!r} is not a {self.events.__name__}")
            for state in (*row.states, row.next, row.followed):
                if state is not None and state is not ANY and not isinstance(state, self.states):
                    raise fail(f"row {row.event} names {state!r}, not a {self.states.__name__}")
            if not row.states or row.verdict not in _VERDICTS or row.sender not in (E, F, C):
                raise fail(f"row {row.event}: no states, or an unknown verdict or sender")
            if row.followed is not None and row.verdict != "illegal":
                raise fail(f"row {row.event}: only an illegal row says where it is followed to")
            for state in row.states:
                key = (state, row.event)
                if key in index:
                    raise fail(f"two rows for {state} × {row.event}")
                index[key] = row
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_unlisted", {})

    def step(self, state: S, event: V) -> Row:
        """The row for ``event`` in ``state`` (a state's own row wins over a ``*`` row).

        :class:`TableError` if either is not of this table (a pair without a row is unlisted)."""
        index: dict[tuple[State | str, QualifiedEvent], Row] = self._index  # type: ignore[attr-defined]
        row = index.get((state, event)) or index.get((ANY, event))
        if row is not None:
            return row
        # an unlisted pair: made once, then found like a listed one (the outputs check asks per message)
        unlisted: dict[tuple[State, QualifiedEvent], Row] = self._unlisted  # type: ignore[attr-defined]
        row = unlisted.get((state, event))
        if row is None:
            if not isinstance(state, self.states) or not isinstance(event, self.events):
                raise TableError(f"the {self.area} table has no state {state!r} or no event {event!r}")
            if self.unlisted == "ignore":
                row = Row((state,), event, "", None, "legal", self.unlisted_clause, "no effect")
            else:
                row = Row((state,), event, "", None, "illegal", self.unlisted_clause,
                          f"{event} is not allowed in {state}")
            unlisted[(state, event)] = row  # bounded: at most |states| × |events| pairs
        return row

    @staticmethod
    def followed_row(row: Row) -> Row:
        """``row`` as a machine that follows the frames anyway applies it (``next`` = ``followed``)."""
        return replace(row, next=row.followed)


def _r(states: State | str | tuple[State, ...], event: QualifiedEvent, sender: str, next: State | None,
       verdict: Verdict, clause: str, note: str = "", *, followed: State | None = None,
       settles_owed: bool = False) -> Row:
    return Row(states if isinstance(states, tuple) else (states,), event, sender, next, verdict, clause, note,
               followed, settles_owed)


# ------------------------------------------------------------------------------ handshake
class HandshakeState(State):
    START = "START"
    HELLO = "HELLO"
    REGISTERING = "REGISTERING"
    SUBSCRIBED = "SUBSCRIBED"
    GATED = "GATED"
    READY = "READY"


class HandshakeEvent(QualifiedEvent):
    ENGINE_HELLO = "EngineHello"
    INIT = "Init"
    #: a ready payload before INIT
    REGISTRATION = "Registration"
    REGISTRATION_NEW = "Registration(new input)"
    REGISTRATION_REPEATED = "Registration(registered input)"
    #: a subscription outside REGISTERING (no row: unlisted)
    SUBSCRIBE = "CoordinatorSubscribe"
    SUBSCRIBE_ALL_REGISTERED = "CoordinatorSubscribe(all registered)"
    SUBSCRIBE_INPUTS_MISSING = "CoordinatorSubscribe(inputs missing)"
    COORDINATOR_READY = "CoordinatorReady"
    #: READY outside REGISTERING, SUBSCRIBED and GATED
    ENGINE_READY = "EngineReady"
    READY_GATE_PASSED = "EngineReady(registered, gate passed)"
    READY_INPUTS_MISSING = "EngineReady(inputs missing)"
    READY_INPUTS_UNSEEN = "EngineReady(inputs unseen)"
    READY_GATE_CLOSED = "EngineReady(gate closed)"
    INPUT_REGISTERED = "Input(registered input)"
    INPUT_UNREGISTERED = "Input(unregistered input)"


_H, _HE = HandshakeState, HandshakeEvent
_AFTER_HELLO = (_H.HELLO, _H.REGISTERING, _H.SUBSCRIBED, _H.GATED, _H.READY)
_AFTER_INIT = (_H.REGISTERING, _H.SUBSCRIBED, _H.GATED, _H.READY)
HANDSHAKE: Table[HandshakeState, HandshakeEvent] = Table(
    area="handshake", title="Startup handshake", scope="per engine",
    states=HandshakeState, events=HandshakeEvent, initial=_H.START,
    unlisted="illegal", unlisted_clause="ECP-HS-7",
    unlisted_why="the handshake is one fixed order of messages, and every step it allows has a row",
    rows=(
        _r(_H.START, _HE.ENGINE_HELLO, E, _H.HELLO, "legal", "ECP-HS-1"),
        _r(_AFTER_HELLO, _HE.ENGINE_HELLO, E, None, "illegal", "ECP-HS-7", "duplicate HELLO"),
        _r(_H.HELLO, _HE.INIT, F, _H.REGISTERING, "legal", "ECP-HS-2"),
        _r(_H.START, _HE.INIT, F, None, "illegal", "ECP-HS-2", "INIT answers a HELLO",
           followed=_H.REGISTERING),
        _r(_AFTER_INIT, _HE.INIT, F, None, "illegal", "ECP-HS-7", "a second INIT"),
        _r(_H.START, _HE.REGISTRATION, E, None, "illegal", "ECP-HS-7",
           "registration before its HELLO (a bootstrapped frontend starts in REGISTERING)"),
        _r(_H.HELLO, _HE.REGISTRATION, E, None, "illegal", "ECP-HS-7", "registration before INIT"),
        _r(_H.REGISTERING, _HE.REGISTRATION_NEW, E, _H.REGISTERING, "legal", "ECP-HS-3",
           "the engine becomes addressable on that input"),
        _r(_AFTER_INIT, _HE.REGISTRATION_REPEATED, E, None, "illegal",
           "ECP-HS-11", "duplicate registration on one input"),
        _r(_H.REGISTERING, _HE.SUBSCRIBE_ALL_REGISTERED, E, _H.SUBSCRIBED, "legal", "ECP-HS-6",
           "only when INIT names a coordinator"),
        _r(_H.REGISTERING, _HE.SUBSCRIBE_INPUTS_MISSING, E, None, "illegal", "ECP-HS-6",
           "subscribe after the ready payloads", followed=_H.SUBSCRIBED),
        _r(_H.SUBSCRIBED, _HE.COORDINATOR_READY, C, _H.GATED, "legal", "ECP-HS-6"),
        _r((_H.GATED, _H.READY), _HE.COORDINATOR_READY, C, None, "legal", "ECP-HS-6",
           "a repeated gate frame is ignored"),
        _r((_H.START, _H.HELLO, _H.REGISTERING), _HE.COORDINATOR_READY, C, None, "illegal", "ECP-HS-6",
           "the gate opens only after every engine subscribed"),
        _r(_H.REGISTERING, _HE.READY_GATE_PASSED, E, _H.READY, "legal", "ECP-HS-5",
           "gate passed: INIT names no coordinator, or the coordinator published READY"),
        _r(_H.GATED, _HE.READY_GATE_PASSED, E, _H.READY, "legal", "ECP-HS-5"),
        _r(_H.REGISTERING, _HE.READY_INPUTS_MISSING, E, None, "illegal", "ECP-HS-5",
           "READY before the ready payload went out on every input", followed=_H.READY),
        _r((_H.REGISTERING, _H.SUBSCRIBED), _HE.READY_GATE_CLOSED, E, None, "illegal", "ECP-HS-6",
           "READY before the coordinator's READY", followed=_H.READY),
        _r(_H.REGISTERING, _HE.READY_INPUTS_UNSEEN, E, _H.READY, "legal", "ECP-HS-5",
           "at a frontend: the ready payload may still wait on its input socket (sockets are not ordered)"),
        _r(_H.READY, _HE.REGISTRATION_NEW, E, None, "legal", "ECP-HS-3", "as above"),
        _r(_H.START, _HE.ENGINE_READY, E, None, "illegal", "ECP-HS-7", "READY before HELLO", followed=_H.READY),
        _r(_H.HELLO, _HE.ENGINE_READY, E, None, "illegal", "ECP-HS-7", "READY before INIT", followed=_H.READY),
        _r(_AFTER_INIT, _HE.INPUT_REGISTERED, F, None, "legal", "ECP-SOCK-1",
           "a ROUTER can address an engine once it registered on that input"),
        _r(ANY, _HE.INPUT_UNREGISTERED, F, None, "illegal", "ECP-HS-3",
           "nothing can be sent to an engine on an input it has not registered on"),
        _r(_H.READY, _HE.ENGINE_READY, E, None, "illegal", "ECP-HS-7", "duplicate READY"),
    ),
)


# ------------------------------------------------------------------------------ requests
class RequestStatus(State):
    """The REQUEST table's states (a view keeps one per id in a ``RequestState`` record)."""

    NONE = "NONE"
    ADDED = "ADDED"
    RUNNING = "RUNNING"
    PAUSED_ADD = "PAUSED_ADD"
    REJECTED = "REJECTED"
    INVALID = "INVALID"
    ABORTED = "ABORTED"
    FINISHED = "FINISHED"


class RequestEvent(QualifiedEvent):
    ADD = "Add"
    ADD_ABORT_IMMEDIATELY = "Add(abort_immediately)"
    ADD_WHILE_REJECTING = "Add(while rejecting)"
    ADD_UNDECODABLE = "Add(undecodable)"
    ABORT = "Abort"
    OUTPUT_TOKENS = "Output(tokens)"
    OUTPUT_TERMINAL = "Output(terminal)"
    OUTPUT_TERMINAL_ERROR = "Output(terminal ERROR)"
    OUTPUT_OWED_ERROR = "Output(owed ERROR)"
    OUTPUT_TOKENS_OWED = "Output(tokens, ERROR owed)"
    OUTPUT_TERMINAL_OWED = "Output(terminal, ERROR owed)"


_Q, _QE = RequestStatus, RequestEvent
_IN_FLIGHT = (_Q.ADDED, _Q.RUNNING)
_DUPLICATE = (*_IN_FLIGHT, _Q.PAUSED_ADD)
_REUSABLE = (_Q.NONE, _Q.FINISHED, _Q.ABORTED, _Q.REJECTED, _Q.INVALID)
_REUSABLE_VALID = tuple(state for state in _REUSABLE if state is not _Q.INVALID)
REQUEST: Table[RequestStatus, RequestEvent] = Table(
    area="request", title="Request lifecycle", scope="per request id, at the engine that owns it",
    states=RequestStatus, events=RequestEvent, initial=_Q.NONE,
    unlisted="illegal", unlisted_clause="ECP-OUT-1",
    unlisted_why="every ADD and ABORT has a row in every state, so an unlisted pair is an output the "
    "request's state does not allow",
    rows=(
        _r(_REUSABLE, _QE.ADD, F, _Q.ADDED, "legal", "ECP-REQ-1",
           "an id may be reused once it is no longer in flight"),
        _r(_REUSABLE, _QE.ADD_ABORT_IMMEDIATELY, F, _Q.REJECTED, "legal", "ECP-REJECT-1",
           "a rejection notice: admitted and aborted at once, passes a pause (ECP-REJECT-5)"),
        _r(_REUSABLE, _QE.ADD_WHILE_REJECTING, F, _Q.PAUSED_ADD, "legal", "ECP-REQ-7",
           "sent after a pause_generation (mode abort or wait) was answered"),
        _r(_REUSABLE_VALID, _QE.ADD_UNDECODABLE, F, _Q.INVALID, "tolerated", "ECP-ROB-1",
           "only raw frames; the id was recovered from the payload"),
        _r(_Q.INVALID, _QE.ADD_UNDECODABLE, F, None, "tolerated", "ECP-ROB-2",
           "another undecodable ADD of an id not answered yet: the engine may answer each, so one more "
           "ERROR output is owed"),
        _r(_DUPLICATE, _QE.ADD, F, None, "tolerated", "ECP-REQ-8",
           "duplicate id in flight: the engine owes one ERROR output (ECP-REQ-2), the running request "
           "is unaffected"),
        _r(_DUPLICATE, _QE.ADD_ABORT_IMMEDIATELY, F, None, "tolerated", "ECP-REQ-8", "as above"),
        _r(_DUPLICATE, _QE.ADD_WHILE_REJECTING, F, None, "tolerated", "ECP-REQ-8", "as above"),
        _r(_DUPLICATE, _QE.ADD_UNDECODABLE, F, None, "tolerated", "ECP-REQ-8", "as above"),
        _r(_IN_FLIGHT, _QE.OUTPUT_TOKENS, E, _Q.RUNNING, "legal", "ECP-OUT-3"),
        _r(_IN_FLIGHT, _QE.OUTPUT_TERMINAL, E, _Q.FINISHED, "legal", "ECP-OUT-1",
           "exactly one terminal output; ABORT for an engine-initiated abort (ECP-ABORT-9)"),
        _r(_IN_FLIGHT, _QE.OUTPUT_TERMINAL_ERROR, E, _Q.FINISHED, "legal", "ECP-REQ-3",
           "an ADD answered with ERROR (invalid parameters, ECP-OUT-5)"),
        _r((*_DUPLICATE, _Q.REJECTED, _Q.INVALID, _Q.FINISHED), _QE.OUTPUT_OWED_ERROR, E, None, "legal",
           "ECP-REQ-2", "the ERROR answer to a duplicate ADD", settles_owed=True),
        # a duplicate ADD owes an ERROR only if it reaches the engine while the id is in flight there:
        # one sent before the frontend read the original's terminal output may arrive after it ended
        _r(_IN_FLIGHT, _QE.OUTPUT_TOKENS_OWED, E, _Q.RUNNING, "legal", "ECP-OUT-3"),
        _r(_IN_FLIGHT, _QE.OUTPUT_TERMINAL_OWED, E, _Q.FINISHED, "legal", "ECP-OUT-1",
           "the original's terminal output: the ERROR for the duplicate is still owed"),
        _r(_Q.FINISHED, _QE.OUTPUT_TOKENS_OWED, E, _Q.RUNNING, "legal", "ECP-REQ-2",
           "the duplicate reached the engine after the original ended there: it runs as a new request, "
           "answered with outputs instead of the ERROR", settles_owed=True),
        _r(_Q.FINISHED, _QE.OUTPUT_TERMINAL_OWED, E, None, "legal", "ECP-REQ-2",
           "as above, a new request that ended with its first output", settles_owed=True),
        _r(_Q.PAUSED_ADD, _QE.OUTPUT_TERMINAL_ERROR, E, _Q.FINISHED, "legal", "ECP-REQ-7",
           "code engine_paused, retryable"),
        _r(_Q.PAUSED_ADD, _QE.OUTPUT_TOKENS, E, None, "illegal", "ECP-REQ-7", "a paused engine ran a new request"),
        _r(_Q.PAUSED_ADD, _QE.OUTPUT_TOKENS_OWED, E, None, "illegal", "ECP-REQ-7", "as above"),
        _r(_Q.PAUSED_ADD, _QE.OUTPUT_TERMINAL, E, None, "illegal", "ECP-REQ-7",
           "a new request during a pause ends with ERROR engine_paused"),
        _r(_Q.PAUSED_ADD, _QE.OUTPUT_TERMINAL_OWED, E, None, "illegal", "ECP-REQ-7", "as above"),
        _r(_Q.REJECTED, _QE.OUTPUT_TERMINAL_ERROR, E, _Q.FINISHED, "legal", "ECP-REQ-3",
           "an invalid notice may still be answered with ERROR"),
        _r(_Q.REJECTED, _QE.OUTPUT_TOKENS, E, None, "illegal", "ECP-REJECT-1", "abort_immediately never runs"),
        _r(_Q.REJECTED, _QE.OUTPUT_TOKENS_OWED, E, None, "illegal", "ECP-REJECT-1", "as above"),
        _r(_Q.REJECTED, _QE.OUTPUT_TERMINAL, E, None, "illegal", "ECP-REJECT-1", "no output is emitted for it"),
        _r(_Q.REJECTED, _QE.OUTPUT_TERMINAL_OWED, E, None, "illegal", "ECP-REJECT-1", "as above"),
        _r(_Q.INVALID, _QE.OUTPUT_TERMINAL_ERROR, E, _Q.FINISHED, "legal", "ECP-ROB-2"),
        _r(_Q.INVALID, _QE.OUTPUT_TOKENS, E, None, "illegal", "ECP-ROB-1", "an undecodable ADD never runs"),
        _r(_Q.INVALID, _QE.OUTPUT_TOKENS_OWED, E, None, "illegal", "ECP-ROB-1", "as above"),
        _r(_Q.INVALID, _QE.OUTPUT_TERMINAL, E, None, "illegal", "ECP-ROB-2", "it is answered with ERROR"),
        _r(_Q.INVALID, _QE.OUTPUT_TERMINAL_OWED, E, None, "illegal", "ECP-ROB-2", "as above"),
        _r((*_DUPLICATE, _Q.REJECTED, _Q.INVALID), _QE.ABORT, F, _Q.ABORTED, "legal", "ECP-ABORT-2"),
        _r(_Q.ABORTED, _QE.OUTPUT_TOKENS, E, None, "legal", "ECP-ABORT-4",
           "late outputs of an aborted request are tolerated and dropped (ECP-OUT-9)"),
        _r(_Q.ABORTED, _QE.OUTPUT_TERMINAL, E, None, "legal", "ECP-ABORT-4"),
        _r(_Q.ABORTED, _QE.OUTPUT_TERMINAL_ERROR, E, None, "legal", "ECP-ABORT-4"),
        _r(_Q.ABORTED, _QE.OUTPUT_OWED_ERROR, E, None, "legal", "ECP-ABORT-4", settles_owed=True),
        _r(_Q.ABORTED, _QE.OUTPUT_TOKENS_OWED, E, None, "legal", "ECP-ABORT-4"),
        _r(_Q.ABORTED, _QE.OUTPUT_TERMINAL_OWED, E, None, "legal", "ECP-ABORT-4"),
        _r((_Q.NONE, _Q.FINISHED, _Q.ABORTED), _QE.ABORT, F, None, "tolerated", "ECP-ABORT-6",
           "the engine ignores it (ECP-ABORT-3); a frontend never sends ids it does not know"),
        _r(_Q.NONE, _QE.OUTPUT_TOKENS, E, None, "illegal", "ECP-OUT-1", "an output for an id never added"),
        _r(_Q.NONE, _QE.OUTPUT_TERMINAL, E, None, "illegal", "ECP-OUT-1", "an output for an id never added"),
        _r(_Q.NONE, _QE.OUTPUT_TERMINAL_ERROR, E, None, "illegal", "ECP-OUT-1", "an output for an id never added"),
        _r(_Q.FINISHED, _QE.OUTPUT_TOKENS, E, None, "illegal", "ECP-OUT-1", "an output after the terminal output"),
        _r(_Q.FINISHED, _QE.OUTPUT_TERMINAL, E, None, "illegal", "ECP-OUT-1", "a second terminal output"),
        _r(_Q.FINISHED, _QE.OUTPUT_TERMINAL_ERROR, E, None, "illegal", "ECP-OUT-1", "a second terminal output"),
    ),
)


# ------------------------------------------------------------------------------ utility calls
class UtilityState(State):
    NONE = "NONE"
    PENDING = "PENDING"
    REFUSED = "REFUSED"


class UtilityEvent(QualifiedEvent):
    CALL = "UtilityCall"
    CALL_RESERVED_ID = "UtilityCall(reserved id)"
    CALL_UNDECODABLE = "UtilityCall(undecodable)"
    REPLY_RESULT = "Reply(result)"
    REPLY_FAILURE = "Reply(failure)"
    REPLY_NO_ENVELOPE = "Reply(no envelope)"
    REPLY_RESERVED_ID = "Reply(reserved id)"


_U, _UE = UtilityState, UtilityEvent
UTILITY: Table[UtilityState, UtilityEvent] = Table(
    area="utility", title="Utility calls", scope="per engine and call id",
    states=UtilityState, events=UtilityEvent, initial=_U.NONE,
    unlisted="illegal", unlisted_clause="ECP-UTIL-1",
    unlisted_why="every pair has a row; a new event must get its rows before it can be allowed",
    rows=(
        _r(_U.NONE, _UE.CALL, F, _U.PENDING, "legal", "ECP-UTIL-1", "call_id is a u64, echoed verbatim"),
        _r(_U.PENDING, _UE.CALL, F, None, "tolerated", "ECP-UTIL-1",
           "the call id is already pending: the engine answers each call"),
        _r(_U.REFUSED, _UE.CALL, F, _U.PENDING, "legal", "ECP-UTIL-1", "a new call may reuse a refused call's id"),
        _r((_U.NONE, _U.PENDING, _U.REFUSED), _UE.CALL_RESERVED_ID, F, None, "illegal", "ECP-UTIL-12",
           "ids -1 and -2 are the engine's notices"),
        _r((_U.NONE, _U.REFUSED), _UE.CALL_UNDECODABLE, F, _U.REFUSED, "tolerated", "ECP-ROB-1",
           "only raw frames; the call id was recovered from the payload: the engine may answer it with "
           "failure_message or drop it (each such message of one id may be answered)"),
        _r(_U.PENDING, _UE.CALL_UNDECODABLE, F, None, "tolerated", "ECP-ROB-1",
           "the call id is pending: one more reply is allowed, a failure may answer either message"),
        _r(_U.REFUSED, _UE.REPLY_FAILURE, E, _U.NONE, "legal", "ECP-ROB-1", "a refused call answered with its failure"),
        _r(_U.REFUSED, _UE.REPLY_RESULT, E, None, "illegal", "ECP-ROB-1", "a refused call was answered with a result"),
        _r(_U.REFUSED, _UE.REPLY_NO_ENVELOPE, E, None, "illegal", "ECP-UTIL-2",
           "neither failure_message nor a result envelope"),
        _r(_U.PENDING, _UE.REPLY_RESULT, E, _U.NONE, "legal", "ECP-UTIL-2", "result = [type_info, value]"),
        _r(_U.PENDING, _UE.REPLY_FAILURE, E, _U.NONE, "legal", "ECP-UTIL-3", "failure_message, result nil"),
        _r(_U.PENDING, _UE.REPLY_NO_ENVELOPE, E, None, "illegal", "ECP-UTIL-2",
           "neither failure_message nor a result envelope"),
        _r((_U.NONE, _U.PENDING, _U.REFUSED), _UE.REPLY_RESERVED_ID, E, None, "legal", "ECP-UTIL-12",
           "an engine-initiated notice; a client that did not ask drops it"),
        _r(_U.NONE, _UE.REPLY_RESULT, E, None, "illegal", "ECP-UTIL-1", "a reply to a call id never sent"),
        _r(_U.NONE, _UE.REPLY_FAILURE, E, None, "illegal", "ECP-UTIL-1", "a reply to a call id never sent"),
        _r(_U.NONE, _UE.REPLY_NO_ENVELOPE, E, None, "illegal", "ECP-UTIL-1", "a reply to a call id never sent"),
    ),
)


# ------------------------------------------------------------------------------ sleep / pause
class SchedulerState(State):
    AWAKE = "AWAKE"
    PAUSED = "PAUSED"
    REJECTING = "REJECTING"
    SLEEPING = "SLEEPING"
    SLEEPING_REJECTING = "SLEEPING_REJECTING"


class SchedulerEvent(QualifiedEvent):
    SLEEP_OK = "Reply(sleep: ok)"
    WAKE_UP_TRUE = "Reply(wake_up: true)"
    WAKE_UP_FALSE = "Reply(wake_up: false)"
    PAUSE_REJECTING_OK = "Reply(pause_generation abort|wait: ok)"
    PAUSE_KEEP_OK = "Reply(pause_generation keep: ok)"
    PAUSE_OK = "Reply(pause_scheduler: ok)"
    RESUME_OK = "Reply(resume_scheduler: ok)"
    IS_SLEEPING_TRUE = "Reply(is_sleeping: true)"
    IS_SLEEPING_FALSE = "Reply(is_sleeping: false)"


_Z, _ZE = SchedulerState, SchedulerEvent
_ASLEEP = (_Z.SLEEPING, _Z.SLEEPING_REJECTING)
SCHEDULER: Table[SchedulerState, SchedulerEvent] = Table(
    area="scheduler", title="Sleep and pause", scope="per engine; checked only while no sleep, wake_up, "
    "pause or resume call to that engine is pending",
    states=SchedulerState, events=SchedulerEvent, initial=_Z.AWAKE,
    unlisted="ignore", unlisted_clause="ECP-UTIL-8",
    unlisted_why="a pause_scheduler that finds the scheduler paused, rejecting or asleep, and a resume that "
    "finds it awake or asleep without a refusal, leave it as it is (only wake_up ends a sleep); is_sleeping "
    "contradicts only `AWAKE` and the sleeping states, whose rows say so",
    rows=(
        _r((_Z.AWAKE, _Z.PAUSED, _Z.SLEEPING), _ZE.SLEEP_OK, E, _Z.SLEEPING, "legal", "ECP-UTIL-8",
           "sleep pauses the scheduler; mode abort ends running requests first (ECP-ABORT-9)"),
        _r((_Z.REJECTING, _Z.SLEEPING_REJECTING), _ZE.SLEEP_OK, E, _Z.SLEEPING_REJECTING, "legal", "ECP-UTIL-8",
           "sleep leaves a user pause's refusal of new ADDs in force"),
        _r(ANY, _ZE.WAKE_UP_TRUE, E, _Z.AWAKE, "legal", "ECP-UTIL-8",
           "every tag woke: the scheduler resumes and new ADDs are admitted"),
        _r(ANY, _ZE.WAKE_UP_FALSE, E, None, "legal", "ECP-UTIL-8", "a partial wake keeps the rest asleep"),
        _r((_Z.AWAKE, _Z.PAUSED, _Z.REJECTING), _ZE.PAUSE_REJECTING_OK, E, _Z.REJECTING, "legal",
           "ECP-REQ-7", "new ADDs are answered with ERROR engine_paused"),
        _r(_ASLEEP, _ZE.PAUSE_REJECTING_OK, E, _Z.SLEEPING_REJECTING, "legal", "ECP-REQ-7",
           "asleep, and new ADDs are answered with ERROR engine_paused"),
        _r((_Z.AWAKE, _Z.PAUSED, _Z.REJECTING), _ZE.PAUSE_KEEP_OK, E, _Z.PAUSED, "legal", "ECP-REQ-7",
           "new ADDs queue; mode keep ends a refusal an earlier user pause began"),
        _r(_ASLEEP, _ZE.PAUSE_KEEP_OK, E, _Z.SLEEPING, "legal", "ECP-REQ-7",
           "asleep, and new ADDs queue"),
        _r(_Z.AWAKE, _ZE.PAUSE_OK, E, _Z.PAUSED, "legal", "ECP-REQ-7",
           "pause_scheduler in any mode: new ADDs queue; a user pause's refusal is left as it is"),
        _r((_Z.PAUSED, _Z.REJECTING), _ZE.RESUME_OK, E, _Z.AWAKE, "legal", "ECP-REQ-7"),
        _r(_Z.SLEEPING_REJECTING, _ZE.RESUME_OK, E, _Z.SLEEPING, "legal", "ECP-REQ-7",
           "the refusal ends; the engine sleeps until wake_up"),
        _r(_ASLEEP, _ZE.IS_SLEEPING_FALSE, E, None, "illegal", "ECP-UTIL-8",
           "is_sleeping is true after sleep"),
        _r(_Z.AWAKE, _ZE.IS_SLEEPING_TRUE, E, None, "illegal", "ECP-UTIL-8",
           "is_sleeping is false after a wake_up that woke every tag"),
    ),
)


# ------------------------------------------------------------------------------ DP waves
class WaveState(State):
    IDLE = "IDLE"
    RUNNING = "RUNNING"


class WaveEvent(QualifiedEvent):
    START_NEWER = "StartWave(newer)"
    START_STALE = "StartWave(stale)"
    ADD = "Add"
    COMPLETE_TO_COORDINATOR = "Outputs(wave_complete) to the coordinator"
    START_TO_COORDINATOR = "Outputs(start_wave) to the coordinator"
    COMPLETE_TO_CLIENT = "Outputs(wave_complete) to a client"
    START_TO_CLIENT = "Outputs(start_wave) to a client"


_W, _WE = WaveState, WaveEvent
WAVE: Table[WaveState, WaveEvent] = Table(
    area="wave", title="Data-parallel waves", scope="per engine",
    states=WaveState, events=WaveEvent, initial=_W.IDLE,
    unlisted="ignore", unlisted_clause="ECP-DP-4",
    unlisted_why="the only unlisted pair is an ADD to a running engine, which joins the wave it runs",
    rows=(
        _r(ANY, _WE.START_NEWER, F, _W.RUNNING, "legal", "ECP-DP-4",
           "not excluded and not older than the engine's wave: adopt it and run"),
        _r(ANY, _WE.START_STALE, F, None, "legal", "ECP-DP-4", "older than the engine's wave, or excluded: ignored"),
        _r(_W.IDLE, _WE.ADD, F, _W.RUNNING, "legal", "ECP-DP-5", "current_wave is stamped on every ADD"),
        _r(ANY, _WE.COMPLETE_TO_COORDINATOR, E, _W.IDLE, "legal", "ECP-DP-5"),
        _r(ANY, _WE.START_TO_COORDINATOR, E, None, "legal", "ECP-DP-5"),
        _r(ANY, _WE.COMPLETE_TO_CLIENT, E, None, "illegal", "ECP-OUT-6",
           "DP control never goes to a frontend's output socket"),
        _r(ANY, _WE.START_TO_CLIENT, E, None, "illegal", "ECP-OUT-6"),
    ),
)


# ------------------------------------------------------------------------------ liveness and routing
class LivenessState(State):
    ALIVE = "ALIVE"
    DEAD = "DEAD"


class LivenessEvent(QualifiedEvent):
    ENGINE_DEAD = "EngineDead"
    OUTPUTS = "Outputs"
    INPUT = "Input"
    FOREIGN_ENGINE_INDEX = "Outputs(foreign engine_index)"
    FOREIGN_CLIENT = "Output(another client's request)"
    NO_SUCH_CLIENT = "Outputs(no such client)"


_L, _LE = LivenessState, LivenessEvent
LIVENESS: Table[LivenessState, LivenessEvent] = Table(
    area="liveness", title="Engine liveness and routing", scope="per engine",
    states=LivenessState, events=LivenessEvent, initial=_L.ALIVE,
    unlisted="ignore", unlisted_clause="ECP-OUT-8",
    unlisted_why="a live engine's messages are legal here (the other tables judge what they say); a dead "
    "engine's are illegal by the rows for `Outputs` and `Input`, which every message also passes",
    rows=(
        _r((_L.ALIVE, _L.DEAD), _LE.ENGINE_DEAD, E, _L.DEAD, "legal", "ECP-OUT-8",
           "sent on every output socket; the frontend fails every request and waiter (ECP-ROB-3)"),
        _r(_L.DEAD, _LE.OUTPUTS, E, None, "illegal", "ECP-OUT-8", "nothing follows ENGINE_CORE_DEAD"),
        _r(_L.DEAD, _LE.INPUT, F, None, "illegal", "ECP-ROB-3",
           "a frontend fails closed: no ADD, ABORT or UTILITY goes to a dead engine"),
        _r(_L.ALIVE, _LE.FOREIGN_ENGINE_INDEX, E, None, "illegal", "ECP-OUT-2",
           "engine_index is the sender's global DP rank"),
        _r(_L.ALIVE, _LE.FOREIGN_CLIENT, E, None, "illegal", "ECP-SOCK-4",
           "a request's outputs go to outputs[client_index]"),
        _r(_L.ALIVE, _LE.NO_SUCH_CLIENT, E, None, "illegal", "ECP-ROB-4",
           "an engine drops (and logs) what it cannot route"),
    ),
)

TABLES: dict[str, Table] = {t.area: t for t in (HANDSHAKE, REQUEST, UTILITY, SCHEDULER, WAVE, LIVENESS)}


def render_table(area: str) -> str:
    """The Markdown of one area's table, as ``spec/PROTOCOL.md`` shows it."""
    t = TABLES[area]
    if t.unlisted == "illegal":
        unlisted = f"Any other pair of state and event is illegal under `{t.unlisted_clause}`"
    else:
        unlisted = f"Any other pair of state and event is legal and leaves the state unchanged (`{t.unlisted_clause}`)"
    rows = [f"{t.title}, {t.scope}; initial state `{t.initial}`; states "
            + ", ".join(f"`{s}`" for s in t.states) + "; events "
            + ", ".join(f"`{e}`".replace("|", "\\|") for e in t.events) + ". "
            + f"{unlisted}: {t.unlisted_why}.",
            "", "| state | event | sent by | next | verdict | clause | note |", "|---|---|---|---|---|---|---|"]
    for r in t.rows:
        states = " \\| ".join(f"`{s}`" for s in r.states)
        event = str(r.event).replace("|", "\\|")
        nxt = f"`{r.next}`" if r.next else "="
        if r.followed is not None:
            nxt += f" (followed: `{r.followed}`)"
        note = r.note.replace("|", "\\|") + (" (settles one owed ERROR)" if r.settles_owed else "")
        rows.append(f"| {states} | `{event}` | {r.sender} | {nxt} | {r.verdict} | `{r.clause}` | {note} |")
    return "\n".join(rows) + "\n"
