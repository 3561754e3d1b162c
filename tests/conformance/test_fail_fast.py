"""Fail fast: an engine that cannot do a topology's handshake is reported in seconds, not minutes.

An engine that answers the handshake for its first rank only fails every DP case. The first DP
case waits for the silent rank only as long as the sibling budget; every later case needing as
many engines is blocked by that failure at once (benchmarks/engine_role_fail_fast.py times the
whole role against it, side by side with the reference engine).
"""

import json
import time

from ecp.conformance.engine.harness_frontend import SIBLING_MIN_S


def test_one_rank_engine_fails_every_dp_case_fast(run_ecp, tmp_path):
    out = tmp_path / "r.json"
    started = time.monotonic()
    # the default startup budget (60 s): without failing fast each DP case would wait it out
    code, stdout = run_ecp("conformance", "engine", "--adapter", "scripted_engine:bug_one-rank-only",
                           "--case", "ENG-DP-*", "--case", "ENG-REQ-1", "--quiet-window", "0.2",
                           "--json", str(out))
    elapsed = time.monotonic() - started
    cases = {c["id"]: c for c in json.loads(out.read_text())["cases"]}
    assert code == 1, stdout
    assert cases["ENG-REQ-1"]["outcome"] == "PASS", stdout  # the shared single-rank engine serves
    dp = sorted(c for c in cases if c.startswith("ENG-DP-"))
    assert len(dp) >= 5
    assert all(cases[c]["outcome"] == "TIMEOUT" for c in dp), stdout
    first, *rest = dp
    assert "1 of 2 engine(s) said HELLO" in cases[first]["message"]
    assert all(cases[c]["message"].startswith(f"blocked by {first}:") for c in rest), stdout
    # one sibling budget for the whole topology, plus the passing case and the launches
    assert elapsed < SIBLING_MIN_S + 20, (elapsed, stdout)
