"""Admission errors, aborts, prefix caching and preemption over real sockets."""

from __future__ import annotations

from engine_rawfront import make_request

from ecp.spec import EngineCoreEventType, EngineCoreOutputs, EngineCoreRequest, FinishReason, PoolingParams


def _state(fe, rank=0):
    return fe.value(rank, "get_engine_state")


def test_error_outputs_and_engine_keeps_serving(rig):
    # 1 ms steps: the first "dup" must still be running when the second ADD lands (the engine thread
    # shares the GIL with this frontend, so a zero-cost engine can finish 50 steps in one switch interval)
    fe, _ = rig.start(1, max_model_len=64, num_gpu_blocks=64, vocab_size=1000, step_time_ms=1)
    fe.add(0, make_request("long", list(range(20, 100)), max_tokens=2))            # 80 > max_model_len
    fe.add(0, make_request("badp", max_tokens=2, temperature=5.0))                 # invalid sampling
    fe.add(0, make_request("vocab", [20, 5000], max_tokens=2))                     # out of vocabulary
    fe.add(0, make_request("empty", [], max_tokens=2))
    # more logprobs than the vocabulary: refused (it used to send the synthetic executor into
    # an effectively endless search, freezing the engine)
    fe.add(0, make_request("hugelp", max_tokens=2, logprobs=2**31 - 1))
    fe.add(0, make_request("hugeplp", max_tokens=2, prompt_logprobs=1001))
    pooling = EngineCoreRequest("pool", [20, 21], None, None, PoolingParams(task="embed"), 0.0, None, None, None)
    fe.add(0, pooling)
    fe.add(0, make_request("dup", max_tokens=50))
    fe.add(0, make_request("dup", max_tokens=50))                                  # duplicate in flight
    errs = {"long": "prompt_too_long", "badp": "invalid_request", "vocab": "invalid_request",
            "empty": "invalid_request", "pool": "unsupported_task", "dup": "duplicate_request_id",
            "hugelp": "invalid_request", "hugeplp": "invalid_request"}
    fe.pump(lambda: all(fe.finished(r) for r in errs), timeout=10)
    for rid, code in errs.items():
        out = fe.finished(rid)
        assert out.finish_reason == FinishReason.ERROR and out.error.code == code, (rid, out)
        assert out.new_token_ids == []
    for m in fe.messages[0]:
        if any(o.finish_reason == FinishReason.ERROR for o in m.outputs):
            assert m.scheduler_stats is None and m.weight_version is None
            # every ERROR id is finished except the duplicate's: its original still runs (ECP-OUT-5)
            expected = {o.request_id for o in m.outputs if o.error.code != "duplicate_request_id"}
            assert (m.finished_requests or set()) == expected
            assert all(o.error.retryable is False for o in m.outputs)
    # the first "dup" was not disturbed
    assert fe.pump(lambda: any(o.finish_reason == FinishReason.LENGTH for o in fe.outputs_for("dup")))
    assert len(fe.tokens("dup")) == 50
    assert [o.finish_reason for o in fe.outputs_for("dup") if o.finish_reason is not None] == [
        FinishReason.ERROR, FinishReason.LENGTH]


def test_client_abort_frees_blocks_and_emits_nothing(rig):
    fe, _ = rig.start(1, step_time_ms=2, max_model_len=256, num_gpu_blocks=64)
    fe.add(0, make_request("a1", list(range(20, 60)), max_tokens=200))
    fe.add(0, make_request("a2", max_tokens=5))
    fe.pump(lambda: len(fe.tokens("a1")) >= 2, timeout=10)
    fe.abort(0, ["a1", "unknown-id", "a1"])
    fe.wait_finished(["a2"])
    n = len(fe.outputs_for("a1"))
    fe.quiet(0.1)
    state = _state(fe)
    assert len(fe.outputs_for("a1")) == n and fe.finished("a1") is None  # no output on client ABORT
    assert state["num_running"] == 0 and state["num_used_blocks"] == 0
    fe.abort(0, ["a1", "a2"])  # finished/unknown ids: a no-op
    fe.add(0, make_request("a3", max_tokens=3))
    assert fe.wait_finished(["a3"])["a3"].finish_reason == FinishReason.LENGTH


def test_burst_abort_of_1024_ids_in_one_step(rig):
    fe, _ = rig.start(1, max_model_len=512, num_gpu_blocks=8192, max_num_seqs=1024, step_time_ms=1)
    ids = [f"b{i}" for i in range(1024)]
    for rid in ids:
        fe.add(0, make_request(rid, [20, 21, 22], max_tokens=500))
    assert fe.pump(lambda: fe.tokens("b1023"), timeout=20)
    # freeze the scheduler so that no step can run between the ABORT and the check
    assert fe.value(0, "pause_generation", ["keep", False]) is None
    before = _state(fe)
    assert before["num_running"] + before["num_waiting"] == 1024 and before["num_used_blocks"] > 0
    fe.abort(0, ids)
    state = _state(fe)
    assert state["num_running"] == 0 and state["num_waiting"] == 0 and state["num_used_blocks"] == 0
    assert state["step_counter"] == before["step_counter"]  # no step was needed
    fe.value(0, "resume_scheduler")
    fe.add(0, make_request("after", max_tokens=2))
    fe.wait_finished(["after"])
    assert not any(fe.finished(r) for r in ids)


def test_abort_immediately_never_runs(rig):
    fe, _ = rig.start(1)
    fe.add(0, make_request("ai", [0], max_tokens=1, abort_immediately=True))
    fe.add(0, make_request("ok", max_tokens=2))
    fe.wait_finished(["ok"])
    fe.quiet(0.1)
    assert fe.outputs_for("ai") == []
    assert _state(fe)["num_finished"] == 2


def test_prefix_cache_hits_and_reset(rig):
    # 1 ms steps: "long" (236 tokens at most) must still hold its blocks when pause_generation lands
    fe, _ = rig.start(1, block_size=16, max_model_len=256, num_gpu_blocks=64, step_time_ms=1)
    prefix = list(range(100, 148))  # three full blocks
    fe.add(0, make_request("p1", prefix + [1000, 1001], max_tokens=2))
    fe.wait_finished(["p1"])
    fe.add(0, make_request("p2", prefix + [2000], max_tokens=2))
    fe.wait_finished(["p2"])
    assert fe.outputs_for("p1")[0].prefill_stats.num_cached_tokens == 0
    assert fe.outputs_for("p2")[0].prefill_stats.num_cached_tokens == 48
    # a different cache_salt shares nothing
    fe.add(0, make_request("p3", prefix + [2000], max_tokens=2, cache_salt="other"))
    fe.wait_finished(["p3"])
    assert fe.outputs_for("p3")[0].prefill_stats.num_cached_tokens == 0
    # reset refuses while a request holds blocks, succeeds when asked to reset running requests
    fe.add(0, make_request("long", list(range(20, 40)), max_tokens=400))
    fe.pump(lambda: fe.tokens("long"), timeout=5)
    fe.value(0, "pause_generation", ["keep", False])  # hold "long" (and its blocks) in place
    assert fe.value(0, "reset_prefix_cache", [False, False]) is False
    assert fe.value(0, "reset_prefix_cache", [True, False]) is True
    fe.value(0, "resume_scheduler")
    assert fe.pump(lambda: any(e.type == EngineCoreEventType.PREEMPTED
                               for o in fe.outputs_for("long") for e in (o.events or [])), timeout=5)
    fe.abort(0, ["long"])
    fe.quiet(0.05)
    assert fe.value(0, "reset_prefix_cache", [False, False]) is True
    fe.add(0, make_request("p4", prefix + [2000], max_tokens=2))
    fe.wait_finished(["p4"])
    assert fe.outputs_for("p4")[0].prefill_stats.num_cached_tokens == 0
    stats = [m.scheduler_stats for m in fe.messages[0] if isinstance(m, EngineCoreOutputs) and m.scheduler_stats]
    assert any(s.prefix_cache_stats.reset for s in stats)
    assert sum(s.prefix_cache_stats.hits for s in stats) >= 48


def test_preemption_under_tiny_pool_all_finish(rig):
    # 12 blocks of 4 tokens: 48 token slots for 8 requests that each need up to 23 positions
    fe, _ = rig.start(1, block_size=4, num_gpu_blocks=12, max_model_len=48, max_num_batched_tokens=64)
    ids = [f"t{i}" for i in range(8)]
    for i, rid in enumerate(ids):
        fe.add(0, make_request(rid, list(range(20 + i, 28 + i)), max_tokens=15))
    done = fe.wait_finished(ids, timeout=30)
    from ecp.reference.engine.synthetic import expected_tokens

    for rid in ids:
        assert done[rid].finish_reason == FinishReason.LENGTH
        assert fe.tokens(rid) == expected_tokens(rid, 15)
    state = _state(fe)
    assert state["num_preemptions"] > 0 and state["num_used_blocks"] == 0
    preempted = [e for rid in ids for o in fe.outputs_for(rid) for e in (o.events or [])
                 if e.type == EngineCoreEventType.PREEMPTED]
    assert preempted


def test_priority_orders_admission(rig):
    fe, _ = rig.start(1, max_num_seqs=1, step_time_ms=1)
    fe.add(0, make_request("first", max_tokens=3))
    fe.add(0, make_request("low", max_tokens=3, priority=5))
    fe.add(0, make_request("high", max_tokens=3, priority=-5))
    fe.wait_finished(["first", "low", "high"])
    order = []
    for m in fe.messages[0]:
        for o in m.outputs:
            if o.finish_reason is not None:
                order.append(o.request_id)
    assert order.index("high") < order.index("low")
