"""Engine-role data-parallel cases: N engines behind one harness frontend."""

from ecp.conformance import capabilities
from ecp.conformance.engine.checks import ready_hash_violation, wave_complete_violation
from ecp.conformance.engine.cases._common import expect_bool, feature_missing, ok_value, require_feature
from ecp.conformance.outcomes import CaseTimeout, CaseFailure
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
        got = sorted(r.identity for r in fe.evidence.records.values() if r.registrations)
        if got != expected:
            raise CaseFailure(f"{n} engines registered with identities {[i.hex() for i in got]}, expected "
                            f"{[i.hex() for i in expected]}")
        for rec in fe.evidence.records.values():
            violation = ready_hash_violation(rec)
            if violation is not None:
                raise violation
        for k in range(n):
            rid = fe.new_id(f"rank{start + k}")
            fe.add(fe.request(rid, max_tokens=2), engine=k)
            fe.wait_finished(rid, max_tokens=2)
            indexes = {s.engine_index for s in fe.seen(rid)}
            if indexes != {start + k}:
                raise CaseFailure(f"request sent to rank {start + k} answered with engine_index {sorted(indexes)}",
                                clause="ECP-OUT-2")


@case("ENG-DP-2")
def test_start_dp_wave_tolerated(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n) as eut:
        fe = eut.fe
        for k in range(n):
            fe.send_raw(encode_start_dp_wave(3, exclude_eng_index=0), engine=k)
            fe.send_raw(encode_start_dp_wave(1, exclude_eng_index=None), engine=k)  # older: ignored
        for k in range(n):
            fe.serves(engine=k, after="START_DP_WAVE", clause="ECP-DP-4")


@case("ENG-DP-3")
def test_per_rank_sleep_state(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n) as eut:
        fe = eut.fe
        require_feature(fe, "sleep")

        def states() -> list[bool]:
            return [expect_bool(fe.call("is_sleeping", engine=k), f"is_sleeping on rank {fe.start_index + k}")
                    for k in range(n)]

        if any(states()):
            raise CaseFailure(f"freshly started ranks answer is_sleeping = {states()}, expected all false")
        ok_value(fe.call("sleep", [1, "wait"], engine=n - 1), "sleep")
        expected = [False] * (n - 1) + [True]
        if states() != expected:
            raise CaseFailure(f"after sleep on the last rank only, is_sleeping per rank is {states()}, "
                            f"expected {expected}")
        ok_value(fe.call("wake_up", [None], engine=n - 1), "wake_up")


@case("ENG-DP-4")
def test_coordinator_gate(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n, coordinator=True) as eut:
        fe = eut.fe
        if fe.evidence.coord_subscriptions < n:
            raise CaseFailure(f"{fe.evidence.coord_subscriptions} of {n} engines subscribed (0x01) to coordinator_input")
        for rec in fe.evidence.records.values():
            if rec.ready_at is None:
                raise CaseFailure(f"identity {rec.identity.hex()} never sent READY after the coordinator gate",
                                clause="ECP-HS-5")
            if fe.evidence.gate_published_at is None or rec.ready_at < fe.evidence.gate_published_at:
                raise CaseFailure(f"identity {rec.identity.hex()} sent READY before the coordinator published READY")
        for k in range(n):
            fe.serves(engine=k, after="the coordinator gate", clause="ECP-HS-6")


@case("ENG-DP-5")
def test_dp_control_to_coordinator(engines):
    n = _dp_count(engines)
    with engines.fresh(engine_count=n, coordinator=True) as eut:
        fe = eut.fe
        rids = []
        for k in range(n):
            rid = fe.new_id(f"wave-rank{fe.start_index + k}")
            fe.add(fe.request(rid, max_tokens=3), engine=k)
            rids.append(rid)
        for rid in rids:
            fe.wait_finished(rid, max_tokens=3)
        # a wave ends once every engine is idle: give its wave_complete time to arrive somewhere
        fe.observe(max(fe.quiet_window_s, 0.3))
        if fe.dp_control_on_outputs:
            client, msg = fe.dp_control_on_outputs[0]
            raise CaseFailure(f"rank {msg.engine_index} sent a DP control message (wave_complete={msg.wave_complete}, "
                            f"start_wave={msg.start_wave}) to client output[{client}]")
        # the wave is the whole group's: only global rank 0 reports it, so a launch without rank 0 reports none
        violation = wave_complete_violation(fe)
        if violation is not None:
            raise violation


#: a wave well ahead of any an engine reached in the cases before (each finished wave adds one)
NEWER_WAVE = 1000


@case("ENG-DP-6")
def test_newer_wave_adopted(engines):
    import msgspec

    n = _dp_count(engines)
    # declared before any launch: a deployment without waves need not be started for nothing
    capabilities.require(capabilities.get("engine", "dp_waves"), engines.cfg.lacks)
    with engines.fresh(engine_count=n, coordinator=True) as eut:
        fe = eut.fe
        mark = len(fe.coordinator_messages)
        rids = []
        for k in range(n):
            rid = fe.new_id(f"wave{NEWER_WAVE}-rank{fe.start_index + k}")
            fe.add(msgspec.structs.replace(fe.request(rid, max_tokens=2), current_wave=NEWER_WAVE), engine=k)
            rids.append(rid)
        for rid in rids:
            fe.wait_finished(rid, max_tokens=2)

        def control() -> list[tuple[str, int, int]]:
            return [(kind, msg.engine_index, value) for msg in fe.coordinator_messages[mark:]
                    for kind, value in (("wave_complete", msg.wave_complete), ("start_wave", msg.start_wave))
                    if value is not None]

        if fe.start_index > 0:
            # no rank 0: nobody reports the wave (ECP-DP-5.5), so adopting it shows in what comes next
            _judge_adoption_without_rank_0(fe, n, control)
            return
        # vLLM's rank 0 reports the wave of the whole DP group; an engine may also report its own
        try:
            fe.wait(lambda: any(kind == "wave_complete" for kind, _, _ in control()), 5.0,
                    "a wave_complete once the stamped requests finished")
        except CaseTimeout:
            if not control():
                # vLLM 0.33 runs DP waves for MoE models only: replicas of a dense model have no wave
                raise feature_missing(fe, "dp_waves", "the engines sent no DP wave control (start_wave, "
                                      "wave_complete) for the stamped requests, so adopting a wave cannot be "
                                      "judged") from None
            raise
        fe.observe()
        first: dict[int, int] = {}
        for kind, index, value in control():
            if kind == "wave_complete":
                first.setdefault(index, value)
            if kind == "start_wave" and value < NEWER_WAVE:
                raise CaseFailure(f"rank {index} announced start_wave={value} after requests stamped "
                                f"current_wave={NEWER_WAVE}; an engine receiving a newer wave adopts it")
        for index, value in sorted(first.items()):
            if value != NEWER_WAVE:
                raise CaseFailure(f"rank {index} was sent requests stamped current_wave={NEWER_WAVE} but reported "
                                f"wave_complete={value}; an engine receiving a newer wave adopts it")


def _judge_adoption_without_rank_0(fe, n: int, control) -> None:
    """A launch whose ranks exclude 0 sends no ``wave_complete``; each rank that adopted the stamped
    wave moves on to the next one when idle (``ECP-DP-5.5``), so an ADD stamped with the adopted,
    now completed, wave makes that idle rank announce ``start_wave`` of a newer one (``ECP-DP-5.2``).
    An engine that ignored the stamp would still be below it: the same ADD is news to it, and it
    announces nothing."""
    import msgspec

    violation = wave_complete_violation(fe)
    if violation is not None:
        raise violation
    for k in range(n):
        rank = fe.start_index + k
        rid = fe.new_id(f"wave{NEWER_WAVE}-again-rank{rank}")
        fe.add(msgspec.structs.replace(fe.request(rid, max_tokens=1), current_wave=NEWER_WAVE), engine=k)
        fe.wait_finished(rid, max_tokens=1)
        try:
            fe.wait(lambda: any(kind == "start_wave" and index == rank for kind, index, _ in control()), 5.0,
                    f"a start_wave from rank {rank} for an ADD of the wave it completed")
        except CaseTimeout:
            raise CaseFailure(f"rank {rank} finished requests stamped current_wave={NEWER_WAVE}, then took another "
                            f"ADD stamped {NEWER_WAVE} without announcing start_wave: a rank that adopted wave "
                            f"{NEWER_WAVE} is past it once idle and starts the next wave for a request of a "
                            "completed one (this launch has no rank 0, so no wave_complete is due)") from None
    for kind, index, value in control():
        if kind == "start_wave" and value <= NEWER_WAVE:
            raise CaseFailure(f"rank {index} announced start_wave={value} after finishing requests stamped "
                            f"current_wave={NEWER_WAVE}; a rank that adopted that wave announces a newer one")
