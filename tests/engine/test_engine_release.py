"""``ecp engine --vllm R``: the reference engine speaks another release at its edges (the codec, the
ready payload, the UTILITY table and arities, pause behaviour), its core unchanged."""

from __future__ import annotations

import msgspec

from engine_rawfront import make_request

from ecp.reference.engine.config import EngineConfig
from ecp.spec import FinishReason
from ecp.spec.profile import shipped_profile


def test_a_0_32_engine_sends_0_32_frames_and_serves_0_32_calls(rig):
    fe, _ = rig.start(1, vllm="0.32")
    [payload] = fe.ready_payloads.values()
    assert payload.vllm_version == "0.32.0"
    # the registration frame holds only 0.32's keys
    raw = msgspec.msgpack.decode(fe.h.evidence.records[next(iter(fe.h.evidence.records))].registrations[0][0][0])
    assert set(raw) <= {f.name for f in shipped_profile("0.32").layout.messages["EngineCoreReadyResponse"].fields}
    fe.add(0, make_request("r1", max_tokens=2, ignore_eos=True))
    fe.wait_finished(["r1"])
    outputs = [f for _, f in fe.h.raw_outputs if msgspec.msgpack.decode(f[0])[1]]
    assert outputs and len(msgspec.msgpack.decode(outputs[0][0])[1][0]) == 18  # 0.33 has 19
    # the release's table: pause_generation unknown, profile takes 0..4 arguments
    assert fe.call(0, "pause_generation", ["abort"]).failure_message == (
        "Call to pause_generation method failed: 'EngineCoreProc' object has no attribute 'pause_generation'")
    assert fe.value(0, "profile", [False, None, None, None]) is None
    assert fe.call(0, "profile", [False, None, None, None, None]).failure_message == (
        "Call to profile method failed: profile() takes at most 4 positional arguments but 5 were given")
    # 0.32's LoRARequest (6 fields) is read as 0.32 lays it out; 0.31's (7) is not
    assert "Expected" not in (fe.call(0, "add_lora", [["a", 1, "/p", None, False, False]]).failure_message or "")


def test_before_0_33_an_add_while_paused_is_queued_until_resume(rig):
    fe, _ = rig.start(1, vllm="0.32")
    assert fe.value(0, "pause_scheduler", ["abort"]) is None
    fe.add(0, make_request("held", max_tokens=2, ignore_eos=True))
    fe.quiet(0.3)
    assert fe.outputs_for("held") == []  # neither refused nor run while paused
    assert fe.value(0, "resume_scheduler") is None
    done = fe.wait_finished(["held"])
    assert done["held"].finish_reason == FinishReason.LENGTH and fe.tokens("held") and len(fe.tokens("held")) == 2


def test_0_33_refuses_an_add_while_paused(rig):
    fe, _ = rig.start(1)
    assert fe.value(0, "pause_generation", ["abort"]) is None
    fe.add(0, make_request("refused", max_tokens=2))
    done = fe.wait_finished(["refused"])
    assert done["refused"].finish_reason == FinishReason.ERROR and done["refused"].error.code == "engine_paused"


def test_an_unknown_release_is_a_configuration_error():
    try:
        EngineConfig(vllm="0.99").validate()
    except ValueError as exc:
        assert "--vllm" in str(exc) and "0.33" in str(exc)
    else:
        raise AssertionError("--vllm 0.99 was accepted")
