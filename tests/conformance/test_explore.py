"""``ecp conformance explore`` / ``replay``: sessions, shrinking, and short seeded explorations of the
reference engine (with and without one of its ``--bug`` faults)."""

import argparse
import json
import sys
from pathlib import Path

import pytest

from ecp.conformance.explore.commands import parse_time
from ecp.conformance.explore.generate import PROMPT_LENS, draw
from ecp.conformance.explore.reproducer import ReproducerError, read
from ecp.conformance.explore.run import ExploreOptions, explore
from ecp.conformance.explore.session import Session, Topology
from ecp.conformance.explore.shrink import Budget, shrink

ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process"]


def test_sessions_are_drawn_from_their_seed_and_round_trip():
    a, b = draw(7, max_engines=2), draw(7, max_engines=2)
    assert a.to_dict() == b.to_dict()
    assert draw(8, max_engines=2).to_dict() != a.to_dict()
    assert Session.from_dict(json.loads(json.dumps(a.to_dict()))).to_dict() == a.to_dict()
    assert all(s.topology.engines == 1 for s in (draw(k) for k in range(20)))
    with_bad = [draw(k, 2) for k in range(40)]
    legal = [draw(k, 2, malformed=False) for k in range(40)]
    assert any(st["op"] == "garbage" for s in with_bad for st in s.steps)
    assert not any(st["op"] == "garbage" for s in legal for st in s.steps)
    assert [len(s.steps) for s in legal] == [len(s.steps) for s in with_bad]
    # without duplicates: the same sessions less their duplicate steps
    plain = [draw(k, 2, duplicates=False) for k in range(40)]
    assert any(st["op"] == "duplicate" for s in with_bad for st in s.steps)
    assert [s.steps for s in plain] == [[st for st in s.steps if st["op"] != "duplicate"] for s in with_bad]


@pytest.mark.parametrize("bad", [
    {"steps": []},
    {"topology": {"engines": 0}, "steps": []},
    {"topology": {}, "steps": [{"op": "fly"}]},
    {"topology": {}, "steps": [{"op": "wait", "until": "forever"}]},
    {"topology": {}, "steps": [{"op": "add", "ref": 0}]},
    {"topology": {}, "steps": [{"op": "garbage", "frames": ["zz"]}]},
])
def test_a_malformed_session_is_a_clear_error(bad):
    with pytest.raises(ValueError):
        Session.from_dict(bad)


def test_ddmin_keeps_exactly_the_steps_the_failure_needs():
    steps = [{"op": "wait", "until": "idle"} for _ in range(20)]
    steps[3] = {"op": "add", "ref": 3, "max_tokens": 1500, "logprobs": 3}
    steps[11] = {"op": "abort", "targets": [3]}
    session = Session(Topology(engines=2, clients=2, coordinator=True), steps, seed=1)
    runs = []

    def fails(s: Session) -> bool:
        runs.append(s)
        ops = [st["op"] for st in s.steps]
        return "add" in ops and "abort" in ops and ops.index("add") < ops.index("abort") \
            and any(st.get("max_tokens", 0) >= 200 for st in s.steps)

    best = shrink(session, fails, Budget(runs=500, seconds=30))
    assert [st["op"] for st in best.steps] == ["add", "abort"]
    assert best.topology == Topology(1, 1, False)
    assert best.steps[0]["max_tokens"] == 200  # the simplest value that still fails
    assert best.steps[0]["logprobs"] is None
    assert fails(best)
    assert len(runs) < 120


def test_shrinking_stops_at_its_budget():
    session = Session(Topology(), [{"op": "wait", "until": "idle"}] * 50)
    budget = Budget(runs=5, seconds=30)
    best = shrink(session, lambda s: True, budget)
    assert budget.used == 5 and len(best.steps) < 50


def test_durations():
    assert parse_time("90") == 90 and parse_time("2m") == 120 and parse_time("500ms") == 0.5
    for bad in ("", "-1", "0", "2 weeks"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_time(bad)


def test_a_file_that_is_not_a_reproducer_is_refused(tmp_path, run_ecp):
    path = tmp_path / "x.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ReproducerError):
        read(path)
    code, _ = run_ecp("conformance", "replay", str(path), "--", *ENGINE)
    assert code == 2


def test_no_finding_against_the_fault_free_engine(tmp_path):
    opts = ExploreOptions(command=ENGINE, engine_count=2, budget_s=60, max_sessions=4, seed=11, max_steps=12,
                          out_dir=tmp_path, quiet_window_s=0.1)
    report = explore(opts, say=lambda line: None)
    assert report.sessions == 4 and report.messages > 0
    assert report.findings == [], [(f.clause, f.message) for f in report.findings]


def test_a_fault_is_found_shrunk_and_replayed(tmp_path, run_ecp):
    opts = ExploreOptions(command=[*ENGINE, "--bug", "duplicate-output"], engine_count=2, budget_s=20.0, seed=3,
                          out_dir=tmp_path, shrink_runs=4, confirm_runs=1, max_findings=1, step_timeout_s=2.0,
                          quiet_window_s=0.1)
    report = explore(opts, say=lambda line: None)
    [found] = report.findings
    assert found.clause == "ECP-OUT-1" and found.reproducible
    assert found.steps_after is not None and found.steps_after <= 10
    doc = read(found.path)
    assert doc["clause"] == "ECP-OUT-1" and doc["frames"] and doc["command"][-1] == "duplicate-output"
    code, out = run_ecp("conformance", "replay", str(found.path), "--step-timeout", "2s")
    assert code == 1 and "ECP-OUT-1 again" in out
    code, out = run_ecp("conformance", "replay", str(found.path), "--step-timeout", "2s", "--", *ENGINE)
    assert code == 0 and "no violation" in out


@pytest.mark.parametrize("lacks", [[], ["logprobs"]])
def test_a_replay_is_told_what_the_exploration_was_told_the_engine_lacks(tmp_path, run_ecp, lacks):
    """An exploration run with --engine-lacks logprobs writes it into its reproducers, so that their
    replay judges as the exploration did (vLLM's model-free executor returns no logprobs)."""
    from ecp.conformance.explore import reproducer

    session = Session(Topology(), [{"op": "add", "ref": 0, "max_tokens": 2, "prompt_len": 1, "logprobs": 1}])
    path = reproducer.write(tmp_path / "r.json", role="engine", session=session, clause="ECP-OUT-1", message="-",
                            command=[*ENGINE, "--bug", "no-logprobs"], transport="ipc", engine_count=1, entries=[],
                            recurrence={}, engine_lacks=tuple(lacks))
    code, out = run_ecp("conformance", "replay", str(path), "--step-timeout", "2s")
    if lacks:
        assert code == 0 and "no violation" in out, out
    else:
        assert code == 1 and "ECP-HS-4" in out, out


def test_a_handshake_fault_is_found_shrunk_and_replayed(tmp_path):
    """The short seeded run for a rule the cases judge on the handshake (ECP-HS-1): found in the
    first session, shrunk to at most 10 steps, and the shrunk session shows it again."""
    opts = ExploreOptions(command=[*ENGINE, "--bug", "ready-flags-differ"], engine_count=2, budget_s=20.0, seed=5,
                          max_steps=4, max_sessions=1, out_dir=tmp_path, shrink_runs=1, confirm_runs=1,
                          max_findings=1, step_timeout_s=2.0, quiet_window_s=0.1)
    [found] = explore(opts, say=lambda line: None).findings
    assert found.clause == "ECP-HS-1" and found.reproducible and found.replays == "1/1"
    assert found.steps_after is not None and found.steps_after <= 10 and "READY says" in found.message


def test_values_only_get_simpler():
    session = Session(Topology(), [{"op": "add", "ref": 0, "max_tokens": 1500, "prompt_len": 300, "id_len": 70}])
    best = shrink(session, lambda s: bool(s.steps), Budget(runs=100, seconds=30))
    assert best.steps == [{**session.steps[0], "max_tokens": 2, "prompt_len": 1, "id_len": 8,
                           "abort_immediately": False, "oversize": False, "temperature": 0.0, "client": 0,
                           "engine": 0}]


def test_a_slow_engine_is_not_a_stalled_one(tmp_path):
    """A request that takes longer than the step timeout but keeps producing is waited for."""
    import zmq

    from ecp.conformance.engine.session import EngineRunConfig
    from ecp.conformance.explore.execute import play

    cfg = EngineRunConfig(command=[*ENGINE, "--step-time-ms", "2"], workdir=str(tmp_path), quiet_window_s=0.1)
    session = Session(Topology(), [{"op": "add", "ref": 0, "max_tokens": 600, "prompt_len": 4},
                                   {"op": "wait", "until": "terminal", "ref": 0}])
    ctx = zmq.Context()
    try:
        result = play(session, cfg, ctx, 1, step_timeout=0.5)
    finally:
        ctx.term()
    assert result.played == [0, 1] and result.run_s > 1.2
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


def test_some_sessions_get_one_process_fault_and_the_rest_stays_the_same():
    with_faults = [draw(k, 2) for k in range(200)]
    without = [draw(k, 2, process_faults=False) for k in range(200)]
    faulted = 0
    for a, b in zip(with_faults, without):
        ops = [st["op"] for st in a.steps]
        extra = [st for st in a.steps if st["op"] in ("stop", "kill")]
        assert len(extra) <= 1 and [st for st in a.steps if st not in extra] == b.steps
        faulted += bool(extra)
        if "kill" in ops:  # a SIGKILL ends what is played: it comes late
            assert ops.index("kill") >= (len(ops) - 1) * 2 // 3
    assert 10 <= faulted <= 60
    assert any(st["op"] == "kill" for s in with_faults for st in s.steps)


HIDER = [sys.executable, str(Path(__file__).with_name("dead_rank_hider.py")), "--handshake-address",
         "{handshake_address}", "--engine-count", "{engine_count}"]
PROCESS_RANKS = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
                 "--engine-count", "{engine_count}"]
KILL_SESSION = Session(Topology(engines=2), [
    {"op": "add", "ref": 0, "max_tokens": 1500, "prompt_len": 4, "engine": 1},
    {"op": "wait", "until": "running", "ref": 0},
    {"op": "call", "method": "is_sleeping", "engine": 1},
    {"op": "kill", "engine": 1},
    {"op": "add", "ref": 1, "max_tokens": 2, "prompt_len": 4, "engine": 0},
])


def _play(session, command, tmp_path, engines=2, step_timeout=1.5):
    import zmq

    from ecp.conformance.engine.session import EngineRunConfig
    from ecp.conformance.explore.execute import play

    cfg = EngineRunConfig(command=command, workdir=str(tmp_path), engine_count=engines, quiet_window_s=0.1)
    ctx = zmq.Context()
    try:
        return play(session, cfg, ctx, 1, step_timeout=step_timeout)
    finally:
        ctx.term()


def test_a_resume_of_a_sleeping_rank_is_not_played(tmp_path):
    """The fault-free exploration once shrank to: sleep, resume_scheduler, ADD on one rank. The reference
    engine (as vLLM 0.33) ran the ADD after the resume, which the ADD-while-asleep rule (ECP-UTIL-8)
    took for tokens produced while asleep; the protocol defines no resume of a sleeping engine."""
    session = Session(Topology(engines=1), [
        {"op": "call", "engine": 0, "client": 0, "method": "sleep", "args": [1, "abort"]},
        {"op": "call", "engine": 0, "client": 0, "method": "resume_scheduler", "args": []},
        {"op": "add", "ref": 0, "engine": 0, "client": 0, "max_tokens": 2, "prompt_len": 1},
    ])
    result = _play(session, ENGINE, tmp_path, engines=1)
    assert result.played == [0, 2]
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


def test_a_killed_rank_is_seen_dead_and_nothing_more_is_asked_of_it(tmp_path):
    """One process per rank: the supervisor takes the engine down, the harness sees it and fails
    closed; the killed rank's running request and unanswered call are not findings."""
    result = _play(KILL_SESSION, PROCESS_RANKS, tmp_path)
    assert result.played == [0, 1, 2, 3] and result.process_fault
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


def test_an_engine_that_hides_a_dead_rank_is_a_finding(tmp_path):
    # Known open nondeterminism: in about 1 play in 6 the SIGKILL is played but the harness does not
    # report the hidden rank. Likely cause (measured in part): ZMQ connects in the background, so a
    # connection the rank makes after the double forks its holder is the rank process's alone (its
    # /proc/PID/fd held sockets the holder's did not in 5 of 12 launches, which ones not identified);
    # when one is its input connection, the SIGKILL closes it and the harness's input ROUTER sees it
    # close: the rank is seen dead, no finding. Forking only once every connect's monitor said
    # EVENT_CONNECTED left about 1 launch in 5 without a handshake (not understood), so the double
    # still forks at READY. Up to 3 plays, each on a fresh launch; every play that reports must
    # report exactly this finding.
    plays = []
    for attempt in range(3):
        workdir = tmp_path / str(attempt)
        workdir.mkdir()
        result = _play(KILL_SESSION, HIDER, workdir)
        plays.append((result.played, [(f.clause, f.message) for f in result.findings]))
        if result.findings:
            break
    assert [f.clause for f in result.findings] == ["ECP-ROB-3"], plays
    assert result.findings[0].step == 3 and "SIGKILLed" in result.findings[0].message


def test_the_abort_bound_is_stretched_by_the_time_a_rank_stood_still():
    from ecp.conformance.explore.oracle import History, Stop

    h = History(stops=[Stop(frozenset({1}), 10.2, 11.0), Stop(frozenset({0, 1}), 11.2, 11.4),
                       Stop(frozenset({1}), 20.0, 21.0)])
    assert h.stretched(0, 10.0, 0.5) == 10.5  # rank 0 did not stop before 10.5
    assert h.stretched(1, 10.0, 0.5) == pytest.approx(10.5 + 0.8 + 0.2)  # the second stop began before 11.3
    assert h.stretched(1, 10.6, 0.5) == pytest.approx(11.1 + 0.4 + 0.2)  # only what is left of the first


def test_a_session_with_a_stopped_rank_plays_on_after_sigcont(tmp_path):
    """The rank stands still longer than the ABORT bound; after SIGCONT the session goes on and
    ends as usual, with no finding."""
    session = Session(Topology(), [
        {"op": "add", "ref": 0, "max_tokens": 1500, "prompt_len": 4},
        {"op": "wait", "until": "running", "ref": 0},
        {"op": "abort", "targets": [0]},
        {"op": "stop", "ms": 700},
        {"op": "add", "ref": 1, "max_tokens": 8, "prompt_len": 4},
        {"op": "wait", "until": "terminal", "ref": 1},
    ])
    result = _play(session, [*ENGINE, "--step-time-ms", "2"], tmp_path, engines=1)
    assert result.played == [0, 1, 2, 3, 4, 5] and result.process_fault
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


def test_a_healthy_peer_is_reused_and_a_process_fault_retires_it(tmp_path):
    from ecp.conformance.explore.run import Runner

    simple = Session(Topology(), [{"op": "add", "ref": 0, "max_tokens": 8, "prompt_len": 4},
                                  {"op": "wait", "until": "terminal", "ref": 0}])
    stopped = simple.with_steps([*simple.steps, {"op": "stop", "ms": 20}])
    runner = Runner(ExploreOptions(command=ENGINE, quiet_window_s=0.1, step_timeout_s=3.0), str(tmp_path))
    try:
        launches = []
        for session in (simple, simple, stopped, simple, simple):
            result = runner.play(session, reuse=True)
            assert result.findings == [], [(f.clause, f.message) for f in result.findings]
            assert result.played == list(range(len(session.steps)))
            launches.append(runner.launches)
        runner.play(simple)  # a replay: always a fresh launch
        assert launches == [1, 1, 1, 2, 2] and runner.launches == 3
    finally:
        runner.close()


def test_an_interrupt_while_a_pooled_peer_is_taken_stops_that_peer(tmp_path, monkeypatch):
    """SIGTERM arriving while the runner takes a healthy peer out of its pool (its liveness check)
    stops that peer: between the pool and the session it belongs to the call that took it."""
    import os
    import signal

    from ecp.conformance.explore.run import Runner
    from ecp.conformance.interrupts import Interrupted, interruptible

    simple = Session(Topology(), [{"op": "add", "ref": 0, "max_tokens": 2, "prompt_len": 4},
                                  {"op": "wait", "until": "terminal", "ref": 0}])
    runner = Runner(ExploreOptions(command=ENGINE, quiet_window_s=0.1, step_timeout_s=3.0), str(tmp_path))
    pooled = None
    try:
        runner.play(simple, reuse=True)
        [pooled] = runner._idle.values()
        alive = pooled.alive

        def alive_then_interrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            return all([alive() for _ in range(1000)])  # (calls: places for the handler to run)

        monkeypatch.setattr(pooled, "alive", alive_then_interrupted)
        with interruptible():
            with pytest.raises(Interrupted):
                runner.play(simple, reuse=True)
        assert not runner._idle
        assert pooled.handle.proc.poll() is not None, "the pooled peer outlived the interrupt"
    finally:
        monkeypatch.undo()  # (the patched liveness check signals this process)
        if pooled is not None and pooled.alive() and pooled not in runner._idle.values():
            pooled.close()  # the test failed: the peer the interrupt orphaned
        runner.close()


def test_a_paused_rank_is_resumed_only_after_it_refused_what_was_added(tmp_path):
    """The ADD goes on client 1's socket, the session's closing resume on client 0's: they reach the
    engine in either order, so the resume waits for the ADD's engine_paused ERROR."""
    session = Session(Topology(clients=2), [
        {"op": "call", "client": 1, "method": "pause_generation", "args": ["wait", True]},
        {"op": "add", "ref": 0, "client": 1, "max_tokens": 2, "prompt_len": 1},
    ])
    result = _play(session, ENGINE, tmp_path, engines=1)
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]
    order = [(e.direction, "resume" if "resume_scheduler" in str(e.decoded) else "refusal")
             for e in result.entries if "resume_scheduler" in str(e.decoded) or "engine_paused" in str(e.decoded)]
    assert order[:2] == [("recv", "refusal"), ("sent", "resume")], order


@pytest.mark.parametrize("bug", [None, "keep-pause-refuses"])
def test_an_add_during_a_keep_pause_is_queued_and_a_refusal_is_a_finding(tmp_path, bug):
    """pause_generation mode keep queues new ADDs (ECP-REQ-7.2, as vLLM 0.33): the ADD runs after
    the session's closing resume; an engine that refuses it with engine_paused is a finding."""
    session = Session(Topology(), [
        {"op": "call", "method": "pause_generation", "args": ["keep", False], "engine": 0},
        {"op": "add", "ref": 0, "max_tokens": 2, "prompt_len": 1, "engine": 0},
    ])
    result = _play(session, [*ENGINE, *(["--bug", bug] if bug else [])], tmp_path, engines=1)
    found = [(f.clause, f.message) for f in result.findings]
    if bug is None:
        assert found == []
    else:
        assert any(c == "ECP-REQ-7" and "did not refuse ADDs" in m for c, m in found), found


def test_a_rank_changes_state_only_after_every_call_to_it_was_answered(tmp_path):
    """is_sleeping goes on client 1's socket, the session's closing wake-up on client 0's: the
    wake-up waits for the is_sleeping reply, whose value then says asleep."""
    session = Session(Topology(clients=2), [
        {"op": "call", "client": 0, "method": "sleep", "args": [1, "wait"]},
        {"op": "call", "client": 1, "method": "is_sleeping", "args": []},
    ])
    result = _play(session, ENGINE, tmp_path, engines=1)
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]
    order = [(e.direction, "wake_up" if "wake_up" in str(e.decoded) else "is_sleeping")
             for e in result.entries if e.direction == "sent" and "wake_up" in str(e.decoded)
             or e.direction == "recv" and e.channel == "output[1]" and "utility_output=UtilityOutput" in str(e.decoded)]
    assert order[:2] == [("recv", "is_sleeping"), ("sent", "wake_up")], order


#: one session that meets every rule the explorer judges beyond the machine's frame by frame (and
#: beyond what the sessions judged before): a duplicate ADD of a request in flight, an oversize
#: prompt, a rank other than 0 going idle under a coordinator, a sleep and a pause with their mode
#: left out while a request runs, an ADD while asleep, a malformed UTILITY whose call id is readable
RULES_SESSION = Session(Topology(engines=2, coordinator=True), [
    {"op": "add", "ref": 0, "max_tokens": 1500, "prompt_len": 4, "engine": 0},
    {"op": "duplicate", "ref": 0},
    {"op": "add", "ref": 1, "max_tokens": 2, "prompt_len": 4, "engine": 0, "oversize": True},
    {"op": "add", "ref": 2, "max_tokens": 8, "prompt_len": 4, "engine": 1},
    {"op": "wait", "until": "terminal", "ref": 2},
    {"op": "add", "ref": 3, "max_tokens": 1500, "prompt_len": 4, "engine": 1},
    {"op": "wait", "until": "running", "ref": 3},
    {"op": "call", "method": "pause_scheduler", "args": [], "engine": 1},
    {"op": "wait", "until": "running", "ref": 0},
    {"op": "call", "method": "sleep", "args": [], "engine": 0},
    {"op": "add", "ref": 4, "max_tokens": 2, "prompt_len": 4, "engine": 0},
    {"op": "garbage", "frames": ["03", "9400ce7ec00001ab69735f736c656570696e67a3737472"]},
    {"op": "call", "method": "ecp_no_such_method", "args": [1], "engine": 1, "refused": True},
])
#: the faults of ``ecp engine`` RULES_SESSION shows, each with the clause and words of its finding
RULES_FAULTS = {
    "ready-flags-differ": ("ECP-HS-1", "READY says"),
    "no-parallel-config-hash": ("ECP-HS-5", "without a parallel_config_hash"),
    "wave-complete-from-every-rank": ("ECP-DP-5", "sent wave_complete"),
    "duplicate-error-finished": ("ECP-OUT-5", "duplicate ADD of running request"),
    "rejected-add-retryable": ("ECP-OUT-5", "over max_model_len"),
    "sleep-default-keep": ("ECP-UTIL-8", "sleep() to rank 0 replied before"),
    "pause-default-keep": ("ECP-UTIL-8", "pause_scheduler() to rank 1 replied before"),
    "drop-adds-while-asleep": ("ECP-UTIL-8", "was dropped"),
    "refused-utility-succeeds": ("ECP-ROB-1", "refused call was answered with a result"),
}


def test_the_rules_session_finds_nothing_against_the_fault_free_engine(tmp_path):
    result = _play(RULES_SESSION, ENGINE, tmp_path)
    assert result.played == list(range(len(RULES_SESSION.steps)))
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


def test_the_rules_session_finds_each_fault_of_one_engine_that_has_them_all(tmp_path):
    """One launch with every fault at once: each shows as its own finding (its clause, its words).

    A 1 ms step: the default-mode faults show only while a 1,500-token request still runs when the
    sleep or pause reaches its rank, and a flat-out engine can finish it first when the harness is
    descheduled on a loaded machine (sleep-default-keep was missed so in a 3-worker run)."""
    command = [*ENGINE, "--step-time-ms", "1", *(arg for fault in RULES_FAULTS for arg in ("--bug", fault))]
    result = _play(RULES_SESSION, command, tmp_path, step_timeout=0.5)
    found = [(f.clause, f.message) for f in result.findings]
    missing = [fault for fault, (clause, words) in RULES_FAULTS.items()
               if not any(c == clause and words in m for c, m in found)]
    assert not missing, (missing, found)


def test_a_refused_call_answered_with_a_result_is_a_finding():
    from ecp.conformance.explore.oracle import CallRecord, History, check_calls
    from ecp.spec import UtilityOutput, UtilityResult

    class Fe:
        start_index = 0
        replies = {7: [argparse.Namespace(utility=UtilityOutput(7, None, UtilityResult(None, None)))],
                   8: [argparse.Namespace(utility=UtilityOutput(8, "Call to x method failed: unknown", None))],
                   0x7EC00001: [argparse.Namespace(utility=UtilityOutput(0x7EC00001, "refused", None))]}

    history = History(calls={7: CallRecord(7, "ecp_no_such_method", [1], 0, 3, refused=True),
                             8: CallRecord(8, "is_sleeping", [1, 2], 0, 4, refused=True)},
                      refused_ids={0x7EC00001})
    assert [(f.clause, f.step) for f in check_calls(Fe(), history)] == [("ECP-UTIL-3", 3)]


def test_the_draw_holds_the_new_steps():
    """Duplicates come right behind a long ADD; some sessions refuse a call; pauses and sleeps
    sometimes leave their arguments out, and an ADD sometimes follows a sleep."""
    sessions = [draw(k, 2) for k in range(300)]
    steps = [(s, i, st) for s in sessions for i, st in enumerate(s.steps)]
    dups = [(s, i) for s, i, st in steps if st["op"] == "duplicate"]
    assert dups and all(s.steps[i - 1]["op"] == "add" and s.steps[i - 1]["ref"] == s.steps[i]["ref"]
                        and s.steps[i - 1]["max_tokens"] >= 200 for s, i in dups)
    assert any(st.get("refused") for _, _, st in steps)
    assert any(st["op"] == "garbage" and st["frames"][0] == "03" and len(st["frames"]) == 2 for _, _, st in steps)
    assert any(_readable_add(st) for _, _, st in steps)
    assert any(st["op"] == "call" and st["method"] == "sleep" and len(st["args"]) < 2 for _, _, st in steps)
    assert any(st["op"] == "call" and st["method"].startswith("pause_") and not st["args"] for _, _, st in steps)
    assert any(st["op"] == "call" and st["method"] == "sleep" and s.steps[i + 2]["op"] == "add"
               for s, i, st in steps if i + 2 < len(s.steps))
    # every sleep and wake-up is followed by an is_sleeping on its rank and client, whose answer is known
    # (a process fault may come between them)
    for s, i, st in steps:
        if st["op"] == "call" and st["method"] in ("sleep", "wake_up") and not st.get("refused"):
            query = next(later for later in s.steps[i + 1:] if later["op"] not in ("stop", "kill"))
            assert (query["op"], query["method"], query["engine"], query["client"]) == \
                ("call", "is_sleeping", st["engine"], st["client"]), (s.seed, i)


def test_state_calls_follow_the_draw_s_model_of_each_rank():
    """Half the calls change a rank's state as the draw's model allows: a wake_up only for a rank it
    put to sleep, a resume only for one it paused, no second pause or sleep of a paused or sleeping
    rank; an ADD on its rank and client follows every sleep and pause."""
    from ecp.conformance.explore.generate import MODE_CALLS, STATE_CALLS

    calls = 0
    for k in range(200):
        session = draw(k, 2)
        state: dict[int, str | None] = {}
        for i, st in enumerate(session.steps):
            if st["op"] != "call" or st["method"] not in STATE_CALLS:
                continue
            calls += 1
            engine, method = st["engine"], st["method"]
            assert (method in MODE_CALLS and state.get(engine) is None) or \
                (method == "wake_up" and state.get(engine) == "sleep") or \
                (method == "resume_scheduler" and state.get(engine) == "pause"), (k, i, st, state)
            state[engine] = None if method in ("wake_up", "resume_scheduler") else \
                "sleep" if method == "sleep" else "pause"
            if method in MODE_CALLS:
                assert any(later["op"] == "add" and later["engine"] == engine and later["client"] == st["client"]
                           for later in session.steps[i + 1:]), (k, i)
    assert calls > 200


def test_a_duplicate_neither_refused_nor_run_after_the_original_is_a_finding():
    """The machine accepts outputs of a new request after the original's terminal while an ERROR is
    owed (a duplicate may reach the engine after the original ended there); the oracle tells that
    from an engine that dropped the duplicate or ran it beside the original (ECP-REQ-2)."""
    from ecp.conformance.explore.oracle import History, RequestRecord, check_errors
    from ecp.spec import EngineCoreOutput, FinishReason, RequestError

    def seen(t, out, finished=None):
        return argparse.Namespace(t=t, output=out, finished_requests=finished)

    tokens, length = EngineCoreOutput("r", [5]), EngineCoreOutput("r", [6], finish_reason=FinishReason.LENGTH)
    refusal = EngineCoreOutput("r", [], finish_reason=FinishReason.ERROR,
                               error=RequestError("duplicate_request_id", "r is running", False))

    class Fe:
        def __init__(self, outputs):
            self.outputs = outputs

        def seen(self, rid):
            return self.outputs

    def findings(outputs):
        history = History(requests={"r": RequestRecord("r", 0, 2, 1, duplicate_at=1.0, duplicate_step=2)})
        return [(f.clause, f.step, f.message) for f in check_errors(Fe(outputs), history)]

    # max_tokens=2: the original's two tokens end it, then the duplicate's two as a new request
    assert findings([seen(1.1, tokens), seen(1.2, length, ["r"]), seen(1.3, tokens), seen(1.4, length, ["r"])]) == []
    assert findings([seen(1.1, tokens), seen(1.15, refusal), seen(1.2, length, ["r"])]) == []
    beside = findings([seen(1.1, tokens), seen(1.15, tokens), seen(1.2, tokens), seen(1.3, length, ["r"]),
                       seen(1.4, length, ["r"])])
    assert [(c, step) for c, step, _ in beside] == [("ECP-REQ-2", 2)] and "beside the original" in beside[0][2]
    dropped = findings([seen(1.1, tokens), seen(1.2, length, ["r"])])
    assert [(c, step) for c, step, _ in dropped] == [("ECP-REQ-2", 2)] and "neither refused nor run" in dropped[0][2]


def test_is_sleeping_on_a_paused_rank_is_not_judged(tmp_path):
    """The sleep table lets a paused engine answer is_sleeping either way (vLLM 0.33 says true: its
    is_sleeping is is_scheduler_paused() or the executor's state); the explorer found that as
    ECP-UTIL-8 against vLLM's engine core while it expected false. Here rank 1 answers true (its
    answer inverted) while paused: no finding."""
    session = Session(Topology(engines=2), [
        {"op": "call", "engine": 1, "client": 0, "method": "pause_scheduler", "args": ["abort", True]},
        {"op": "call", "engine": 1, "client": 0, "method": "is_sleeping", "args": []},
    ])
    result = _play(session, [*ENGINE, "--bug", "inconsistent-is-sleeping"], tmp_path)
    assert result.played == [0, 1]
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


# ------------------------------------------------------------------ the explorer as a user runs it
def test_long_requests_follow_the_engine_s_pace(tmp_path):
    from ecp.conformance.explore.generate import LONG_REQUEST_S, LONG_TOKENS, MIN_LONG_TOKENS, long_tokens
    from ecp.conformance.explore.run import Runner

    assert long_tokens(None) is None
    assert long_tokens(0.001) == round(LONG_REQUEST_S / 0.001)
    assert long_tokens(1.0) == MIN_LONG_TOKENS
    runner = Runner(ExploreOptions(command=ENGINE, engine_count=2), str(tmp_path))
    try:
        seed = next(s for s in range(50) if any(st["op"] == "add" and st["max_tokens"] == LONG_TOKENS
                                                for st in draw(s, 2).steps))
        assert runner.draw(seed) == draw(seed, 2)  # pace unknown: as drawn
        runner.token_s, runner.max_model_len = 0.001, 4096
        lengths = {st["max_tokens"] for st in runner.draw(seed).steps if st["op"] == "add"}
        assert LONG_TOKENS not in lengths and round(LONG_REQUEST_S / 0.001) in lengths
        runner.token_s = 0.00001  # a fast engine: as long as its max_model_len allows
        lengths = {st["max_tokens"] for st in runner.draw(seed).steps if st["op"] == "add"}
        assert max(lengths) == 4096 - max(PROMPT_LENS) - 1
    finally:
        runner.close()


ABORTED_LONG = [{"op": "add", "ref": 0, "engine": 0, "client": 0, "max_tokens": 4000, "prompt_len": 4, "id_len": 8,
                 "temperature": 0.0, "logprobs": None, "prompt_logprobs": None, "abort_immediately": False,
                 "wave": None, "oversize": False},
                {"op": "wait", "until": "running", "ref": 0},
                {"op": "abort", "client": 0, "engine": 0, "targets": [0]}]


@pytest.mark.parametrize("bug, found", [("ignore-abort", ["ECP-ABORT-2"]), (None, [])])
def test_a_session_ending_with_an_abort_watches_past_its_grace(tmp_path, bug, found):
    """The ABORT is the session's last step: an engine that ignores it is seen producing after the
    grace only if the session is still listening then (its quiet window alone is shorter)."""
    from ecp.conformance.explore.run import Runner

    # 1 ms a step: the 4,000-token request still runs well past the grace on a quiet machine too (flat
    # out, the synthetic engine can finish it within the grace, and an ignored ABORT then shows nothing)
    command = [*ENGINE, "--step-time-ms", "1", *(["--bug", bug] if bug else [])]
    runner = Runner(ExploreOptions(command=command, quiet_window_s=0.1, step_timeout_s=5.0), str(tmp_path))
    try:
        result = runner.play(Session(Topology(), ABORTED_LONG))
    finally:
        runner.close()
    assert [f.clause for f in result.findings] == found, [f.message for f in result.findings]


def test_the_budget_bounds_the_whole_run_shrinking_included(tmp_path):
    budget = 3.0
    opts = ExploreOptions(command=[*ENGINE, "--bug", "duplicate-output"], budget_s=budget, seed=3,
                          out_dir=tmp_path, shrink_runs=200, shrink_s=300, max_findings=1, step_timeout_s=2.0,
                          quiet_window_s=0.1, progress_s=0)
    report = explore(opts, say=lambda line: None)
    [found] = report.findings
    assert found.path is not None and found.path.exists()
    # (the session or replay playing when the budget ran out is finished: a few seconds at most here)
    assert report.elapsed_s < budget + 10, report.elapsed_s


def test_the_cli_s_defaults_explore_two_ranks():
    from ecp.conformance.explore.commands import options

    opts = options(["engine", "--", *ENGINE])
    assert opts.engine_count == 2 and opts.command == ENGINE
    assert options(["engine", "--engine-count", "1", "--", *ENGINE]).engine_count == 1


# ------------------------------------------------------------------ waves (ECP-DP-5)
STAMPED = Session(Topology(engines=2, coordinator=True), [
    {"op": "add", "ref": 0, "engine": 0, "max_tokens": 2, "prompt_len": 4, "wave": 1},
    {"op": "wait", "until": "terminal", "ref": 0},
])


@pytest.mark.parametrize("bug, found", [("ignore-stamped-wave", ["ECP-DP-5"]), (None, [])])
def test_a_stamped_wave_is_ahead_of_the_peer_also_on_a_reused_one(tmp_path, bug, found):
    """The first session leaves the reused peer some waves on (its requests and closing probes end
    waves); the second stamps wave 1, counted from where the peer is, so an engine that ignores the
    stamp reports the wave below it -- right behind the request's end, which is judged too."""
    from ecp.conformance.explore.run import Runner

    unstamped = STAMPED.with_steps([{**STAMPED.steps[0], "wave": None}, STAMPED.steps[1]])
    runner = Runner(ExploreOptions(command=[*ENGINE, *(["--bug", bug] if bug else [])], engine_count=2,
                                   quiet_window_s=0.1, step_timeout_s=3.0), str(tmp_path))
    try:
        first = runner.play(unstamped, reuse=True)
        assert first.findings == [], [(f.clause, f.message) for f in first.findings]
        result = runner.play(STAMPED, reuse=True)
        assert runner.launches == 1
    finally:
        runner.close()
    assert [f.clause for f in result.findings] == found, [f.message for f in result.findings]


def test_seed_7_s_first_session_shows_an_ignored_wave_stamp(tmp_path):
    """The CLI's seed 7 starts with a session that stamps wave 1 on a fresh launch's rank 0: an engine
    that ignores the stamp reports wave_complete 0 at once behind the request's end (a bound of half
    a second after that end, as the property had, saw nothing, and seed 7 found nothing in 120 s)."""
    from ecp.conformance.explore.commands import options
    from ecp.conformance.explore.run import Runner

    opts = options(["engine", "--seed", "7", "--quiet-window", "0.1", "--", *ENGINE, "--bug", "ignore-stamped-wave"])
    runner = Runner(opts, str(tmp_path))
    try:
        result = runner.play(runner.draw(opts.seed), reuse=True)
    finally:
        runner.close()
    assert [(f.clause, "wave_complete=0" in f.message) for f in result.findings] == [("ECP-DP-5", True)], \
        [f.message for f in result.findings]


def _readable_add(step) -> bool:
    """Whether ``step`` sends an undecodable ADD whose request id can be read (ecp.spec.recover)."""
    from ecp.spec.recover import recover_add

    return step["op"] == "garbage" and step["frames"][0] == "00" and len(step["frames"]) == 2 \
        and recover_add(bytes.fromhex(step["frames"][1])) is not None


@pytest.mark.parametrize("bug, found", [("error-on-input-socket", ["ECP-HS-3"]), (None, [])])
def test_a_malformed_add_with_a_readable_id_is_answered_on_its_output(tmp_path, bug, found):
    """The refusal the draw gives some sessions as an ADD: a mistyped field, a readable id, no
    client_index. Its ERROR belongs on the output of the input it came in on; an engine that sends
    it back on the input socket is a finding."""
    garbage = next(st for k in range(100) for st in draw(k, 1).steps if _readable_add(st))
    probe = Session(Topology(engines=1), [garbage, {"op": "add", "ref": 0, "max_tokens": 2, "prompt_len": 4},
                                          {"op": "wait", "until": "terminal", "ref": 0}])
    result = _play(probe, [*ENGINE, *(["--bug", bug] if bug else [])], tmp_path, engines=1)
    assert [f.clause for f in result.findings] == found, [f.message for f in result.findings]
