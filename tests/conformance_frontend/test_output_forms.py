"""The scripted engines' output forms keep each message in its one family (ECP-OUT-6)."""

from __future__ import annotations

from ecp.conformance.frontend.output_forms import OutputForm, raw_outputs
from ecp.spec import EngineCoreOutput, EngineCoreOutputs, UtilityOutput, UtilityResult

#: EngineCoreOutputs' index of scheduler_stats and of weight_version (vLLM 0.33)
STATS, WEIGHT_VERSION = 2, 8


def _raw(form: str, msg: EngineCoreOutputs) -> list:
    return raw_outputs(OutputForm(form).frames(msg))


def test_the_full_sample_fills_a_request_batch():
    raw = _raw("sample-full", EngineCoreOutputs(outputs=[EngineCoreOutput("r", [7])]))
    assert raw[STATS] is not None and raw[WEIGHT_VERSION] is not None


def test_the_full_sample_adds_no_request_batch_field_to_a_utility_reply():
    """Found by exploring vllm-rs 0.33: stats and weight_version beside a utility reply are a mixture
    of message families, which vllm-rs refuses to decode (every request then failed with HTTP 500)."""
    reply = EngineCoreOutputs(utility_output=UtilityOutput(1, None, UtilityResult(None, False)))
    raw = _raw("sample-full", reply)
    assert raw[STATS] is None and (len(raw) <= WEIGHT_VERSION or raw[WEIGHT_VERSION] is None)
    assert raw[4] == [1, None, [None, False]]


def test_the_full_sample_adds_no_request_batch_field_to_dp_control():
    raw = _raw("sample-full", EngineCoreOutputs(wave_complete=3))
    assert raw[STATS] is None and (len(raw) <= WEIGHT_VERSION or raw[WEIGHT_VERSION] is None)
