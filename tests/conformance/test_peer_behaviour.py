"""No harness ERROR for what an engine does: each way of misbehaving ends as FAIL, TIMEOUT or CRASH
with evidence, and the run exits 1 (conformance failure), never 2 (harness error)."""

import json

import pytest

#: scripted-engine knob -> the outcome(s) showing that behaviour (a later case may also get a TIMEOUT
#: waiting for a relaunch on a loaded machine: any of FAIL/TIMEOUT/CRASH is a finding)
BEHAVIOURS = {
    "garbage-outputs": {"FAIL"},             # undecodable output frames
    "silent": {"TIMEOUT", "FAIL"},           # never answers after the handshake
    "crash-on-add": {"CRASH"},               # dies mid-case without ENGINE_CORE_DEAD
    "close-on-add": {"FAIL", "TIMEOUT"},     # closes its sockets mid-case, process still up
    "bad-hello": {"FAIL", "TIMEOUT"},        # garbage on the handshake socket
    "crash-on-bad-frame": {"CRASH"},         # dies of a malformed input without ENGINE_CORE_DEAD
}


@pytest.mark.parametrize("knob", sorted(BEHAVIOURS))
def test_peer_behaviour_is_a_finding_not_a_harness_error(knob, run_ecp, tmp_path):
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--adapter", f"scripted_engine:bug_{knob}",
                           "--case", "ENG-HS-1", "--case", "ENG-REQ-1", "--case", "ENG-UTIL-1", "--case", "ENG-ROB-3",
                           "--quiet-window", "0.1", "--startup-timeout", "3", "--case-timeout", "1.5",
                           "--json", str(out))
    cases = json.loads(out.read_text())["cases"]
    assert code == 1, stdout
    assert "Traceback" not in stdout and "harness error" not in stdout, stdout
    outcomes = {c["id"]: c["outcome"] for c in cases}
    assert "ERROR" not in outcomes.values(), stdout
    failed = [c for c in cases if c["outcome"] != "PASS"]
    assert failed, stdout
    for c in failed:
        assert c["outcome"] in ("FAIL", "TIMEOUT", "CRASH"), (c["id"], c["outcome"], c["message"])
        assert c["message"].strip(), c  # the evidence
    assert {c["outcome"] for c in failed} & BEHAVIOURS[knob], stdout
