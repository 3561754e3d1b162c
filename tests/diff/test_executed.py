"""The feature model (where a pairing of releases breaks first) and the executed matrix rendered
beside it from a results file (`ecp spec compat --observed`)."""

from __future__ import annotations

import json

import pytest

from ecp.spec.cli import main as ecp_main
from ecp.spec.diff.compat import compat_matrix, render_markdown
from ecp.spec.diff.features import plain_request, predict_pair
from ecp.spec.diff.observed import agrees, load_observed, verdict_of
from ecp.spec.layout import wire
from ecp.spec.layout.model import LayoutError
from ecp.spec.layout.resolve import load_shipped


@pytest.fixture(scope="module")
def layouts():
    return {r: load_shipped(f"vllm-{r}") for r in ("0.31", "0.32", "0.33")}


def test_serving_works_between_0_31_and_0_33_and_lora_breaks_in_add_lora_not_add(layouts):
    for f, e in (("0.31", "0.33"), ("0.33", "0.31")):
        p = predict_pair(layouts[f], layouts[e])
        assert p["serving"].verdict == "lossy", p["serving"]  # plain serving works, fields ignored/defaulted
        assert p["LoRA"].verdict == "breaks" and p["LoRA"].shows_in == "UTILITY add_lora"
        assert p["LoRA"].code.endswith("LoRARequest.tensorizer_config_dict")
    # the full ADD sample (LoRA set) is what the message-kind table rejects; a plain request is not
    assert wire.worst(wire.check(layouts["0.33"], "EngineCoreRequest",
                                 wire.encode(plain_request(layouts["0.31"])), layouts["0.31"])) != "rejected"


def test_a_0_33_frontend_before_a_0_32_engine_breaks_profile_and_pause_only(layouts):
    p = predict_pair(layouts["0.33"], layouts["0.32"])
    broken = {name: (x.shows_in, x.code) for name, x in p.items() if x.verdict == "breaks"}
    assert broken == {"profile": ("UTILITY profile", "DIFF-052 utility profile"),
                      "pause": ("UTILITY pause_generation", "DIFF-051 utility pause_generation")}
    assert all(x.verdict == "works" for x in predict_pair(layouts["0.32"], layouts["0.32"]).values())
    assert predict_pair(layouts["0.31"], layouts["0.32"])["weight checksums"].verdict == "n/a"


def _feature(statuses, findings=(), utility=(), route=True, **extra):
    return {"calls": [{"call": f"POST /x{i}", "status": s, "body": ""} for i, s in enumerate(statuses)],
            "findings": list(findings), "utility": list(utility), "route": route,
            "http_ok": all(s is not None and 200 <= s < 300 for s in statuses), **extra}


def _results(tmp_path):
    profile_finding = {"clause": "ECP-UTIL-1", "code": "DIFF-052", "shows_in": "UTILITY profile",
                       "message": "DIFF-052 profile arguments: the vLLM 0.33 frontend sends 5, vLLM 0.32 takes 0..4"}
    doc = {"releases": ["0.32", "0.33"], "pairs": [
        {"frontend": "0.33", "engine": "0.32", "started": True, "features": {
            "serving": _feature([200, 200], aborts=1),
            "profile": _feature([500, 500], [profile_finding]),
            "pause": _feature([200, 200]),  # the model says it breaks: this observation disagrees
            "weight checksums": _feature([500]),
        }},
        {"frontend": "0.33", "engine": "0.33", "started": True, "features": {
            "serving": _feature([200, 200], aborts=1),
            "weight checksums": _feature([500], utility=[{"method": "compute_weight_checksums", "args": 0,
                                                          "failure": None, "answered": True}]),
        }},
        {"frontend": "0.32", "engine": "0.33", "started": False, "features": {}, "problem": "engine exited"},
    ]}
    path = tmp_path / "observed.json"
    path.write_text(json.dumps(doc))
    return path


def test_verdicts_of_observations():
    assert verdict_of(_feature([200])) == ("works", None)
    assert verdict_of(_feature([500])) == ("http-error", None)
    assert verdict_of(_feature([], route=False)) == ("n/a", None)
    failed = {"method": "pause_generation", "args": 2, "failure": "no attribute 'pause_generation'"}
    assert verdict_of(_feature([500], utility=[failed])) == ("breaks", "UTILITY pause_generation")
    assert verdict_of(_feature([200], aborts=0)) == ("breaks", "ABORT")


def test_the_executed_section_shows_each_observation_beside_its_prediction(tmp_path, layouts):
    observed = load_observed(_results(tmp_path))
    order = [layouts["0.32"], layouts["0.33"]]
    text = render_markdown(order, compat_matrix(order), observed)
    section = text[text.index("## Executed: {0.32, 0.33}²"):text.index("## Features per pair")]
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:3]): line
            for line in section.splitlines() if line.startswith("| 0.3")}
    assert rows[("0.33", "0.32", "profile")].endswith("| yes |")
    assert "breaks at UTILITY profile; monitor: DIFF-052 profile arguments" in rows[("0.33", "0.32", "profile")]
    assert rows[("0.33", "0.32", "pause")].endswith("| **NO** |")
    # an HTTP error with every message answered agrees with "works" only when two peers of the
    # frontend's release fail the same way
    assert rows[("0.33", "0.32", "weight checksums")].endswith("| yes |")
    assert "Observed and predicted disagree in 1 cell(s)." in section
    assert "did not start: engine exited" in section and "| `vllm-0.33` | not run |" not in section


def test_agreement_needs_the_same_message(layouts):
    p = predict_pair(layouts["0.33"], layouts["0.32"])["profile"]
    elsewhere = {"clause": "ECP-REQ-1", "code": None, "shows_in": "ADD", "message": "x"}
    assert not agrees(p, _feature([500], [elsewhere]), None)


def test_compat_command_takes_a_results_file(tmp_path, capsys):
    path = _results(tmp_path)
    out = tmp_path / "compat.md"
    assert ecp_main(["spec", "compat", "--layouts", "vllm-0.32", "vllm-0.33", "--observed", str(path),
                     "--out", str(out)]) == 0
    assert "## Executed: {0.32, 0.33}²" in out.read_text()
    assert ecp_main(["spec", "compat", "--layouts", "vllm-0.32", "vllm-0.33", "--observed", "none",
                     "--out", str(out)]) == 0
    assert "## Executed" not in out.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert ecp_main(["spec", "compat", "--observed", str(bad)]) == 2
    assert "not an executed cross-release matrix" in capsys.readouterr().err
    with pytest.raises(LayoutError):
        load_observed(tmp_path / "missing.json")
