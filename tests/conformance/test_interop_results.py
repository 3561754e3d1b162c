"""``--results DIR``: one results document per run, valid against its schema, with every field the
interop site reads (the expected-failure entry with its source line, the transcript files)."""

from __future__ import annotations

import json

import pytest

from ecp.conformance.interop.results import ResultsError, load, problems_of

FAST = ["--quiet-window", "0.1", "--startup-timeout", "30"]


def test_results_document_names_outcomes_entries_and_transcripts(run_ecp, tmp_path):
    xf = tmp_path / "expected.txt"
    xf.write_text("# known\nENG-WIRE-1  this engine speaks 0.32: no pause_generation\n")
    out = tmp_path / "run"
    # the reference engine speaking 0.32, judged as 0.33: ENG-OUT-6 and ENG-WIRE-1 fail, ENG-HS-3 passes
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:release_0_32",
                           "--case", "ENG-HS-3", "--case", "ENG-OUT-6", "--case", "ENG-WIRE-1", *FAST,
                           "--expected-failures", str(xf), "--results", str(out),
                           "--implementation", "ecp engine", "--implementation-version", "0.32-speaking",
                           "--machine", "ci")
    assert code == 1, stdout
    doc = load(out / "result.json")  # validates against the schema
    assert doc["implementation"] == {"name": "ecp engine", "version": "0.32-speaking", "commit": None}
    assert (doc["role"], doc["release"], doc["level"], doc["machine"]["name"]) == ("engine", "0.33", "hardened", "ci")
    assert doc["ecp"]["version"] and doc["served"] == {"ok": True, "cause": None}
    assert doc["launches"]["count"] >= 1
    cases = {c["id"]: c for c in doc["cases"]}
    assert {k: c["outcome"] for k, c in cases.items()} == {"ENG-HS-3": "PASS", "ENG-OUT-6": "FAIL",
                                                           "ENG-WIRE-1": "XFAIL"}
    assert cases["ENG-WIRE-1"]["expected_failure"] == {
        "entry": "ENG-WIRE-1  this engine speaks 0.32: no pause_generation",
        "reason": "this engine speaks 0.32: no pause_generation", "source": str(xf), "line": 2}
    assert cases["ENG-OUT-6"]["expected_failure"] is None
    assert "18 elements" in cases["ENG-OUT-6"]["reason"]
    assert cases["ENG-HS-3"]["transcript"] is None
    transcript = out / cases["ENG-OUT-6"]["transcript"]
    assert "ENG-OUT-6" in transcript.read_text() and "18 elements" in transcript.read_text()


def test_an_engine_run_records_the_release_it_was_judged_as(run_ecp, tmp_path):
    code, stdout = run_ecp("conformance", "engine", "--vllm", "0.25", "--adapter", "reference_adapters:release_0_25",
                           "--case", "ENG-HS-3", *FAST, "--results", str(tmp_path))
    assert code == 0, stdout
    doc = load(tmp_path / "result.json")
    assert doc["release"] == "0.25" and doc["implementation"]["name"] == "reference_adapters:release_0_25"


def test_a_malformed_document_is_refused_with_every_problem(tmp_path):
    bad = tmp_path / "result.json"
    bad.write_text(json.dumps({"schema_version": 2, "role": "router", "cases": [{"id": "x"}]}))
    with pytest.raises(ResultsError) as caught:
        load(bad)
    text = "\n".join(caught.value.problems)
    assert "$.schema_version" in text and "$.role" in text and "$.cases[0]" in text
    assert "'implementation' is a required property" in text
    bad.write_text("{not json")
    with pytest.raises(ResultsError, match="not JSON"):
        load(bad)
    assert problems_of({}) and all(p.startswith("schema: at $") for p in problems_of({}))
