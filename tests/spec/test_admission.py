"""What a new ADD gets, stepped through the SCHEDULER table (``ECP-REQ-7``, ``ECP-UTIL-8``, ``ECP-REJECT-5``).

The refusal of a user pause and the pause itself are separate in vLLM 0.33 (``reject_new_requests``
beside the scheduler's pause state): a later ``pause_scheduler`` or ``sleep`` keeps the refusal, a
``pause_generation`` with mode keep ends it, a resume or a full wake ends both.
"""

import pytest

from ecp.spec.machine import SCHEDULER, Admission, SchedulerControl, admission
from ecp.spec.machine.table import SchedulerState

ADMIT, QUEUE, REFUSE = Admission.ADMIT, Admission.QUEUE, Admission.REFUSE


def _after(*calls):
    control = SchedulerControl()
    for method, args, value in calls:
        control.carried_out(method, args, value)
    return control


@pytest.mark.parametrize("calls,expected", [
    ((), ADMIT),
    ((("pause_generation", [], None),), REFUSE),                       # mode abort by default
    ((("pause_generation", ["wait"], None),), REFUSE),
    ((("pause_generation", ["keep"], None),), QUEUE),
    ((("pause_scheduler", ["abort"], None),), QUEUE),                  # never a refusal
    ((("sleep", [1, "abort"], None),), QUEUE),
    ((("pause_generation", ["abort"], None), ("pause_scheduler", ["keep"], None)), REFUSE),
    ((("pause_generation", ["abort"], None), ("pause_generation", ["keep"], None)), QUEUE),
    ((("pause_generation", ["abort"], None), ("sleep", [1], None)), REFUSE),
    ((("pause_generation", ["abort"], None), ("sleep", [1], None), ("resume_scheduler", [], None)), QUEUE),
    ((("pause_generation", ["abort"], None), ("sleep", [1], None), ("wake_up", [None], True)), ADMIT),
    ((("sleep", [1], None), ("wake_up", [["weights"]], False)), QUEUE),  # a partial wake
    ((("sleep", [1], None), ("pause_generation", ["wait"], None)), REFUSE),
    ((("pause_scheduler", ["keep"], None), ("wake_up", [None], True)), ADMIT),  # a full wake resumes
    ((("pause_generation", ["abort"], None), ("resume_scheduler", [], None)), ADMIT),
    ((("pause_generation", ["abort"], None), ("is_sleeping", [], True), ("get_supported_tasks", [], ["generate"])),
     REFUSE),                                                           # other calls move nothing
])
def test_a_new_add_after_these_calls(calls, expected):
    control = _after(*calls)
    assert control.admission() is expected
    assert control.refusing is (expected is REFUSE)


def test_abort_immediately_passes_every_state():
    assert {admission(s, abort_immediately=True) for s in SchedulerState} == {ADMIT}


def test_every_state_has_an_answer_and_only_awake_admits():
    answers = {s: admission(s, abort_immediately=False) for s in SchedulerState}
    assert [s for s, a in answers.items() if a is ADMIT] == [SCHEDULER.initial]
    assert {s for s, a in answers.items() if a is REFUSE} == {SchedulerState.REJECTING,
                                                               SchedulerState.SLEEPING_REJECTING}


def test_the_control_and_the_frontend_machine_step_one_table():
    """The frontend's machine, reading the replies, ends in the state the engine's control is in."""
    from machine_pair import Pair, reply

    calls = [("pause_generation", ["abort"], None), ("sleep", [1, "abort"], None),
             ("pause_scheduler", ["keep"], None), ("resume_scheduler", [], None)]
    p = Pair()
    p.handshake()
    seen = []
    for cid, (method, args, value) in enumerate(calls, 1):
        p.call(0, cid, method, args)
        p.output(0, reply(0, cid, value))
        seen.append(p.fe.engine(0).scheduler)
    assert seen == ["REJECTING", "SLEEPING_REJECTING", "SLEEPING_REJECTING", "SLEEPING"]
    assert _after(*calls).state == SchedulerState.SLEEPING


def test_after_mode_keep_a_queued_add_may_run_on_resume():
    """pause_generation mode keep ends an earlier refusal: the frontend's machine no longer demands
    ERROR engine_paused for the next ADD, and its tokens after the resume are legal."""
    from machine_pair import Pair, out, reply

    from ecp.spec import FinishReason

    p = Pair()
    p.handshake()
    p.call(0, 1, "pause_generation", ["abort", False])
    p.output(0, reply(0, 1, None))
    p.call(0, 2, "pause_generation", ["keep", False])
    p.output(0, reply(0, 2, None))
    assert p.fe.engine(0).scheduler == "PAUSED"
    p.add(0, "queued")
    p.call(0, 3, "resume_scheduler")
    p.output(0, reply(0, 3, None))
    p.output(0, out(0, "queued"))
    p.output(0, out(0, "queued", FinishReason.LENGTH))


@pytest.mark.parametrize("args,asleep", [
    ([], False), ([None], False),                               # no tag: every tag woke
    ([["weights", "kv_cache"]], False), ([["kv_cache", "weights", "x"]], False),
    ([["weights"]], True), ([["kv_cache"]], True), ([[]], True),  # fewer: the rest sleeps on
])
def test_a_wake_up_that_answers_nil_wakes_what_it_named(args, asleep):
    """vLLM 0.30 and older answer wake_up with nil (their layouts say so): the tags it named decide."""
    from ecp.spec.machine.table import SchedulerEvent

    control = _after(("sleep", [1], None), ("wake_up", args, None))
    assert control.asleep is asleep
    assert control.admission() is (QUEUE if asleep else ADMIT)
    # what is_sleeping may then answer without contradicting the table (the monitor's check)
    contradicting = SchedulerEvent.IS_SLEEPING_FALSE if asleep else SchedulerEvent.IS_SLEEPING_TRUE
    assert SCHEDULER.step(control.state, contradicting).verdict == "illegal"
