"""Which shipped releases have a message, field or method: computed from the layouts."""

from __future__ import annotations

from ecp.spec import VLLM_RELEASE, releases
from ecp.spec.layout.resolve import load_shipped


def test_spans_follow_the_layouts():
    assert releases.releases()[0] == "0.20" and releases.releases()[-1] == VLLM_RELEASE
    assert releases.feature_span("field:EngineCoreOutput.error") == "0.33"
    assert releases.feature_span("field:EngineCoreOutputs.weight_version") == "0.32–0.33"
    assert releases.feature_span("utility:eep_handle_engine_core_notification") == "0.20–0.26"
    assert releases.feature_span("field:EngineCoreRequest.abort_immediately") == f"0.21–{VLLM_RELEASE}"
    assert releases.feature_span("field:EngineCoreRequest.request_id") == "all"
    assert releases.feature_span("utility:no_such_method") == "none"
    assert releases.span(["0.21", "0.23"]) == "0.21, 0.23"


def test_a_release_bound_clause_holds_where_its_features_are():
    from ecp.spec import clauses

    out5 = clauses.CLAUSES["ECP-OUT-5"]
    assert out5.holds_in(load_shipped("vllm-0.33")) and not out5.holds_in(load_shipped("vllm-0.32"))
    assert clauses.CLAUSES["ECP-REQ-1"].holds_in(load_shipped("vllm-0.21"))
