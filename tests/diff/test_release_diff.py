"""``ecp spec diff`` on the shipped releases reports exactly their real differences.

The expected findings were checked against the two wheels' sources (the
relevant ``.py`` files diffed between vLLM 0.32.0 and 0.33.0).
"""

from __future__ import annotations

import pytest

from ecp.spec.diff.compare import counts, diff_layouts
from ecp.spec.layout.resolve import load_shipped, shipped_names

#: (rule, subject, clause) of every finding from vLLM 0.32.0 to 0.33.0, in report order
EXPECTED_0_32_TO_0_33 = [
    ("DIFF-010", "EngineCoreReadyResponse.coord_store_port", "ECP-HS-4"),
    ("DIFF-010", "EngineCoreReadyResponse.coordinator_input_address", "ECP-HS-4"),
    ("DIFF-010", "EngineCoreReadyResponse.coordinator_output_address", "ECP-HS-4"),
    ("DIFF-010", "Ready.coord_store_port", "ECP-HS-5"),
    ("DIFF-010", "Ready.elastic_ep_max_dp_size", "ECP-HS-5"),
    ("DIFF-010", "Ready.num_redundant_experts", "ECP-HS-5"),
    ("DIFF-010", "PoolingParams.late_chunking_params", "ECP-REQ-1"),
    ("DIFF-001", "LateChunkingParams", "ECP-REQ-1"),
    ("DIFF-010", "EngineCoreOutput.error", "ECP-FRAME-2"),
    ("DIFF-001", "RequestError", "ECP-FRAME-2"),
    ("DIFF-052", "utility profile", "ECP-UTIL-1"),
    ("DIFF-050", "utility pause_generation", "ECP-UTIL-1"),
]


def test_0_32_to_0_33_reports_exactly_the_real_differences():
    findings = diff_layouts(load_shipped("vllm-0.32"), load_shipped("vllm-0.33"))
    assert [(f.rule.id, f.subject, f.clause) for f in findings] == EXPECTED_0_32_TO_0_33
    assert counts(findings) == {"breaking": 2, "warning": 0, "info": 10}
    profile, pause = [f for f in findings if f.severity == "breaking"]
    # a method only 0.33 defines: 0.33 frontends that call it fail on 0.32 engines, not the reverse
    assert pause.affects == "new->old" and pause.impact() == (
        "frontends built against NEW -> engines built against OLD")
    # a trailing argument with a default: old frontends still reach new engines, not the reverse
    assert profile.affects == "new->old"
    assert profile.new[-1] == "map[any, any] | nil"


def test_the_inserted_output_field_of_0_26_is_breaking_both_ways():
    findings = diff_layouts(load_shipped("vllm-0.25"), load_shipped("vllm-0.26"))
    (insert,) = [f for f in findings if f.rule.id == "DIFF-012"]
    assert insert.subject == "EngineCoreOutput.ec_transfer_params" and insert.affects == "both"
    assert insert.message == ("field inserted at position 9; shifts trace_headers, prefill_stats, routed_experts, "
                              "num_nans_in_logits")
    assert insert.clause == "ECP-FRAME-3" and insert.file == "vllm/v1/engine/__init__.py"


def test_0_31_to_0_32_drops_a_lora_field_and_retypes_prompt_logprob_ids():
    findings = diff_layouts(load_shipped("vllm-0.31"), load_shipped("vllm-0.32"))
    breaking = {(f.rule.id, f.subject) for f in findings if f.severity == "breaking"}
    assert breaking == {("DIFF-013", "LoRARequest.tensorizer_config_dict"),
                        ("DIFF-022", "SamplingParams.prompt_logprob_token_ids"),
                        ("DIFF-052", "utility profile"),
                        # 0.32 frontends call it; 0.31 engines do not define it
                        ("DIFF-050", "utility compute_weight_checksums")}


def test_reverse_direction_mirrors_the_findings():
    findings = diff_layouts(load_shipped("vllm-0.33"), load_shipped("vllm-0.32"))
    by_rule: dict[str, list[str]] = {}
    for f in findings:
        by_rule.setdefault(f.rule.id, []).append(f.subject)
    assert "RequestError" in by_rule["DIFF-002"]
    assert "utility pause_generation" in by_rule["DIFF-051"]
    assert by_rule["DIFF-052"] == ["utility profile"]


@pytest.mark.parametrize("name", shipped_names())
def test_identical_layouts_report_nothing(name):
    assert diff_layouts(load_shipped(name), load_shipped(name)) == []
