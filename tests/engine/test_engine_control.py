"""Utilities with real state: sleep/wake, pause/resume, weights, LoRA, collective_rpc."""

from __future__ import annotations

import pytest
from engine_rawfront import make_request

from ecp.spec import EngineCoreOutputs, FinishReason


def _index(fe, pred, client=0):
    for i, m in enumerate(fe.messages[client]):
        if pred(m):
            return i
    raise AssertionError("message not found")


def test_sleep_abort_orders_abort_output_before_reply(rig):
    fe, _ = rig.start(1, step_time_ms=2)
    fe.add(0, make_request("r5", max_tokens=400))
    fe.pump(lambda: len(fe.tokens("r5")) >= 2)
    assert fe.value(0, "is_sleeping") is False
    reply = fe.call(0, "sleep", [1, "abort"])
    assert reply.failure_message is None and reply.result.value is None
    out = fe.finished("r5")
    assert out.finish_reason == FinishReason.ABORT and out.new_token_ids == []
    i_abort = _index(fe, lambda m: any(o.finish_reason == FinishReason.ABORT for o in m.outputs))
    i_reply = _index(fe, lambda m: m.utility_output is not None and m.utility_output.call_id == reply.call_id)
    abort_msg = fe.messages[0][i_abort]
    assert abort_msg.finished_requests == {"r5"} and abort_msg.scheduler_stats is None
    assert abort_msg.weight_version is None
    assert i_abort < i_reply
    assert any(not m.outputs and m.scheduler_stats for m in fe.messages[0][i_abort + 1:i_reply])
    assert fe.value(0, "is_sleeping") is True
    assert fe.value(0, "is_scheduler_paused") is True
    # an ADD to a sleeping engine is queued (ECP-UTIL-8) and runs only once nothing sleeps
    fe.add(0, make_request("zz", max_tokens=2))
    assert fe.value(0, "wake_up", [["weights"]]) is False
    assert fe.value(0, "is_sleeping") is True
    fe.quiet(0.1)
    assert fe.outputs_for("zz") == []
    assert fe.value(0, "wake_up", [["kv_cache"]]) is True
    assert fe.wait_finished(["zz"])["zz"].finish_reason == FinishReason.LENGTH
    assert fe.value(0, "is_sleeping") is False and fe.value(0, "is_scheduler_paused") is False
    fe.add(0, make_request("r6", max_tokens=2))
    assert fe.wait_finished(["r6"])["r6"].finish_reason == FinishReason.LENGTH
    bad = fe.call(0, "sleep", [1, "bogus"])
    assert bad.failure_message.startswith("Call to sleep method failed:") and bad.result is None


def test_sleep_wait_replies_after_in_flight_requests_finish(rig):
    fe, _ = rig.start(1, step_time_ms=2)
    fe.add(0, make_request("w1", max_tokens=100))
    fe.pump(lambda: fe.tokens("w1"))
    reply = fe.call(0, "sleep", [2, "wait"], timeout=15)
    assert reply.failure_message is None
    i_fin = _index(fe, lambda m: any(o.request_id == "w1" and o.finish_reason is not None for o in m.outputs))
    i_reply = _index(fe, lambda m: m.utility_output is not None and m.utility_output.call_id == reply.call_id)
    assert i_fin < i_reply and fe.finished("w1").finish_reason == FinishReason.LENGTH
    assert len(fe.tokens("w1")) == 100
    assert fe.value(0, "is_sleeping") is True
    assert fe.value(0, "wake_up", [None]) is True


def test_pause_keep_freezes_and_resume_continues(rig):
    fe, _ = rig.start(1, step_time_ms=2)
    fe.add(0, make_request("k1", max_tokens=300))
    fe.pump(lambda: len(fe.tokens("k1")) >= 2)
    assert fe.value(0, "pause_generation", ["keep", True]) is None
    assert fe.value(0, "is_scheduler_paused") is True
    n = len(fe.tokens("k1"))
    fe.quiet(0.1)
    assert len(fe.tokens("k1")) == n and fe.finished("k1") is None
    # mode keep queues a new ADD (ECP-REQ-7: only abort and wait refuse): nothing until the resume
    fe.add(0, make_request("k2", max_tokens=2))
    # abort_immediately requests pass a pause and produce nothing
    fe.add(0, make_request("k3", [0], max_tokens=1, abort_immediately=True))
    fe.quiet(0.1)
    assert fe.outputs_for("k2") == [] and fe.finished("k1") is None
    assert fe.value(0, "resume_scheduler") is None
    assert fe.value(0, "is_scheduler_paused") is False
    done = fe.wait_finished(["k1", "k2"])
    assert done["k1"].finish_reason == FinishReason.LENGTH and done["k2"].finish_reason == FinishReason.LENGTH
    assert len(fe.tokens("k1")) == 300 and len(fe.tokens("k2")) == 2 and fe.outputs_for("k3") == []


@pytest.mark.parametrize("mode", ["abort", "wait"])
def test_a_user_pause_refuses_new_adds_until_the_resume(rig, mode):
    fe, _ = rig.start(1, step_time_ms=2)
    assert fe.value(0, "pause_generation", [mode, False]) is None
    fe.add(0, make_request("r1", max_tokens=2))
    err = fe.wait_finished(["r1"])["r1"]
    assert err.finish_reason == FinishReason.ERROR and err.error.code == "engine_paused" and err.error.retryable
    # the resume ends the refusal
    assert fe.value(0, "resume_scheduler") is None
    fe.add(0, make_request("r2", max_tokens=2))
    assert fe.wait_finished(["r2"])["r2"].finish_reason == FinishReason.LENGTH


def test_a_refusal_outlives_other_pauses_and_mode_keep_ends_it(rig):
    """As vLLM 0.33 (``reject_new_requests`` beside the pause state; spec/PROTOCOL.md 13.4): a sleep or
    pause_scheduler after a user pause keeps refusing, pause_generation mode keep queues instead."""
    fe, _ = rig.start(1, step_time_ms=2)
    assert fe.value(0, "pause_generation", ["abort", False]) is None
    assert fe.value(0, "pause_scheduler", ["keep", False]) is None
    assert fe.value(0, "sleep", [1, "abort"]) is None
    fe.add(0, make_request("x1", max_tokens=2))
    assert fe.wait_finished(["x1"])["x1"].error.code == "engine_paused"
    assert fe.value(0, "wake_up", [None]) is True  # a full wake ends pause and refusal
    fe.add(0, make_request("x2", max_tokens=2))
    assert fe.wait_finished(["x2"])["x2"].finish_reason == FinishReason.LENGTH
    assert fe.value(0, "pause_generation", ["abort", False]) is None
    assert fe.value(0, "pause_generation", ["keep", False]) is None
    fe.add(0, make_request("x3", max_tokens=2))
    fe.quiet(0.1)
    assert fe.outputs_for("x3") == []  # queued, not refused
    assert fe.value(0, "resume_scheduler") is None
    assert fe.wait_finished(["x3"])["x3"].finish_reason == FinishReason.LENGTH


def test_sleep_queues_new_adds_until_the_wake_up(rig):
    fe, _ = rig.start(1, step_time_ms=2)
    assert fe.value(0, "sleep", [1, "abort"]) is None
    fe.add(0, make_request("s1", max_tokens=2))
    fe.quiet(0.1)
    assert fe.outputs_for("s1") == []
    assert fe.value(0, "wake_up", [None]) is True
    assert fe.wait_finished(["s1"])["s1"].finish_reason == FinishReason.LENGTH


def test_pause_scheduler_abort_mode(rig):
    fe, _ = rig.start(1, step_time_ms=2)
    fe.add(0, make_request("q1", max_tokens=300))
    fe.add(0, make_request("q2", max_tokens=300))
    fe.pump(lambda: fe.tokens("q2"))
    assert fe.value(0, "pause_scheduler", ["abort", True]) is None
    assert fe.finished("q1").finish_reason == FinishReason.ABORT
    assert fe.finished("q2").finish_reason == FinishReason.ABORT
    fe.value(0, "resume_scheduler")


def test_misc_utilities(rig):
    fe, _ = rig.start(1, max_loras=2)
    unknown = fe.call(0, "no_such_method")
    assert unknown.failure_message == ("Call to no_such_method method failed: "
                                       "'EngineCoreProc' object has no attribute 'no_such_method'")
    assert fe.value(0, "get_weight_version") == "default"
    assert fe.value(0, "set_weight_version", ["v2"]) is None
    assert fe.value(0, "get_weight_version") == "v2"
    fe.add(0, make_request("wv", max_tokens=2))
    fe.wait_finished(["wv"])
    assert all(m.weight_version == "v2" for m in fe.messages[0]
               if isinstance(m, EngineCoreOutputs) and m.outputs)
    assert fe.value(0, "collective_rpc", ["echo", None, [1, 2], {"k": 3}]) == [[[1, 2], {"k": 3}]]
    assert fe.call(0, "collective_rpc", ["nope"]).failure_message
    assert fe.value(0, "reset_encoder_cache") is None and fe.value(0, "profile", [True, None]) is None
    # vLLM 0.33 frontends send profile's 5 arguments
    assert fe.value(0, "profile", [False, "run", None, 8, {"record_shapes": True}]) is None
    assert fe.value(0, "add_lora", [["a", 1, "/p"]]) is True
    # the 6-element LoRARequest of vLLM 0.33, load_inplace at position 4
    assert fe.value(0, "add_lora", [["c", 3, "/p", None, True, False]]) is True
    assert fe.value(0, "remove_lora", [3]) is True
    assert fe.value(0, "add_lora", [["b", 2, "/p"]]) is True
    assert fe.value(0, "list_loras") == [1, 2]
    assert fe.value(0, "remove_lora", [1]) is True and fe.value(0, "remove_lora", [1]) is False
    assert fe.value(0, "list_loras") == [2]
    assert fe.call(0, "add_lora", [["bad"]]).failure_message  # not a LoRARequest
    # the engine kept serving through every failure
    fe.add(0, make_request("after", max_tokens=2))
    fe.wait_finished(["after"])


def test_every_spec_method_is_served_or_listed_with_a_reason():
    from ecp.reference.engine.utilities import EXTENSIONS, NOT_SERVED, UTILITIES
    from ecp.spec.utility_methods import UTILITY_METHODS

    served = set(UTILITIES) & set(UTILITY_METHODS)
    assert served | set(NOT_SERVED) == set(UTILITY_METHODS) and not served & set(NOT_SERVED)
    assert set(UTILITIES) - served == set(EXTENSIONS) and not set(EXTENSIONS) & set(UTILITY_METHODS)
    assert all(reason.strip() for reason in NOT_SERVED.values())


def test_calls_are_bound_against_the_spec_table(rig):
    fe, _ = rig.start(1)
    # left-out arguments take the table's defaults: sleep() is sleep(1, "abort"), wake_up() wakes every tag
    assert fe.value(0, "sleep") is None and fe.value(0, "is_sleeping") is True
    assert fe.value(0, "wake_up") is True and fe.value(0, "is_sleeping") is False
    assert fe.value(0, "collective_rpc", ["echo"]) == [[[], {}]]
    too_many = fe.call(0, "reset_prefix_cache", [False, False, True])
    assert too_many.result is None and too_many.failure_message == (
        "Call to reset_prefix_cache method failed: "
        "reset_prefix_cache() takes at most 2 positional arguments but 3 were given")
    missing = fe.call(0, "set_weight_version")
    assert missing.failure_message == ("Call to set_weight_version method failed: "
                                       "set_weight_version() missing required positional argument: 'weight_version'")
    assert fe.value(0, "get_weight_version") == "default"  # nothing ran
    # a method of the table the engine does not serve is answered as vLLM answers an unknown one
    assert fe.call(0, "handle_fault_tolerance", [{}]).failure_message == (
        "Call to handle_fault_tolerance method failed: "
        "'EngineCoreProc' object has no attribute 'handle_fault_tolerance'")
    assert fe.value(0, "get_engine_state")["num_running"] == 0  # an extension, bound with no arguments


def test_release_kv_cache_memory_after_a_completed_pause(rig):
    fe, _ = rig.start(1, step_time_ms=2)
    fe.add(0, make_request("c1", list(range(100, 164)), max_tokens=2))
    fe.wait_finished(["c1"])
    assert fe.value(0, "get_engine_state")["num_cached_blocks"] > 0
    not_paused = fe.call(0, "release_kv_cache_memory")
    assert not_paused.failure_message == ("Call to release_kv_cache_memory method failed: "
                                          "release_kv_cache_memory() requires a completed pause first")
    fe.add(0, make_request("kept", max_tokens=300))
    fe.pump(lambda: fe.tokens("kept"))
    assert fe.value(0, "pause_generation", ["keep", False]) is None
    assert fe.call(0, "release_kv_cache_memory").failure_message == not_paused.failure_message  # still in flight
    assert fe.value(0, "resume_scheduler") is None and fe.value(0, "pause_generation", ["abort", False]) is None
    assert fe.finished("kept").finish_reason == FinishReason.ABORT
    assert fe.value(0, "release_kv_cache_memory") is None
    state = fe.value(0, "get_engine_state")
    assert state["num_cached_blocks"] == 0 and state["sleeping_tags"] == ["kv_cache"]
    assert fe.value(0, "is_sleeping") is True and fe.value(0, "is_scheduler_paused") is True
    assert fe.call(0, "release_kv_cache_memory").failure_message.endswith(
        "requires all executor memory to be resident")
    fe.add(0, make_request("asleep", max_tokens=2))
    assert fe.wait_finished(["asleep"])["asleep"].error.code == "engine_paused"
    assert fe.value(0, "wake_up", [["kv_cache"]]) is True
    assert fe.value(0, "is_sleeping") is False and fe.value(0, "is_scheduler_paused") is False
    fe.add(0, make_request("awake", max_tokens=2))
    assert fe.wait_finished(["awake"])["awake"].finish_reason == FinishReason.LENGTH
