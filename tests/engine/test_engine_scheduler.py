"""Sans-IO unit tests: block pool, prefix cache, scheduler budget, chunked prefill, preemption."""

from __future__ import annotations

import pytest

from ecp.spec import EngineCoreEventType, EngineCoreRequest, FinishReason, SamplingParams, UtilityRequest
from ecp.reference.engine.config import EngineConfig
from ecp.reference.engine.core import UTILITIES, EngineCore
from ecp.reference.engine.kv_cache import BlockPool, NoFreeBlocks, hash_blocks
from ecp.reference.engine.scheduler import EngineRequest, Scheduler, Status
from ecp.reference.engine.synthetic import SyntheticExecutor, expected_tokens


def _req(rid, n_prompt, max_tokens=4, start=100, **sp):
    return EngineRequest(request_id=rid, prompt_token_ids=list(range(start, start + n_prompt)),
                         sampling_params=SamplingParams(max_tokens=max_tokens, **sp), max_tokens=max_tokens)


def _sched(**kw):
    args = dict(num_blocks=16, block_size=4, max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64)
    args.update(kw)
    return Scheduler(**args)


def _decode(s: Scheduler, out, token=50):
    """Book a step and append one token to every span that samples."""
    s.update(out)
    for span, (req, _) in zip(out.batch.spans, out.scheduled):
        if span.sample and req.status is Status.RUNNING:
            req.output_token_ids.append(token)


# ---------------------------------------------------------------- block pool
def test_block_pool_refcounts_and_lru_eviction():
    pool = BlockPool(4)
    a = pool.allocate(2)
    assert pool.num_free == 2 and pool.usage == 0.5
    h = hash_blocks([1, 2, 3, 4, 5, 6, 7, 8], 4, 0, None)
    pool.cache_block(a[0], h[0])
    pool.cache_block(a[1], h[1])
    pool.touch(pool.lookup(h))  # a second request shares both blocks
    pool.free(a)
    assert pool.num_free == 2  # still referenced once
    pool.free(a)
    assert pool.num_free == 4 and pool.lookup(h) == a  # freed but still cached
    with pytest.raises(NoFreeBlocks):
        pool.allocate(5)
    fresh = pool.allocate(3)  # the two never-used blocks go first, then the tail block a[1]
    assert a[1] in fresh and a[0] not in fresh
    assert pool.lookup(h) == [a[0]]  # the head of the prefix survived
    with pytest.raises(RuntimeError):
        pool.free([fresh[0], fresh[0]])


def test_reset_refused_while_blocks_in_use():
    pool = BlockPool(2)
    b = pool.allocate(1)
    pool.cache_block(b[0], 123)
    assert pool.reset() is False
    pool.free(b)
    assert pool.reset() is True and pool.lookup([123]) == []


def test_hash_depends_on_prefix_and_salt():
    t = list(range(8))
    assert hash_blocks(t, 4, 0, None) != hash_blocks(t, 4, 0, None, extra=("salt", None))
    a = hash_blocks([9, 9, 9, 9] + t[4:], 4, 0, None)
    b = hash_blocks(t, 4, 0, None)
    assert a[1] != b[1]  # same tokens in block 1, different parent


# ---------------------------------------------------------------- scheduler
def test_chunked_prefill_respects_token_budget():
    s = _sched(max_num_batched_tokens=10, num_blocks=32)
    r = _req("a", 25)
    s.add(r)
    sizes = []
    for _ in range(3):
        out = s.schedule()
        assert sum(len(sp.token_ids) for sp in out.batch.spans) <= 10
        sizes.append([(sp.start_position, len(sp.token_ids), sp.sample) for sp in out.batch.spans])
        _decode(s, out)
    assert sizes == [[(0, 10, False)], [(10, 10, False)], [(20, 5, True)]]
    out = s.schedule()
    assert [(sp.start_position, sp.token_ids) for sp in out.batch.spans] == [(25, [50])]


def test_budget_shared_between_decode_and_new_prefill():
    s = _sched(max_num_batched_tokens=8, num_blocks=32)
    s.add(_req("a", 4))
    _decode(s, s.schedule())
    s.add(_req("b", 20))
    out = s.schedule()
    assert [(sp.request_id, len(sp.token_ids)) for sp in out.batch.spans] == [("a", 1), ("b", 7)]


def test_no_chunking_when_disabled():
    s = _sched(max_num_batched_tokens=64, enable_chunked_prefill=False, num_blocks=64)
    s.add(_req("a", 40))
    s.add(_req("b", 40))
    out = s.schedule()
    assert [sp.request_id for sp in out.batch.spans] == ["a"]  # b waits for a whole-prompt budget


def test_max_num_seqs():
    s = _sched(max_num_seqs=2)
    for i in range(3):
        s.add(_req(f"r{i}", 2))
    out = s.schedule()
    assert len(out.scheduled) == 2 and s.num_waiting == 1


def test_prefix_hit_skips_cached_blocks_but_never_the_last_token():
    s = _sched(num_blocks=32)
    a = _req("a", 12)
    s.add(a)
    _decode(s, s.schedule())
    s.finish(a)
    b = _req("b", 12)  # identical prompt: 3 full blocks, but the last token must be recomputed
    s.add(b)
    out = s.schedule()
    assert out.batch.spans[0].start_position == 8 and b.num_prefix_cached_tokens == 8
    c = _req("c", 13)
    s.add(c)
    out = s.schedule()
    assert c.num_prefix_cached_tokens == 12
    stats = s.pool.take_stats()
    assert stats["requests"] == 3 and stats["hits"] == 20


def test_skip_reading_prefix_cache():
    s = _sched(num_blocks=32)
    a = _req("a", 12)
    s.add(a)
    _decode(s, s.schedule())
    s.finish(a)
    b = _req("b", 12, skip_reading_prefix_cache=True)
    s.add(b)
    s.schedule()
    assert b.num_prefix_cached_tokens == 0


def test_preemption_by_recompute_with_tiny_pool():
    s = _sched(num_blocks=4, block_size=4)
    a, b = _req("a", 7), _req("b", 7, start=200)
    s.add(a)
    s.add(b)
    out = s.schedule()
    assert len(out.scheduled) == 2 and s.pool.num_free == 0
    _decode(s, out)
    _decode(s, s.schedule())  # both at 9 tokens, 8 computed: the next span needs a 3rd block each
    out = s.schedule()
    assert out.preempted == [b] and b.status is Status.PREEMPTED
    assert b.num_computed_tokens == 0 and b.block_ids == []
    assert b.events[-1][0] == EngineCoreEventType.PREEMPTED
    assert [r.request_id for r, _ in out.scheduled] == ["a"]
    s.finish(a)
    out = s.schedule()  # b comes back, recomputing prompt + output past its still-cached first block
    assert [(r.request_id, n) for r, n in out.scheduled] == [("b", 5)]
    assert b.num_computed_tokens == 4 and out.batch.spans[0].sample


def test_priority_preempts_the_worst_request():
    s = _sched(num_blocks=4, block_size=4)
    lo = _req("lo", 7)
    lo.priority = 5
    hi = _req("hi", 7, start=300)
    hi.priority = -1
    s.add(lo)
    s.add(hi)
    out = s.schedule()
    assert [r.request_id for r, _ in out.scheduled] == ["hi", "lo"]  # best priority admitted first
    _decode(s, out)
    _decode(s, s.schedule())
    out = s.schedule()
    assert out.preempted == [lo]


# ---------------------------------------------------------------- engine core (sans-IO)
def _core(**kw):
    cfg = EngineConfig(max_model_len=128, num_gpu_blocks=64, **kw)
    return EngineCore(cfg, SyntheticExecutor(seed=cfg.seed, vocab_size=cfg.vocab_size))


def _add(core, rid, **sp):
    core.add_request(EngineCoreRequest(rid, [20, 21, 22], None, SamplingParams(**sp), None, 0.0, None, None,
                                       None))


def _run_until_idle(core, limit=1000):
    msgs = []
    for _ in range(limit):
        busy = core.step()
        msgs += core.take_outbox()
        if not busy:
            return msgs
    raise AssertionError("engine did not go idle")


def test_core_exactly_one_terminal_output_per_request():
    core = _core()
    for i in range(20):
        _add(core, f"r{i}", max_tokens=1 + i % 7)
    msgs = _run_until_idle(core)
    terminals = {}
    for m in msgs:
        for o in m.payload.outputs:
            if o.finish_reason is not None:
                assert o.request_id not in terminals
                terminals[o.request_id] = o
    assert len(terminals) == 20
    for i in range(20):
        toks = [t for m in msgs for o in m.payload.outputs if o.request_id == f"r{i}" for t in o.new_token_ids]
        assert toks == expected_tokens(f"r{i}", 1 + i % 7)
    assert core.scheduler.pool.num_used == 0


def test_core_sleep_wait_is_deferred_until_idle():
    core = _core()
    _add(core, "a", max_tokens=5)
    core.step()
    core.take_outbox()
    core.handle_utility(UtilityRequest(0, 9, "sleep", [1, "wait"]))
    assert [m for m in core.take_outbox() if m.payload.utility_output] == []
    msgs = _run_until_idle(core)
    kinds = ["reply" if m.payload.utility_output else
             ("finish" if any(o.finish_reason for o in m.payload.outputs) else "other") for m in msgs]
    assert kinds.index("finish") < kinds.index("reply")
    assert UTILITIES["is_sleeping"](core) is True
    _add(core, "b", max_tokens=1)
    assert core.take_outbox() == [] and _run_until_idle(core) == []  # queued while asleep
    core.handle_utility(UtilityRequest(0, 10, "wake_up", [None]))
    finished = [o for m in _run_until_idle(core) for o in m.payload.outputs if o.finish_reason]
    assert [(o.request_id, o.finish_reason) for o in finished] == [("b", FinishReason.LENGTH)]


def test_core_shutdown_aborts_and_answers_waiting_calls():
    core = _core()
    _add(core, "a", max_tokens=50)
    core.step()
    core.take_outbox()
    core.handle_utility(UtilityRequest(0, 3, "pause_generation", ["wait", False]))
    assert core.take_outbox() == []
    assert core.shutdown() == ["a"]
    msgs = [m.payload for m in core.take_outbox()]
    assert msgs[0].outputs[0].finish_reason == FinishReason.ABORT and msgs[0].finished_requests == {"a"}
    assert msgs[-1].utility_output.call_id == 3 and msgs[-1].utility_output.failure_message is None


def test_an_executor_with_no_room_for_blocks_is_a_startup_error_not_the_default_pool():
    import pytest

    from ecp.reference.engine.config import config_from_options
    from ecp.reference.engine.core import EngineCore
    from ecp.reference.engine.synthetic import SyntheticExecutor

    class NoRoom(SyntheticExecutor):
        def available_blocks(self, block_size, utilization):
            return 0  # e.g. CUDA with the weights filling the memory budget

    with pytest.raises(ValueError, match="cannot hold one sequence"):
        EngineCore(config_from_options(max_model_len=256), NoRoom())
