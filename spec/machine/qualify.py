"""Which qualified event a message is, given what a machine sees of its engine.

The tables of :mod:`.table` key their rows by qualified events (``EngineReady(inputs missing)``,
``Output(terminal)``); each function here decides one qualifier, once for both roles, and both
machines call it before :meth:`~.table.Table.step`. Where the roles see differently (a frontend
cannot order its sockets), the function takes the side as an argument rather than being written
twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..enums import EEP_NOTIFICATION_CALL_ID, FT_STATUS_CALL_ID, FinishReason
from .table import (
    HandshakeEvent, HandshakeState, RequestEvent, SchedulerEvent, SchedulerState, UtilityEvent, WaveEvent,
)

if TYPE_CHECKING:
    from ..control import StartDPWave
    from ..outputs import UtilityOutput
    from ..request import EngineCoreRequest
    from .connection import EngineView, PendingCall

RESERVED_CALL_IDS = frozenset((EEP_NOTIFICATION_CALL_ID, FT_STATUS_CALL_ID))
#: the tags a sleep at level 1 or 2 puts to sleep (ECP-UTIL-8.7), in the order vLLM names them
SLEEP_TAGS = ("weights", "kv_cache")

_H, _HE = HandshakeState, HandshakeEvent
_BEFORE_INIT = (_H.START, _H.HELLO)
# members bound once: an enum member's attribute lookup costs as much as a table lookup, and
# requests and outputs are qualified per message
_ADD, _ADD_ABORT_IMMEDIATELY, _ADD_WHILE_REJECTING, _ADD_UNDECODABLE = (
    RequestEvent.ADD, RequestEvent.ADD_ABORT_IMMEDIATELY, RequestEvent.ADD_WHILE_REJECTING,
    RequestEvent.ADD_UNDECODABLE)
_TOKENS, _TERMINAL, _TERMINAL_ERROR, _OWED_ERROR, _TOKENS_OWED, _TERMINAL_OWED = (
    RequestEvent.OUTPUT_TOKENS, RequestEvent.OUTPUT_TERMINAL, RequestEvent.OUTPUT_TERMINAL_ERROR,
    RequestEvent.OUTPUT_OWED_ERROR, RequestEvent.OUTPUT_TOKENS_OWED, RequestEvent.OUTPUT_TERMINAL_OWED)
_REFUSING = (SchedulerState.REJECTING, SchedulerState.SLEEPING_REJECTING)
_ERROR = FinishReason.ERROR


# ------------------------------------------------------------------------------ handshake
def registration(view: EngineView, client: int) -> HandshakeEvent:
    """A ready payload on input ``client``."""
    if view.handshake in _BEFORE_INIT:
        return _HE.REGISTRATION
    return _HE.REGISTRATION_REPEATED if client in view.registered else _HE.REGISTRATION_NEW


def subscribe(view: EngineView) -> HandshakeEvent:
    """The coordinator subscription (only its engine can tell it apart: a frontend's XPUB cannot)."""
    if view.handshake is not _H.REGISTERING:
        return _HE.SUBSCRIBE
    return _HE.SUBSCRIBE_ALL_REGISTERED if view.all_registered else _HE.SUBSCRIBE_INPUTS_MISSING


def ready(view: EngineView, *, sender: bool) -> HandshakeEvent:
    """READY. ``sender``: judged by the engine's own machine, which knows every registration it
    sent; a frontend may read READY before a registration sent first (``inputs unseen``)."""
    state = view.handshake
    if state is _H.SUBSCRIBED:
        return _HE.READY_GATE_CLOSED
    if state is _H.GATED:
        return _HE.READY_GATE_PASSED
    if state is not _H.REGISTERING:
        return _HE.ENGINE_READY
    if sender and not view.all_registered:
        return _HE.READY_INPUTS_MISSING
    if view.coordinator and not view.gate_passed:
        return _HE.READY_GATE_CLOSED
    return _HE.READY_GATE_PASSED if view.all_registered else _HE.READY_INPUTS_UNSEEN


def handshake_message(view: EngineView, is_ready: bool, *, sender: bool) -> HandshakeEvent:
    """A message on the handshake socket: READY, or anything else (a HELLO, or a frame that cannot
    be read, which stands for HELLO: the frontend may still answer it with INIT)."""
    return ready(view, sender=sender) if is_ready else _HE.ENGINE_HELLO


def input_message(view: EngineView, client: int) -> HandshakeEvent:
    """A frontend's message on input ``client`` (``ECP-HS-3``: only where the engine registered)."""
    return _HE.INPUT_REGISTERED if client in view.registered else _HE.INPUT_UNREGISTERED


# ------------------------------------------------------------------------------ requests
def add(view: EngineView, request: EngineCoreRequest | None) -> RequestEvent:
    """An ADD; ``request`` ``None``: undecodable, its id recovered from the payload."""
    if request is None:
        return _ADD_UNDECODABLE
    if request.abort_immediately:
        return _ADD_ABORT_IMMEDIATELY
    if view.scheduler in _REFUSING and view.scheduler_calls_pending == 0:
        return _ADD_WHILE_REJECTING
    return _ADD


def output(finish_reason: FinishReason | None, owed: int) -> RequestEvent:
    """One output of a request for which the engine owes ``owed`` ERRORs (``ECP-REQ-2``)."""
    if finish_reason is None:
        return _TOKENS_OWED if owed else _TOKENS
    if finish_reason == _ERROR:
        return _OWED_ERROR if owed else _TERMINAL_ERROR
    return _TERMINAL_OWED if owed else _TERMINAL


# ------------------------------------------------------------------------------ utility calls
def call(call_id: int) -> UtilityEvent:
    return UtilityEvent.CALL_RESERVED_ID if call_id in RESERVED_CALL_IDS else UtilityEvent.CALL


def reply(uo: UtilityOutput) -> UtilityEvent:
    if uo.call_id in RESERVED_CALL_IDS:
        return UtilityEvent.REPLY_RESERVED_ID
    if uo.failure_message is not None:
        return UtilityEvent.REPLY_FAILURE
    if uo.result is not None:
        return UtilityEvent.REPLY_RESULT
    return UtilityEvent.REPLY_NO_ENVELOPE


def pause_refuses_adds(method: str, args: Sequence[Any]) -> bool:
    """Whether a pause call ``method(*args)``, once answered, makes the engine answer new ADDs with
    ERROR ``engine_paused`` until the scheduler resumes (``ECP-REQ-7``): ``pause_generation`` with mode
    abort (the default) or wait. Mode keep, and ``pause_scheduler`` in any mode, queue them."""
    return method == "pause_generation" and (args[0] if args else "abort") != "keep"


def scheduler_call(method: str, args: Sequence[Any], value: Any) -> SchedulerEvent | None:
    """The SCHEDULER event of a call ``method(*args)`` that succeeded with ``value``; ``None``: a call
    that neither moves nor reveals the sleep/pause state (another method, or a value the table does
    not judge)."""
    if method == "sleep":
        return SchedulerEvent.SLEEP_OK
    if method == "wake_up" and isinstance(value, bool):
        return SchedulerEvent.WAKE_UP_TRUE if value else SchedulerEvent.WAKE_UP_FALSE
    if method == "wake_up" and value is None:
        # releases whose wake_up answers nil (0.30 and older) do not say what is left asleep: a call
        # that named no tag or every tag woke every tag (sleep puts both to sleep, ECP-UTIL-8.7)
        tags = args[0] if args else None
        every = tags is None or (isinstance(tags, (list, tuple)) and set(SLEEP_TAGS) <= set(tags))
        return SchedulerEvent.WAKE_UP_TRUE if every else SchedulerEvent.WAKE_UP_FALSE
    if method == "pause_generation":
        return SchedulerEvent.PAUSE_REJECTING_OK if pause_refuses_adds(method, args) else SchedulerEvent.PAUSE_KEEP_OK
    if method == "pause_scheduler":
        return SchedulerEvent.PAUSE_OK
    if method == "resume_scheduler":
        return SchedulerEvent.RESUME_OK
    if method == "is_sleeping" and isinstance(value, bool):
        return SchedulerEvent.IS_SLEEPING_TRUE if value else SchedulerEvent.IS_SLEEPING_FALSE
    return None


def scheduler_reply(view: EngineView, call: PendingCall, value: Any) -> SchedulerEvent | None:
    """A successful reply to ``call`` that moves or reveals the sleep/pause state; ``None``: one
    that does neither. ``is_sleeping`` is judged only while no sleep/pause call is pending."""
    event = scheduler_call(call.method, call.args, value)
    if event in (SchedulerEvent.IS_SLEEPING_TRUE, SchedulerEvent.IS_SLEEPING_FALSE) \
            and view.scheduler_calls_pending != 0:
        return None
    return event


# ------------------------------------------------------------------------------ DP waves
def start_wave(view: EngineView, wave: StartDPWave) -> WaveEvent:
    newer = wave.new_wave >= view.wave and wave.exclude_eng_index != view.rank
    return WaveEvent.START_NEWER if newer else WaveEvent.START_STALE


def wave_control(complete: bool, to_coordinator: bool) -> WaveEvent:
    """``wave_complete`` (``complete``) or ``start_wave`` in an outputs message."""
    if complete:
        return WaveEvent.COMPLETE_TO_COORDINATOR if to_coordinator else WaveEvent.COMPLETE_TO_CLIENT
    return WaveEvent.START_TO_COORDINATOR if to_coordinator else WaveEvent.START_TO_CLIENT
