"""Engine-role ``abort_immediately`` cases (the KV-transfer rejection notice)."""

import msgspec

from ecp.conformance.engine.cases._common import ok_value, paused
from ecp.conformance.outcomes import CaseFailure
from ecp.conformance.registry import case
from ecp.spec import FinishReason, SamplingParams

KV_PARAMS = {"do_remote_prefill": True, "remote_engine_id": "ecp-conformance", "remote_block_ids": [1, 2]}


def rejection_notice(fe, rid: str):
    """The ADD a frontend sends for a request it rejected before admission (``ECP-REJECT-2``)."""
    req = fe.request(rid, max_tokens=1, prompt=[0])
    sp = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": dict(KV_PARAMS)}, watermarking=False)
    return msgspec.structs.replace(req, sampling_params=sp, abort_immediately=True, external_req_id=None)


@case("ENG-REJECT-1")
def test_abort_immediately_no_tokens(engine):
    fe = engine
    rid = fe.new_id("rejected")
    fe.add(rejection_notice(fe, rid))
    # a request sent after it finishing proves the notice was processed
    probe = fe.new_id("after-notice")
    fe.add(fe.request(probe, max_tokens=2))
    fe.wait_finished(probe, max_tokens=2)
    fe.observe()
    if fe.seen(rid):
        toks = fe.tokens(rid)
        raise CaseFailure(f"abort_immediately request {rid} got {len(fe.seen(rid))} output(s) with "
                        f"{len(toks)} token(s); it must never run and emit nothing")


@case("ENG-REJECT-2")
def test_abort_immediately_others_unaffected(engine):
    fe = engine
    other = fe.new_id("neighbour")
    # long enough that the neighbour is still running when the notice arrives, even when the
    # harness is descheduled for a while between its first output and the notice
    n = 100
    fe.add(fe.request(other, max_tokens=n))
    fe.wait(lambda: bool(fe.seen(other)), 5.0, f"a first output for {other}")
    fe.add(rejection_notice(fe, fe.new_id("rejected")))
    term = fe.wait_finished(other, max_tokens=n)
    fe.observe()
    if term.output.finish_reason != FinishReason.LENGTH or len(fe.tokens(other)) != n:
        raise CaseFailure(f"a running request ended with {term.output.finish_reason!r} after "
                        f"{len(fe.tokens(other))}/{n} tokens when an abort_immediately ADD arrived")


@case("ENG-REJECT-3")
def test_abort_immediately_passes_a_pause(engine, engines):
    fe = engine
    with paused(fe, engines):
        rid = fe.new_id("rejected-paused")
        fe.add(rejection_notice(fe, rid))
        # a utility reply after it proves the notice was read
        ok_value(fe.call("is_scheduler_paused", []), "is_scheduler_paused")
        fe.observe()
        errors = [s.output for s in fe.seen(rid) if s.output.error is not None]
        if errors:
            raise CaseFailure(f"the abort_immediately ADD {rid} sent while paused was answered with "
                            f"error {errors[0].error!r}; it must be processed, not refused as new work")
        if fe.tokens(rid):
            raise CaseFailure(f"abort_immediately request {rid} produced {len(fe.tokens(rid))} token(s)",
                            clause="ECP-REJECT-1")
    fe.serves(after="an abort_immediately ADD during a pause")
