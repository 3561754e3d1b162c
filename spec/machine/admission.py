"""What a new ADD gets from an engine, given the sleep and pause calls it carried out (``ECP-REQ-7``).

The SCHEDULER table (:mod:`.table`) is the one statement of how ``sleep``, ``wake_up``,
``pause_generation``, ``pause_scheduler`` and ``resume_scheduler`` move an engine; the frontend's
machine steps it on the replies it reads. :class:`SchedulerControl` steps the same table from the
engine's side — on the calls an engine carried out, or a peer watching one expects it to have
carried out — and :func:`admission` reads the result for a new ADD. An engine asks it instead of
keeping a pause rule of its own::

    control = SchedulerControl()
    control.carried_out("pause_generation", ["wait"], None)
    control.admission(abort_immediately=False)     # Admission.REFUSE: ERROR engine_paused, retryable
    control.carried_out("resume_scheduler", [], None)
    control.admission(abort_immediately=False)     # Admission.ADMIT
"""

from __future__ import annotations

import enum
from typing import Any, Sequence

from .qualify import scheduler_call
from .table import SCHEDULER, SchedulerEvent, SchedulerState

__all__ = ["Admission", "SchedulerControl", "admission"]

_REVEALING = (SchedulerEvent.IS_SLEEPING_TRUE, SchedulerEvent.IS_SLEEPING_FALSE)


class Admission(enum.Enum):
    """What an engine does with a new ADD."""

    #: schedule it
    ADMIT = "admit"
    #: hold it, in arrival order, and admit it when the scheduler resumes (``ECP-REQ-7``, ``ECP-UTIL-8``)
    QUEUE = "queue"
    #: answer it at once with a terminal ERROR, code ``engine_paused``, retryable (``ECP-REQ-7``)
    REFUSE = "refuse"


def admission(state: SchedulerState, abort_immediately: bool) -> Admission:
    """A new ADD in ``state``: an ``abort_immediately`` ADD passes any pause (``ECP-REJECT-5``); a user
    pause's refusal refuses; any other pause or sleep queues; an awake engine admits."""
    if abort_immediately:
        return Admission.ADMIT
    if state in (SchedulerState.REJECTING, SchedulerState.SLEEPING_REJECTING):
        return Admission.REFUSE
    return Admission.ADMIT if state is SchedulerState.AWAKE else Admission.QUEUE


class SchedulerControl:
    """One engine's sleep and pause state, moved by the SCHEDULER table's rows.

    Feed it every call the engine carried out successfully, with its result (:meth:`carried_out`);
    a call the table does not know, or a row that does not move the state, leaves it as it is."""

    def __init__(self) -> None:
        self.state: SchedulerState = SCHEDULER.initial

    def carried_out(self, method: str, args: Sequence[Any], value: Any) -> None:
        """``method(*args)`` succeeded with ``value`` (``None`` for a reply still deferred)."""
        event = scheduler_call(method, args, value)
        if event is None or event in _REVEALING:
            return
        row = SCHEDULER.step(self.state, event)
        if row.next is not None:
            self.state = row.next

    def admission(self, abort_immediately: bool = False) -> Admission:
        """What a new ADD gets now (:func:`admission`)."""
        return admission(self.state, abort_immediately)

    @property
    def asleep(self) -> bool:
        return self.state in (SchedulerState.SLEEPING, SchedulerState.SLEEPING_REJECTING)

    @property
    def refusing(self) -> bool:
        """New ADDs are refused with ``engine_paused`` (a user pause until the resume)."""
        return self.admission() is Admission.REFUSE

    @property
    def paused(self) -> bool:
        """The scheduler is paused by a pause call (not by a sleep)."""
        return self.state in (SchedulerState.PAUSED, SchedulerState.REJECTING)
