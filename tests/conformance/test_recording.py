"""Every case checks every message: the harness follows the run with the frontend's protocol machine
in recording mode, and a rule the engine breaks outside a case's focus is a finding of that case."""

import json

import jsonschema

from ecp.conformance.report import SCHEMA_PATH

ARGS = ["--quiet-window", "0.2", "--startup-timeout", "5", "--case-timeout", "3"]
#: a case about max_tokens (ECP-REQ-4); its own check never looks for a second terminal output
CASE = "ENG-REQ-1"


def _case(run_ecp, tmp_path, adapter):
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--adapter", adapter, "--case", CASE, "--json", str(out), *ARGS)
    data = json.loads(out.read_text())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    return code, stdout, data["cases"][0]


def test_a_second_terminal_output_inside_an_otherwise_passing_case_is_a_finding(run_ecp, tmp_path):
    code, stdout, case = _case(run_ecp, tmp_path, "scripted_engine:bug_duplicate-output")
    assert code == 1, stdout
    assert case["outcome"] == "FAIL" and case["clause"] == "ECP-OUT-1", case
    assert "the case's own check passed" in case["message"]
    finding = case["findings"][0]
    assert finding["clause"] == "ECP-OUT-1" and finding["level"] == "MUST"
    assert "second terminal output" in finding["message"]
    assert finding["socket"] == "output[0]" and finding["rank"] == 0 and finding["frames_hex"]
    assert case["transcript"], "the failing case carries its frame transcript"
    assert "ECP-OUT-1" in stdout


def test_a_correct_engine_has_no_findings(run_ecp, tmp_path):
    code, stdout, case = _case(run_ecp, tmp_path, "scripted_engine:start")
    assert code == 0, stdout
    assert case["outcome"] == "PASS" and "findings" not in case, case
