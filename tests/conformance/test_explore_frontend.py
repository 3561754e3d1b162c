"""``ecp conformance explore frontend``: sessions, and short seeded explorations of the reference
frontend (``ecp serve``) with and without one of its ``--bug`` faults."""

import json
import re
import sys

import pytest

from ecp.conformance.explore.frontend_generate import draw_frontend
from ecp.conformance.explore.reproducer import read
from ecp.conformance.explore.run import ExploreOptions, explore, runner_for
from ecp.conformance.explore.session import Session, Topology

SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}", "--dev-mode"]


def test_frontend_sessions_are_drawn_from_their_seed_and_round_trip():
    a = draw_frontend(5, max_engines=2)
    assert a.role == "frontend" and a.to_dict() == draw_frontend(5, max_engines=2).to_dict()
    again = Session.from_dict(json.loads(json.dumps(a.to_dict())))
    assert again.to_dict() == a.to_dict() and again.role == "frontend"
    ops = {st["op"] for k in range(30) for st in draw_frontend(k, 2).steps}
    assert ops == {"request", "drop", "crowd", "abort", "route", "wait"}
    pins = [st.get("pin") for k in range(30) for st in draw_frontend(k, 2).steps if st["op"] == "request"]
    assert set(pins) == {None, 0, 1}
    assert {draw_frontend(k, 2).topology.error_after for k in range(30)} >= {None, 0, 1, 3}


def test_a_step_of_the_other_role_is_refused():
    with pytest.raises(ValueError):
        Session.from_dict({"role": "frontend", "topology": {}, "steps": [{"op": "add", "ref": 0, "max_tokens": 1,
                                                                           "prompt_len": 1}]})
    with pytest.raises(ValueError):
        Session.from_dict({"role": "frontend", "topology": {}, "steps": [{"op": "route", "route": "nowhere"}]})


def test_no_finding_against_the_fault_free_frontend(tmp_path):
    opts = ExploreOptions(command=SERVE, role="frontend", engine_count=2, budget_s=60, max_sessions=2, seed=0,
                          max_steps=12, out_dir=tmp_path, step_timeout_s=3.0, quiet_window_s=0.1)
    report = explore(opts, say=lambda line: None)
    assert report.sessions == 2 and report.messages > 0
    assert report.findings == [], [(f.clause, f.message) for f in report.findings]


def test_a_frontend_fault_is_found_shrunk_and_replayed(tmp_path, run_ecp):
    opts = ExploreOptions(command=[*SERVE, "--bug", "abort-every-engine"], role="frontend", engine_count=2,
                          budget_s=10.0, seed=1, max_steps=12, out_dir=tmp_path, shrink_runs=6, confirm_runs=1,
                          max_findings=1, step_timeout_s=2.0, quiet_window_s=0.1)
    report = explore(opts, say=lambda line: None)
    [found] = report.findings
    assert found.clause == "ECP-ABORT-1" and found.reproducible
    assert found.steps_after is not None and found.steps_after < found.steps_before
    doc = read(found.path)
    assert doc["role"] == "frontend" and doc["clause"] == "ECP-ABORT-1" and doc["frames"]
    # the shrunk session is an interleaving (drops racing the engines' outputs): on a loaded machine one
    # replay in a few misses it, so the replay gets 3 runs (exit 1 as soon as one shows a violation)
    code, out = run_ecp("conformance", "replay", str(found.path), "--step-timeout", "2s", "--runs", "3")
    assert code == 1 and "ECP-ABORT-1 again" in out
    code, out = run_ecp("conformance", "replay", str(found.path), "--step-timeout", "2s", "--", *SERVE)
    assert code == 0 and "no violation" in out


def test_an_explicit_abort_names_a_completion_by_its_external_id(tmp_path):
    # ECP-HTTP-6: a completion's external id is `<id>-0` (vLLM's abort route takes nothing else)
    opts = ExploreOptions(command=SERVE, role="frontend", engine_count=1, step_timeout_s=3.0, quiet_window_s=0.1)
    session = Session.from_dict({"role": "frontend", "topology": {"engines": 1, "hold": 2}, "steps": [
        {"op": "request", "ref": 0, "api": "completions", "stream": True, "max_tokens": 64, "prompt_len": 3,
         "temperature": 0.0, "logprobs": None, "named": None},
        {"op": "abort", "targets": [0]}]})
    runner = runner_for(opts, str(tmp_path))
    try:
        result = runner.play(session)
    finally:
        runner.close()
    assert result.findings == [] and result.played == [0, 1]
    calls = [e.decoded for e in result.entries
             if e.direction == "sent" and e.channel == "http" and "/abort_requests" in e.decoded
             and "probe" not in e.decoded]
    assert len(calls) == 1 and re.search(r'"request_ids": \["cmpl-[^"]+-0"\]', calls[0]), calls


def _play(session, command, tmp_path):
    from ecp.conformance.explore.run import FrontendRunner

    runner = FrontendRunner(ExploreOptions(command=command, role="frontend", engine_count=2, step_timeout_s=3.0,
                                           quiet_window_s=0.1), str(tmp_path))
    try:
        return runner.play(session)
    finally:
        runner.close()


#: a stream stalls on one engine; then one request pinned to each rank: a frontend that sends them
#: to the least-loaded engine instead sends one of them to the wrong rank
PINNED = Session(Topology(engines=2, hold=2), [
    {"op": "request", "ref": 0, "api": "completions", "stream": True, "max_tokens": 64, "pin": None},
    {"op": "wait", "until": "first", "ref": 0},
    {"op": "request", "ref": 1, "api": "completions", "stream": False, "max_tokens": 1, "pin": 0},
    {"op": "wait", "until": "end", "ref": 1},
    {"op": "request", "ref": 2, "api": "chat", "stream": False, "max_tokens": 1, "pin": 1},
    {"op": "wait", "until": "end", "ref": 2},
], role="frontend")


def test_a_pinned_request_must_reach_its_rank(tmp_path):
    result = _play(PINNED, [*SERVE, "--bug", "pinned-rank-ignored"], tmp_path)
    assert result.played == [0, 1, 2, 3, 4, 5]
    assert [f.clause for f in result.findings] == ["ECP-DP-2"], [(f.clause, f.message) for f in result.findings]


def test_pinned_requests_and_a_crowd_of_dropped_streams_against_the_fault_free_frontend(tmp_path):
    """The pinned session, then a crowd of 5 stalled streams over both engines dropped at once:
    every one is aborted on its engine (ECP-ABORT-6), and no finding."""
    crowd = [{"op": "request", "ref": 10 + k, "api": "completions", "stream": True, "max_tokens": 64,
              "pin": k % 2} for k in range(5)]
    session = PINNED.with_steps([*PINNED.steps, *crowd,
                                 {"op": "crowd", "refs": [0, 10, 11, 12, 13, 14], "after": "first"}])
    result = _play(session, SERVE, tmp_path)
    assert result.played == list(range(len(session.steps)))
    assert result.findings == [], [(f.clause, f.message) for f in result.findings]


FAILING = Session(Topology(engines=1, error_after=1), [
    {"op": "request", "ref": 0, "api": "completions", "stream": False, "max_tokens": 8},
    {"op": "request", "ref": 1, "api": "chat", "stream": True, "max_tokens": 8},
    {"op": "request", "ref": 2, "api": "completions", "stream": False, "max_tokens": 1},
    {"op": "wait", "until": "idle"},
], role="frontend")


@pytest.mark.parametrize("bug", [None, "error-output-as-stop"])
def test_a_request_its_engine_failed_must_reach_the_client_as_an_error(tmp_path, bug):
    result = _play(FAILING, SERVE + (["--bug", bug] if bug else []), tmp_path)
    assert result.played == [0, 1, 2, 3]
    clauses = [(f.clause, f.message) for f in result.findings]
    assert {c for c, _ in clauses} == ({"ECP-OUT-5"} if bug else set()), clauses
