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
  :class:`~ecp.spec.errors.RemoteProtocolError`, both naming the clause.

The connections in :mod:`.connection` only compute the qualified event and
call :meth:`Table.step`; ``spec/PROTOCOL.md`` renders these tables (section 13)
through :func:`render_table`, so the prose cannot drift from the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["legal", "tolerated", "illegal"]

ANY = "*"


@dataclass(frozen=True)
class Row:
    """One transition: ``states`` × ``event`` → ``next`` (``None``: unchanged)."""

    states: tuple[str, ...]
    event: str
    sender: str
    next: str | None
    verdict: Verdict
    clause: str
    note: str = ""


@dataclass(frozen=True)
class Table:
    """The transitions of one area. An (state, event) pair without a row is
    ``unlisted``: unchanged (``"ignore"``) or illegal under ``unlisted_clause``."""

    area: str
    title: str
    scope: str
    states: tuple[str, ...]
    initial: str
    rows: tuple[Row, ...]
    unlisted: Literal["ignore", "illegal"] = "illegal"
    unlisted_clause: str = ""

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], Row] = {}
        for row in self.rows:
            for state in row.states:
                assert state == ANY or state in self.states, (self.area, state)
                key = (state, row.event)
                assert key not in index, f"{self.area}: two rows for {key}"
                index[key] = row
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_unlisted", {})

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.event for r in self.rows))

    def step(self, state: str, event: str) -> Row:
        """The row for ``event`` in ``state`` (a state's own row wins over a ``*`` row)."""
        index: dict[tuple[str, str], Row] = self._index  # type: ignore[attr-defined]
        row = index.get((state, event)) or index.get((ANY, event))
        if row is not None:
            return row
        # an unlisted pair: made once, then found like a listed one (the outputs check asks per message)
        unlisted: dict[tuple[str, str], Row] = self._unlisted  # type: ignore[attr-defined]
        row = unlisted.get((state, event))
        if row is None:
            if self.unlisted == "ignore":
                row = Row((state,), event, "", None, "legal", self.unlisted_clause, "no effect")
            else:
                row = Row((state,), event, "", None, "illegal", self.unlisted_clause,
                          f"{event} is not allowed in {state}")
            if len(unlisted) < 4096:  # events are drawn from a fixed vocabulary; bounded all the same
                unlisted[(state, event)] = row
        return row


def _r(states: str, event: str, sender: str, next: str | None, verdict: Verdict, clause: str,
       note: str = "") -> Row:
    return Row(tuple(s.strip() for s in states.split("|")), event, sender, next, verdict, clause, note)


E, F, C = "engine", "frontend", "coordinator"
_AFTER_HELLO = "HELLO | REGISTERING | SUBSCRIBED | GATED | READY"

# ------------------------------------------------------------------------------ handshake
HANDSHAKE = Table(
    area="handshake", title="Startup handshake", scope="per engine",
    states=("START", "HELLO", "REGISTERING", "SUBSCRIBED", "GATED", "READY"), initial="START",
    unlisted="illegal", unlisted_clause="ECP-HS-7",
    rows=(
        _r("START", "EngineHello", E, "HELLO", "legal", "ECP-HS-1"),
        _r(_AFTER_HELLO, "EngineHello", E, None, "illegal", "ECP-HS-7", "duplicate HELLO"),
        _r("HELLO", "Init", F, "REGISTERING", "legal", "ECP-HS-2"),
        _r("START", "Init", F, None, "illegal", "ECP-HS-2", "INIT answers a HELLO"),
        _r("REGISTERING | SUBSCRIBED | GATED | READY", "Init", F, None, "illegal", "ECP-HS-7",
           "a second INIT"),
        _r("START", "Registration", E, None, "illegal", "ECP-HS-7",
           "registration before its HELLO (a bootstrapped frontend starts in REGISTERING)"),
        _r("HELLO", "Registration", E, None, "illegal", "ECP-HS-7", "registration before INIT"),
        _r("REGISTERING", "Registration(new input)", E, "REGISTERING", "legal", "ECP-HS-3",
           "the engine becomes addressable on that input"),
        _r("REGISTERING | SUBSCRIBED | GATED | READY", "Registration(registered input)", E, None, "illegal",
           "ECP-HS-11", "duplicate registration on one input"),
        _r("REGISTERING", "CoordinatorSubscribe(all registered)", E, "SUBSCRIBED", "legal", "ECP-HS-6",
           "only when INIT names a coordinator"),
        _r("REGISTERING", "CoordinatorSubscribe(inputs missing)", E, None, "illegal", "ECP-HS-6",
           "subscribe after the ready payloads"),
        _r("SUBSCRIBED", "CoordinatorReady", C, "GATED", "legal", "ECP-HS-6"),
        _r("GATED | READY", "CoordinatorReady", C, None, "legal", "ECP-HS-6", "a repeated gate frame is ignored"),
        _r("START | HELLO | REGISTERING", "CoordinatorReady", C, None, "illegal", "ECP-HS-6",
           "the gate opens only after every engine subscribed"),
        _r("REGISTERING", "EngineReady(registered, gate passed)", E, "READY", "legal", "ECP-HS-5",
           "gate passed: INIT names no coordinator, or the coordinator published READY"),
        _r("GATED", "EngineReady(registered, gate passed)", E, "READY", "legal", "ECP-HS-5"),
        _r("REGISTERING", "EngineReady(inputs missing)", E, None, "illegal", "ECP-HS-5",
           "READY before the ready payload went out on every input"),
        _r("REGISTERING | SUBSCRIBED", "EngineReady(gate closed)", E, None, "illegal", "ECP-HS-6",
           "READY before the coordinator's READY"),
        _r("REGISTERING", "EngineReady(inputs unseen)", E, "READY", "legal", "ECP-HS-5",
           "at a frontend: the ready payload may still wait on its input socket (sockets are not ordered)"),
        _r("READY", "Registration(new input)", E, None, "legal", "ECP-HS-3", "as above"),
        _r("START", "EngineReady", E, None, "illegal", "ECP-HS-7", "READY before HELLO"),
        _r("HELLO", "EngineReady", E, None, "illegal", "ECP-HS-7", "READY before INIT"),
        _r("REGISTERING | SUBSCRIBED | GATED | READY", "Input(registered input)", F, None, "legal", "ECP-SOCK-1",
           "a ROUTER can address an engine once it registered on that input"),
        _r("*", "Input(unregistered input)", F, None, "illegal", "ECP-HS-3",
           "nothing can be sent to an engine on an input it has not registered on"),
        _r("READY", "EngineReady", E, None, "illegal", "ECP-HS-7", "duplicate READY"),
    ),
)

# ------------------------------------------------------------------------------ requests
_IN_FLIGHT = "ADDED | RUNNING"
_REUSABLE = "NONE | FINISHED | ABORTED | REJECTED | INVALID"
REQUEST = Table(
    area="request", title="Request lifecycle", scope="per request id, at the engine that owns it",
    states=("NONE", "ADDED", "RUNNING", "PAUSED_ADD", "REJECTED", "INVALID", "ABORTED", "FINISHED"),
    initial="NONE", unlisted="illegal", unlisted_clause="ECP-OUT-1",
    rows=(
        _r(_REUSABLE, "Add", F, "ADDED", "legal", "ECP-REQ-1",
           "an id may be reused once it is no longer in flight"),
        _r(_REUSABLE, "Add(abort_immediately)", F, "REJECTED", "legal", "ECP-REJECT-1",
           "a rejection notice: admitted and aborted at once, passes a pause (ECP-REJECT-5)"),
        _r(_REUSABLE, "Add(while rejecting)", F, "PAUSED_ADD", "legal", "ECP-REQ-7",
           "sent after a pause_generation (mode abort or wait) was answered"),
        _r(_REUSABLE, "Add(undecodable)", F, "INVALID", "tolerated", "ECP-ROB-1",
           "only raw frames; the id was recovered from the payload"),
        _r(f"{_IN_FLIGHT} | PAUSED_ADD", "Add", F, None, "tolerated", "ECP-REQ-8",
           "duplicate id in flight: the engine owes one ERROR output (ECP-REQ-2), the running request "
           "is unaffected"),
        _r(f"{_IN_FLIGHT} | PAUSED_ADD", "Add(abort_immediately)", F, None, "tolerated",
           "ECP-REQ-8", "as above"),
        _r(f"{_IN_FLIGHT} | PAUSED_ADD", "Add(while rejecting)", F, None, "tolerated",
           "ECP-REQ-8", "as above"),
        _r(f"{_IN_FLIGHT} | PAUSED_ADD", "Add(undecodable)", F, None, "tolerated",
           "ECP-REQ-8", "as above"),
        _r(_IN_FLIGHT, "Output(tokens)", E, "RUNNING", "legal", "ECP-OUT-3"),
        _r(_IN_FLIGHT, "Output(terminal)", E, "FINISHED", "legal", "ECP-OUT-1",
           "exactly one terminal output; ABORT for an engine-initiated abort (ECP-ABORT-9)"),
        _r(_IN_FLIGHT, "Output(terminal ERROR)", E, "FINISHED", "legal", "ECP-REQ-3",
           "an ADD answered with ERROR (invalid parameters, ECP-OUT-5)"),
        _r(f"{_IN_FLIGHT} | PAUSED_ADD | REJECTED | INVALID | FINISHED", "Output(owed ERROR)", E, None, "legal", "ECP-REQ-2",
           "the ERROR answer to a duplicate ADD"),
        _r("PAUSED_ADD", "Output(terminal ERROR)", E, "FINISHED", "legal", "ECP-REQ-7",
           "code engine_paused, retryable"),
        _r("PAUSED_ADD", "Output(tokens)", E, None, "illegal", "ECP-REQ-7", "a paused engine ran a new request"),
        _r("PAUSED_ADD", "Output(terminal)", E, None, "illegal", "ECP-REQ-7",
           "a new request during a pause ends with ERROR engine_paused"),
        _r("REJECTED", "Output(terminal ERROR)", E, "FINISHED", "legal", "ECP-REQ-3",
           "an invalid notice may still be answered with ERROR"),
        _r("REJECTED", "Output(tokens)", E, None, "illegal", "ECP-REJECT-1", "abort_immediately never runs"),
        _r("REJECTED", "Output(terminal)", E, None, "illegal", "ECP-REJECT-1", "no output is emitted for it"),
        _r("INVALID", "Output(terminal ERROR)", E, "FINISHED", "legal", "ECP-ROB-2"),
        _r("INVALID", "Output(tokens)", E, None, "illegal", "ECP-ROB-1", "an undecodable ADD never runs"),
        _r("INVALID", "Output(terminal)", E, None, "illegal", "ECP-ROB-2", "it is answered with ERROR"),
        _r(f"{_IN_FLIGHT} | PAUSED_ADD | REJECTED | INVALID", "Abort", F, "ABORTED", "legal", "ECP-ABORT-2"),
        _r("ABORTED", "Output(tokens)", E, None, "legal", "ECP-ABORT-4",
           "late outputs of an aborted request are tolerated and dropped (ECP-OUT-9)"),
        _r("ABORTED", "Output(terminal)", E, None, "legal", "ECP-ABORT-4"),
        _r("ABORTED", "Output(terminal ERROR)", E, None, "legal", "ECP-ABORT-4"),
        _r("ABORTED", "Output(owed ERROR)", E, None, "legal", "ECP-ABORT-4"),
        _r("NONE | FINISHED | ABORTED", "Abort", F, None, "tolerated", "ECP-ABORT-6",
           "the engine ignores it (ECP-ABORT-3); a frontend never sends ids it does not know"),
        _r("NONE", "Output(tokens)", E, None, "illegal", "ECP-OUT-1", "an output for an id never added"),
        _r("NONE", "Output(terminal)", E, None, "illegal", "ECP-OUT-1", "an output for an id never added"),
        _r("NONE", "Output(terminal ERROR)", E, None, "illegal", "ECP-OUT-1", "an output for an id never added"),
        _r("FINISHED", "Output(tokens)", E, None, "illegal", "ECP-OUT-1", "an output after the terminal output"),
        _r("FINISHED", "Output(terminal)", E, None, "illegal", "ECP-OUT-1", "a second terminal output"),
        _r("FINISHED", "Output(terminal ERROR)", E, None, "illegal", "ECP-OUT-1", "a second terminal output"),
    ),
)

# ------------------------------------------------------------------------------ utility calls
UTILITY = Table(
    area="utility", title="Utility calls", scope="per engine and call id",
    states=("NONE", "PENDING"), initial="NONE", unlisted="illegal", unlisted_clause="ECP-UTIL-1",
    rows=(
        _r("NONE", "UtilityCall", F, "PENDING", "legal", "ECP-UTIL-1", "call_id is a u64, echoed verbatim"),
        _r("PENDING", "UtilityCall", F, None, "tolerated", "ECP-UTIL-1",
           "the call id is already pending: the engine answers each call"),
        _r("NONE | PENDING", "UtilityCall(reserved id)", F, None, "illegal", "ECP-UTIL-12",
           "ids -1 and -2 are the engine's notices"),
        _r("PENDING", "Reply(result)", E, "NONE", "legal", "ECP-UTIL-2", "result = [type_info, value]"),
        _r("PENDING", "Reply(failure)", E, "NONE", "legal", "ECP-UTIL-3", "failure_message, result nil"),
        _r("PENDING", "Reply(no envelope)", E, None, "illegal", "ECP-UTIL-2",
           "neither failure_message nor a result envelope"),
        _r("NONE | PENDING", "Reply(reserved id)", E, None, "legal", "ECP-UTIL-12",
           "an engine-initiated notice; a client that did not ask drops it"),
        _r("NONE", "Reply(result)", E, None, "illegal", "ECP-UTIL-1", "a reply to a call id never sent"),
        _r("NONE", "Reply(failure)", E, None, "illegal", "ECP-UTIL-1", "a reply to a call id never sent"),
        _r("NONE", "Reply(no envelope)", E, None, "illegal", "ECP-UTIL-1", "a reply to a call id never sent"),
    ),
)

# ------------------------------------------------------------------------------ sleep / pause
SCHEDULER = Table(
    area="scheduler", title="Sleep and pause", scope="per engine; checked only while no sleep, wake_up, "
    "pause or resume call to that engine is pending",
    states=("AWAKE", "PAUSED", "REJECTING", "SLEEPING"), initial="AWAKE",
    unlisted="ignore", unlisted_clause="ECP-UTIL-8",
    rows=(
        _r("*", "Reply(sleep: ok)", E, "SLEEPING", "legal", "ECP-UTIL-8",
           "sleep pauses the scheduler; mode abort ends running requests first (ECP-ABORT-9)"),
        _r("*", "Reply(wake_up: true)", E, "AWAKE", "legal", "ECP-UTIL-8",
           "every tag woke: the scheduler resumes"),
        _r("*", "Reply(wake_up: false)", E, None, "legal", "ECP-UTIL-8", "a partial wake keeps the rest asleep"),
        _r("AWAKE | PAUSED | REJECTING", "Reply(pause_generation abort|wait: ok)", E, "REJECTING", "legal",
           "ECP-REQ-7", "new ADDs are answered with ERROR engine_paused"),
        _r("AWAKE | PAUSED", "Reply(pause: ok)", E, "PAUSED", "legal", "ECP-REQ-7",
           "pause_scheduler, or pause_generation mode keep: new ADDs queue"),
        _r("PAUSED | REJECTING", "Reply(resume_scheduler: ok)", E, "AWAKE", "legal", "ECP-REQ-7"),
        _r("SLEEPING", "Reply(is_sleeping: false)", E, None, "illegal", "ECP-UTIL-8",
           "is_sleeping is true after sleep"),
        _r("AWAKE", "Reply(is_sleeping: true)", E, None, "illegal", "ECP-UTIL-8",
           "is_sleeping is false after a wake_up that woke every tag"),
    ),
)

# ------------------------------------------------------------------------------ DP waves
WAVE = Table(
    area="wave", title="Data-parallel waves", scope="per engine",
    states=("IDLE", "RUNNING"), initial="IDLE", unlisted="ignore", unlisted_clause="ECP-DP-4",
    rows=(
        _r("*", "StartWave(newer)", F, "RUNNING", "legal", "ECP-DP-4",
           "not excluded and not older than the engine's wave: adopt it and run"),
        _r("*", "StartWave(stale)", F, None, "legal", "ECP-DP-4", "older than the engine's wave, or excluded: ignored"),
        _r("IDLE", "Add", F, "RUNNING", "legal", "ECP-DP-5", "current_wave is stamped on every ADD"),
        _r("*", "Outputs(wave_complete) to the coordinator", E, "IDLE", "legal", "ECP-DP-5"),
        _r("*", "Outputs(start_wave) to the coordinator", E, None, "legal", "ECP-DP-5"),
        _r("*", "Outputs(wave_complete) to a client", E, None, "illegal", "ECP-OUT-6",
           "DP control never goes to a frontend's output socket"),
        _r("*", "Outputs(start_wave) to a client", E, None, "illegal", "ECP-OUT-6"),
    ),
)

# ------------------------------------------------------------------------------ liveness and routing
LIVENESS = Table(
    area="liveness", title="Engine liveness and routing", scope="per engine",
    states=("ALIVE", "DEAD"), initial="ALIVE", unlisted="ignore", unlisted_clause="ECP-OUT-8",
    rows=(
        _r("ALIVE | DEAD", "EngineDead", E, "DEAD", "legal", "ECP-OUT-8",
           "sent on every output socket; the frontend fails every request and waiter (ECP-ROB-3)"),
        _r("DEAD", "Outputs", E, None, "illegal", "ECP-OUT-8", "nothing follows ENGINE_CORE_DEAD"),
        _r("DEAD", "Input", F, None, "illegal", "ECP-ROB-3",
           "a frontend fails closed: no ADD, ABORT or UTILITY goes to a dead engine"),
        _r("ALIVE", "Outputs(foreign engine_index)", E, None, "illegal", "ECP-OUT-2",
           "engine_index is the sender's global DP rank"),
        _r("ALIVE", "Output(another client's request)", E, None, "illegal", "ECP-SOCK-4",
           "a request's outputs go to outputs[client_index]"),
        _r("ALIVE", "Outputs(no such client)", E, None, "illegal", "ECP-ROB-4",
           "an engine drops (and logs) what it cannot route"),
    ),
)

TABLES: dict[str, Table] = {t.area: t for t in (HANDSHAKE, REQUEST, UTILITY, SCHEDULER, WAVE, LIVENESS)}


def render_table(area: str) -> str:
    """The Markdown of one area's table, as ``spec/PROTOCOL.md`` shows it."""
    t = TABLES[area]
    rows = [f"{t.title}, {t.scope}; initial state `{t.initial}`; states "
            + ", ".join(f"`{s}`" for s in t.states) + ". "
            + ("Any other event is illegal under `" + t.unlisted_clause + "`."
               if t.unlisted == "illegal" else "Any other event leaves the state unchanged."),
            "", "| state | event | sent by | next | verdict | clause | note |", "|---|---|---|---|---|---|---|"]
    for r in t.rows:
        states = " \\| ".join(f"`{s}`" for s in r.states)
        event = r.event.replace("|", "\\|")
        nxt = f"`{r.next}`" if r.next else "="
        note = r.note.replace("|", "\\|")
        rows.append(f"| {states} | `{event}` | {r.sender} | {nxt} | {r.verdict} | `{r.clause}` | {note} |")
    return "\n".join(rows) + "\n"
