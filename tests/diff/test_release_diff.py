"""``ecp spec diff`` on the shipped releases reports exactly their real differences."""

from __future__ import annotations

from ecp.spec.diff.compare import counts, diff_layouts
from ecp.spec.layout.resolve import load_shipped

READY_REQUIRED = [
    "block_size", "dtype", "vllm_version", "world_size", "data_parallel_size", "tensor_parallel_size",
    "pipeline_parallel_size", "decode_context_parallel_size", "data_parallel_rank", "max_num_seqs",
    "max_num_batched_tokens", "instance_id", "supports_lora", "max_loras",
]
READY_OPTIONAL = [
    "mamba_block_size", "kv_cache_size_tokens", "kv_cache_max_concurrency", "kv_events_config",
    "weight_transfer_backend", "enable_sleep_mode", "supports_draft_weight_updates",
    "effective_attention_block_size", "coord_store_port", "coordinator_input_address", "coordinator_output_address",
]

#: (rule, subject) of every finding from vLLM 0.21 to vLLM 0.33, in report order.
EXPECTED_0_21_TO_0_33 = (
    [("DIFF-011", f"EngineCoreReadyResponse.{n}") for n in READY_REQUIRED]
    + [("DIFF-010", f"EngineCoreReadyResponse.{n}") for n in READY_OPTIONAL]
    + [("DIFF-010", f"Ready.{n}") for n in ("coord_store_port", "elastic_ep_max_dp_size", "num_redundant_experts")]
    + [("DIFF-010", "EngineCoreRequest.session_id"), ("DIFF-010", "EngineCoreRequest.kv_hints"),
       ("DIFF-001", "KvHintsEnvelope"), ("DIFF-001", "KvHintAction"),
       ("DIFF-010", "EngineCoreOutputs.weight_version"),
       ("DIFF-012", "EngineCoreOutput.ec_transfer_params")]
    + [("DIFF-010", f"EngineCoreOutput.{n}") for n in (
        "mm_cache_miss_hashes", "new_sampling_mask", "spec_decode_metrics", "prompt_token_id_logprobs", "error")]
    + [("DIFF-001", "RequestError"), ("DIFF-006", "layout scope"),
       ("DIFF-054", "utility wake_up"),
       ("DIFF-053", "utility reset_prefix_cache")]
    + [("DIFF-050", f"utility {n}") for n in ("pause_generation", "get_weight_version", "set_weight_version",
                                               "compute_weight_checksums")]
    + [("DIFF-053", "utility profile")]
    + [("DIFF-050", f"utility {n}") for n in ("release_kv_cache_memory", "get_kv_connector_handshake_entries",
                                               "add_remote_kv_handshake")]
)


def test_0_21_to_0_33_reports_exactly_the_real_differences():
    findings = diff_layouts(load_shipped("vllm-0.21"), load_shipped("vllm-0.33"))
    assert [(f.rule.id, f.subject) for f in findings] == EXPECTED_0_21_TO_0_33
    assert counts(findings) == {"breaking": 16, "warning": 2, "info": 33}


def test_the_inserted_output_field_is_breaking_both_ways():
    findings = diff_layouts(load_shipped("vllm-0.21"), load_shipped("vllm-0.33"))
    (insert,) = [f for f in findings if f.rule.id == "DIFF-012"]
    assert insert.severity == "breaking" and insert.affects == "both"
    assert insert.message == ("field inserted at position 9; shifts trace_headers, prefill_stats, routed_experts, "
                              "num_nans_in_logits")
    assert insert.impact() == ("engines built against OLD -> frontends built against NEW, "
                               "and engines built against NEW -> frontends built against OLD")
    (renamed,) = [f for f in findings if f.subject == "utility reset_prefix_cache"]
    assert (renamed.old, renamed.new) == ("reset_connector", "reset_external")
    (scope,) = [f for f in findings if f.rule.id == "DIFF-006"]
    assert "SamplingParams" in scope.old and scope.new == []


def test_reverse_direction_mirrors_the_findings():
    findings = diff_layouts(load_shipped("vllm-0.33"), load_shipped("vllm-0.21"))
    by_rule = {}
    for f in findings:
        by_rule.setdefault(f.rule.id, []).append(f.subject)
    # what 0.33 added, 0.21 lacks: removals, and the inserted field is a removal that shifts
    assert "EngineCoreOutput.ec_transfer_params" in by_rule["DIFF-013"]
    assert "EngineCoreRequest.kv_hints" in by_rule["DIFF-013"]
    assert "utility pause_generation" in by_rule["DIFF-051"]
    assert {"KvHintsEnvelope", "KvHintAction", "RequestError"} <= set(by_rule["DIFF-002"])
    assert "DIFF-017" not in by_rule  # UtilityRequest.args is required in both (4-item payload)
    assert counts(findings)["breaking"] > 0


def test_early_v1_revision_to_0_33_reports_byte_reuse_and_shifted_outputs():
    findings = diff_layouts(load_shipped("vllm-v1-0015f3f"), load_shipped("vllm-0.33"))
    serious = [(f.rule.id, f.subject, f.message) for f in findings if f.severity != "info"]
    assert serious == [
        ("DIFF-012", "EngineCoreOutputs.engine_index",
         "field inserted at position 0; shifts outputs, scheduler_stats"),
        ("DIFF-021", "EngineCoreOutputs.scheduler_stats",
         "type widened from struct:SchedulerStats to struct:SchedulerStats | nil"),
        ("DIFF-012", "EngineCoreOutput.pooling_output",
         "field inserted at position 4; shifts finish_reason, stop_reason"),
        ("DIFF-032", "enum FinishReason.ERROR", "new value ERROR = 3"),
        ("DIFF-032", "enum FinishReason.REPETITION", "new value REPETITION = 4"),
        ("DIFF-042", "request type 0x02", "byte 0x02 reused: was PROFILE, now START_DP_WAVE"),
        ("DIFF-042", "request type 0x03", "byte 0x03 reused: was RESET_PREFIX_CACHE, now UTILITY"),
    ]
    added = [f.subject for f in findings if f.rule.id == "DIFF-001"]
    assert added == ["UtilityRequest", "StartDPWave", "UtilityOutput", "EngineCoreEvent", "PrefillStats",
                     "RequestError", "UtilityResult"]
    # engine-internal type bytes (04, 05) never reach the wire: not reported
    assert not [f for f in findings if f.subject in ("request type 0x04", "request type 0x05")]
    assert counts(findings) == {"breaking": 4, "warning": 3, "info": 54}


def test_identical_layouts_report_nothing():
    for name in ("vllm-v1-0015f3f", "vllm-0.21", "vllm-0.33"):
        assert diff_layouts(load_shipped(name), load_shipped(name)) == []
