"""The sans-IO pieces on their own: coalescer, registry, router, aggregation table."""

import pytest

from ecp.spec import CLAUSES, ENGINE_CORE_DEAD, SchedulerStats, UtilityOutput, UtilityResult
from ecp.reference.client import (
    MAX_DRAIN, UTILITY_RULES, AbortCoalescer, DuplicateRequestId, InconsistentUtilityResults, InvalidDataParallelRank,
    RequestRegistry, Router, Rule, UtilityAggregation, UtilityCallFailed, UtilityResultDecode,
)
from ecp.reference.client.health import Health


def ok(value):
    return UtilityOutput(1, None, UtilityResult(None, value))


def test_coalescer_drains_at_most_max_in_drop_order_skipping_finished():
    registry = RequestRegistry((0, 1))
    for i in range(3000):
        registry.add(f"r{i}", i % 2, None)
    coalescer = AbortCoalescer()
    for i in reversed(range(3000)):
        coalescer.push(f"r{i}", "dropped_stream")
    registry.take("r2999")  # finished before the drain: never aborted

    def take_owner(rid, _token):
        entry = registry.take(rid)
        return None if entry is None else entry.engine_rank

    first = coalescer.drain(take_owner)
    assert list(first) == [0, 1]  # ranks ascending
    assert sum(map(len, first.values())) == 1023 and len(coalescer) == 3000 - 1024
    assert first[1][:2] == ["r2997", "r2995"]  # drop order within an engine
    second = coalescer.drain(take_owner)
    third = coalescer.drain(take_owner)
    assert sum(map(len, second.values())) == 1024 and sum(map(len, third.values())) == 3000 - 2048
    assert len(coalescer) == 0 and len(registry) == 0
    assert coalescer.drain(take_owner) == {}
    coalescer.push("r0")  # no longer in flight
    assert coalescer.drain(take_owner) == {}
    with pytest.raises(ValueError):
        coalescer.push("x", "bored")


def test_a_reused_id_is_not_aborted_for_its_dropped_predecessor():
    registry = RequestRegistry((0,))
    coalescer = AbortCoalescer()
    old, new = object(), object()
    registry.add("r", 0, old)
    coalescer.push("r", "dropped_stream", old)   # dropped ...
    registry.take("r")                           # ... finished before the drain ...
    registry.add("r", 0, new)                    # ... and the id reused by a new request

    def take_owner(rid, token):
        entry = registry.get(rid)
        if entry is None or entry.sink is not token:
            return None
        return registry.take(rid).engine_rank

    assert coalescer.drain(take_owner) == {}
    assert registry.get("r").sink is new


def test_registry_counts_and_duplicates():
    registry = RequestRegistry((0, 1))
    registry.add("a", 1, "sink")
    with pytest.raises(DuplicateRequestId):
        registry.add("a", 0, "sink")
    assert registry.counts() == {0: 0, 1: 1}
    assert registry.take("a").sink == "sink" and registry.take("a") is None
    assert registry.counts() == {0: 0, 1: 0}


def test_router_least_loaded_then_stats():
    router = Router((1, 0))
    assert router.choose({0: 0, 1: 0}) == 0  # tie → lowest rank
    assert router.choose({0: 2, 1: 1}) == 1
    with pytest.raises(InvalidDataParallelRank) as info:
        router.choose({}, pinned=5)
    assert info.value.connected_ranks == [0, 1]
    router.on_stats(0, SchedulerStats(num_running_reqs=3, num_waiting_reqs=4))
    assert router.choose({0: 0, 1: 5}) == 1  # engine 0 scores max(0, 7) = 7
    for _ in range(3):
        router.admitted(1)
    router.on_stats(1, SchedulerStats(num_running_reqs=6))
    router.admitted(1)
    assert router.score(1, 0) == 7 and router.choose({0: 0, 1: 0}) == 0  # 7 vs 7 → lowest rank


def test_aggregation_table_is_complete_and_cites_live_clauses():
    consensus = {m for m, r in UTILITY_RULES.items() if r.rule is Rule.CONSENSUS}
    assert consensus == {"is_sleeping", "is_scheduler_paused", "get_weight_version"}
    assert {m for m, r in UTILITY_RULES.items() if r.rule is Rule.AND} == {
        "reset_prefix_cache", "wake_up", "add_lora", "remove_lora"}
    assert UTILITY_RULES["collective_rpc"].rule is Rule.FLATTEN
    for m in ("sleep", "pause_scheduler", "resume_scheduler", "profile", "reset_mm_cache"):
        assert UTILITY_RULES[m].rule is Rule.UNIT
    assert all(r.clause in CLAUSES for r in UTILITY_RULES.values())
    from ecp.spec.utility_methods import UTILITY_METHODS
    assert set(UTILITY_RULES) <= set(UTILITY_METHODS)  # result types come from the spec table


def test_aggregate_rules_and_errors():
    agg = UtilityAggregation()
    assert agg.aggregate("is_sleeping", {0: ok(False), 1: ok(False)}) is False
    with pytest.raises(InconsistentUtilityResults):
        agg.aggregate("get_weight_version", {0: ok("v1"), 1: ok("v2")})
    assert agg.aggregate("wake_up", {0: ok(True), 1: ok(False)}) is False
    assert agg.aggregate("collective_rpc", {1: ok([3]), 0: ok([1, 2])}) == [1, 2, 3]
    assert agg.aggregate("sleep", {0: ok(None), 1: UtilityOutput(2, None, None)}) is None
    with pytest.raises(UtilityResultDecode):
        agg.aggregate("reset_prefix_cache", {0: ok(1)})
    with pytest.raises(UtilityResultDecode):
        agg.aggregate("get_supported_tasks", {0: ok(["generate", 3])})
    with pytest.raises(UtilityResultDecode):
        agg.aggregate("list_loras", {0: ok([1, "2"])})
    assert agg.aggregate("list_loras", {0: ok([1, 2]), 1: ok([])}) == {0: [1, 2], 1: []}
    assert agg.aggregate("get_kv_connector_handshake_entries", {0: ok([{"tp_rank": 0}])}) == {0: [{"tp_rank": 0}]}
    with pytest.raises(UtilityResultDecode):
        agg.aggregate("get_kv_connector_handshake_entries", {0: ok([{1: 0}])})
    with pytest.raises(UtilityCallFailed) as info:
        agg.aggregate("wake_up", {0: UtilityOutput(1, "boom", None), 1: ok(True), 2: UtilityOutput(3, "bang", None)})
    assert info.value.failures == {0: "boom", 2: "bang"} and info.value.results == {1: True}


def test_client_faults_bend_their_seam_only():
    from ecp.reference.client.faults import ClientFaults

    correct = UtilityAggregation()
    assert ClientFaults().aggregation(correct) is correct
    assert ClientFaults({"ignore-engine-dead", "no-rejection-notification"}).aggregation(correct) is correct
    any_agg = ClientFaults({"reset-prefix-cache-any"}).aggregation(correct)
    assert any_agg.aggregate("reset_prefix_cache", {0: ok(True), 1: ok(False)}) is True
    assert correct.aggregate("reset_prefix_cache", {0: ok(True), 1: ok(False)}) is False
    assert any_agg.aggregate("wake_up", {0: ok(True), 1: ok(False)}) is False  # only that method is bent
    first = ClientFaults({"first-engine-is-sleeping"}).aggregation(correct)
    assert first.targets("is_sleeping", (0, 1)) == (0,) and first.targets("sleep", (0, 1)) == (0, 1)
    assert correct.targets("is_sleeping", (0, 1)) == (0, 1)

    queue = AbortCoalescer()
    assert ClientFaults().coalescer(queue) is queue
    one = ClientFaults({"abort-one-per-request"}).coalescer(queue)
    for rid in ("a", "b", "c"):
        one.push(rid)
    assert one.drain(lambda rid, token: 0) == {0: ["a"]}
    assert one.drain(lambda rid, token: 0, max_items=MAX_DRAIN) == {0: ["b"]}

    seen: list[list[bytes]] = []
    handler = seen.append
    assert ClientFaults().output_handler(handler, None) is handler
    deaf = ClientFaults({"ignore-engine-dead"}).output_handler(handler, None)
    deaf([ENGINE_CORE_DEAD])
    deaf([b"\x93"])
    assert seen == [[b"\x93"]]


def test_fault_tables_cite_real_clauses():
    from ecp.reference.client.faults import FAULTS as CLIENT
    from ecp.reference.frontend.faults import FAULTS as FRONTEND, FrontendFaults, check_serve_faults

    for name, fault in {**CLIENT, **FRONTEND}.items():
        assert fault.name == name and fault.clause in CLAUSES and fault.does
    assert check_serve_faults(["ignore-engine-dead", "notify-without-connector"])
    with pytest.raises(ValueError, match="reset-prefix-cache-any"):  # the message lists the known names
        check_serve_faults(["no-such-fault"])
    assert FrontendFaults().notify_rejections(True) and not FrontendFaults().notify_rejections(False)
    assert not FrontendFaults({"no-rejection-notification"}).notify_rejections(True)
    assert FrontendFaults({"notify-without-connector"}).notify_rejections(False)


def test_health_is_sticky():
    health = Health()
    health.check()
    first, second = RuntimeError("first"), RuntimeError("second")
    assert health.fail(first) and not health.fail(second)
    assert health.error is first and not health.healthy
    with pytest.raises(RuntimeError, match="first"):
        health.check()


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "finish", "drop", "drain"]), st.integers(0, 3),
                          st.integers(0, 2)), max_size=80),
       st.integers(1, 8))
def test_coalescer_property_exact_abort_set(ops, max_items):
    """Whatever the interleaving of adds (ids are reused), finishes, drops and drains: the ids sent
    are exactly the dropped request instances still in flight at their drain, each once, one group
    per engine per drain, at most ``max_items`` ids per drain."""
    registry = RequestRegistry((0, 1, 2))
    coalescer = AbortCoalescer()
    generation = 0
    sent: list[tuple[str, int]] = []
    expected: list[tuple[str, int]] = []
    queued: list[tuple[str, object]] = []  # model of the queue: (id, instance)

    def take_owner(rid, token):
        entry = registry.get(rid)
        if entry is None or entry.sink is not token:
            return None
        registry.take(rid)
        return entry.engine_rank

    def drain():
        batch, queued[:] = queued[:max_items], queued[max_items:]
        by_rank: dict[int, list[tuple[str, int]]] = {}
        for rid, inst in batch:  # the model: still that instance in flight at drain time, once
            entry = registry.get(rid)
            if entry is not None and entry.sink is inst and (rid, inst.gen) not in expected:
                if (rid, inst.gen) not in [x for xs in by_rank.values() for x in xs]:
                    by_rank.setdefault(entry.engine_rank, []).append((rid, inst.gen))
        for rank in sorted(by_rank):
            expected.extend(by_rank[rank])
        groups = coalescer.drain(take_owner, max_items=max_items)
        assert list(groups) == sorted(groups)
        assert sum(map(len, groups.values())) <= max_items
        for ids in groups.values():
            sent.extend(ids_with_gen(ids))

    live: dict[str, object] = {}

    def ids_with_gen(ids):
        return [(rid, taken_gen.pop(rid)) for rid in ids]

    taken_gen: dict[str, int] = {}
    real_take = registry.take

    def recording_take(rid):
        entry = real_take(rid)
        if entry is not None:
            taken_gen[rid] = entry.sink.gen
        return entry

    registry.take = recording_take

    class Inst:
        def __init__(self, gen):
            self.gen = gen

    for op, n, rank in ops:
        rid = f"r{n}"
        if op == "add" and rid not in registry:
            generation += 1
            live[rid] = Inst(generation)
            registry.add(rid, rank, live[rid])
        elif op == "finish" and rid in registry:
            real_take(rid)
        elif op == "drop" and rid in registry:
            inst = registry.get(rid).sink
            coalescer.push(rid, "dropped_stream", inst)
            queued.append((rid, inst))
        elif op == "drain":
            drain()
    while len(coalescer):
        drain()
    assert sent == expected
