"""Engine-role data-parallel cases: N engines behind one harness frontend."""

from ecp.conformance.engine.cases._common import expect_bool, ok_value
from ecp.conformance.outcomes import Violation
from ecp.conformance.registry import case
from ecp.spec import encode_start_dp_wave, engine_identity

DP_ENGINES = 2


def _dp_count(engines) -> int:
    return max(DP_ENGINES, engines.cfg.engine_count)


@case("ENG-DP-1")
def test_distinct_identities(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n) as eut:
        fe = eut.fe
        start = fe.start_index
        expected = [engine_identity(start + k) for k in range(n)]
        got = sorted(r.identity for r in fe.records.values() if r.registrations)
        if got != expected:
            raise Violation(f"{n} engines registered with identities {[i.hex() for i in got]}, expected "
                            f"{[i.hex() for i in expected]}")
        for k in range(n):
            rid = fe.new_id(f"rank{start + k}")
            fe.add(fe.request(rid, max_tokens=2), engine=k)
            fe.wait_finished(rid, max_tokens=2)
            indexes = {s.engine_index for s in fe.seen(rid)}
            if indexes != {start + k}:
                raise Violation(f"request sent to rank {start + k} answered with engine_index {sorted(indexes)}",
                                clause="ECP-OUT-2")


@case("ENG-DP-2")
def test_start_dp_wave_tolerated(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n) as eut:
        fe = eut.fe
        for k in range(n):
            fe.send_raw(encode_start_dp_wave(3, exclude_engine_index=0), engine=k)
            fe.send_raw(encode_start_dp_wave(1, exclude_engine_index=None), engine=k)  # older: ignored
        for k in range(n):
            fe.serves(engine=k, after="START_DP_WAVE", clause="ECP-DP-4")


@case("ENG-DP-3")
def test_per_rank_sleep_state(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n) as eut:
        fe = eut.fe

        def states() -> list[bool]:
            return [expect_bool(fe.call("is_sleeping", engine=k), f"is_sleeping on rank {fe.start_index + k}")
                    for k in range(n)]

        if any(states()):
            raise Violation(f"freshly started ranks answer is_sleeping = {states()}, expected all false")
        ok_value(fe.call("sleep", [1, "wait"], engine=n - 1), "sleep")
        expected = [False] * (n - 1) + [True]
        if states() != expected:
            raise Violation(f"after sleep on the last rank only, is_sleeping per rank is {states()}, "
                            f"expected {expected}")
        ok_value(fe.call("wake_up", [None], engine=n - 1), "wake_up")
