"""Which shipped releases have a message, field or method: computed from the layouts."""

from __future__ import annotations

from ecp.spec import releases
from ecp.spec.layout.resolve import load_shipped


def test_spans_follow_the_layouts():
    assert releases.releases()[0] == "0.21" and releases.releases()[-1] == "0.33"
    assert releases.feature_span("field:EngineCoreOutput.error") == "0.33"
    assert releases.feature_span("field:EngineCoreOutputs.weight_version") == "0.32–0.33"
    assert releases.feature_span("utility:eep_handle_engine_core_notification") == "0.21–0.26"
    assert releases.feature_span("field:EngineCoreRequest.request_id") == "all"
    assert releases.feature_span("utility:no_such_method") == "none"
    assert releases.span(["0.21", "0.23"]) == "0.21, 0.23"


def test_lacking_names_the_first_missing_feature_and_the_release():
    layout = load_shipped("vllm-0.32")
    assert releases.lacking("utility:pause_generation", layout, "vLLM 0.32") == "pause_generation: not in vLLM 0.32"
    assert releases.lacking(["utility:sleep", "field:EngineCoreOutput.error"], layout, "vLLM 0.32") == (
        "EngineCoreOutput.error: not in vLLM 0.32")
    assert releases.lacking(("utility:sleep",), layout, "vLLM 0.32") is None
