"""A release's codec over vLLM 0.33's typed messages (ecp.spec.profile.wire): frames as that
release writes them, messages as ecp.spec's classes, for every shipped release."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecp import spec
from ecp.spec import codec as codec033
from ecp.spec.control import StartDPWave, UtilityRequest
from ecp.spec.errors import LocalProtocolError
from ecp.spec.machine import Add, Event
from ecp.spec.profile import ReleaseCodec, release_of_codec, shipped_profile, shipped_releases, wire_codec
from machine_pair import Pair, out, ready_response, reply, request
from message_strategies import outputs, ready_responses, requests

RELEASES = shipped_releases()
OLDER = [r for r in RELEASES if r != "0.33"]
FAST = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


def test_033_is_the_hand_written_codec_itself():
    assert wire_codec(shipped_profile("0.33")) is codec033
    assert release_of_codec(codec033) == "0.33"
    assert all(isinstance(wire_codec(shipped_profile(r)), ReleaseCodec) for r in OLDER)
    assert release_of_codec(wire_codec(shipped_profile("0.32"))) == "0.32"


def _pair(c, m):
    if isinstance(m, spec.EngineCoreRequest):
        return c.encode_add, c.decode_input, "input"
    if isinstance(m, spec.EngineCoreOutputs):
        return c.encode_outputs, c.decode_outputs, "output"
    return (lambda x: [c.encode_handshake(x)]), (lambda f: c.decode_ready_response(f[0])), "ready"


@pytest.mark.parametrize("release", RELEASES)
@FAST
@given(st.one_of(requests, outputs, ready_responses))
def test_what_a_release_can_hold_survives_its_wire(release, message):
    """0.33 -> release -> 0.33 keeps what the release holds: a second trip changes nothing,
    and the release's own decoder reads every frame written for it."""
    c = wire_codec(shipped_profile(release))
    encode, decode, direction = _pair(c, message)
    try:
        frames = encode(message)
    except LocalProtocolError as exc:  # a value the release cannot hold is refused, never sent wrong
        assert exc.clause == "ECP-COMPAT-1"
        return
    shipped_profile(release).codec.decode(frames, direction)  # raises if the release could not read it
    once = decode(frames)
    assert decode(encode(once)) == once


@pytest.mark.parametrize("release", RELEASES)
def test_utility_and_wave_fields_pair_by_name(release):
    # every release's classes and ecp.spec's name them as vLLM does (client_idx, new_wave, exclude_eng_index)
    c = wire_codec(shipped_profile(release))
    assert c.decode_input(c.encode_utility(3, 7, "sleep", [1, "abort"])) == UtilityRequest(3, 7, "sleep", [1, "abort"])
    assert c.decode_input(c.encode_start_dp_wave(4, 1)) == StartDPWave(4, 1)
    assert c.decode_input(c.encode_abort(["a", "b"])) == ["a", "b"]


def test_a_field_the_release_lacks_is_not_sent():
    """0.32's EngineCoreOutput has 18 elements: 0.33's ``error`` stays behind, the rest arrives."""
    c = wire_codec(shipped_profile("0.32"))
    msg = out(0, "r1", spec.FinishReason.ERROR, error=True)
    [frame] = c.encode_outputs(msg)
    raw = msgspec.msgpack.decode(frame)
    assert len(raw[1][0]) == 18 and raw[1][0][0] == "r1"
    back = c.decode_outputs([frame])
    assert back.outputs[0].error is None
    assert back.outputs[0].finish_reason is spec.FinishReason.ERROR
    assert len(msgspec.msgpack.decode(codec033.encode_outputs(msg)[0])[1][0]) == 19


def test_fields_move_by_name_where_a_release_removed_one():
    """0.31's LoRARequest still has tensorizer_config_dict at [4]: load_inplace moves to [5]
    (vLLM's own 0.31<->0.33 LoRA break is sending by position: "Expected `bool`, got `null`")."""
    c = wire_codec(shipped_profile("0.31"))
    lora = spec.LoRARequest("ad", 1, "/p", None, True)
    req = msgspec.structs.replace(request("r"), lora_request=lora)
    frames = c.encode_add(req)
    raw = msgspec.msgpack.decode(frames[1])
    lora_index = [f.encode_name for f in msgspec.structs.fields(shipped_profile("0.31").message("EngineCoreRequest"))
                  ].index("lora_request")
    assert raw[lora_index][:6] == ["ad", 1, "/p", None, None, True]
    assert c.decode_input(frames).lora_request == lora


def test_retyped_fields_convert_both_ways():
    """prompt_logprob_token_ids: a list of ints up to 0.31, an int64 tensor from 0.32."""
    c31 = wire_codec(shipped_profile("0.31"))
    sp = spec.SamplingParams(max_tokens=2, prompt_logprob_token_ids=spec.Tensor("int64", (2,), (5).to_bytes(8, "little")
                                                                                 + (9).to_bytes(8, "little")))
    req = msgspec.structs.replace(request("r"), sampling_params=sp)
    frames = c31.encode_add(req)
    assert shipped_profile("0.31").codec.decode_input(frames).sampling_params.prompt_logprob_token_ids == [5, 9]
    assert c31.decode_input(frames).sampling_params.prompt_logprob_token_ids == sp.prompt_logprob_token_ids


def test_what_a_release_cannot_hold_is_refused_with_its_clause():
    c = wire_codec(shipped_profile("0.29"))
    msg = spec.EngineCoreOutputs(engine_index=0, outputs=[spec.EngineCoreOutput(
        "r", [1], new_sampling_mask=spec.SamplingMaskLists(**{
            f.name: None for f in msgspec.structs.fields(spec.SamplingMaskLists) if not f.required} | {
            f.name: [] for f in msgspec.structs.fields(spec.SamplingMaskLists) if f.required}))])
    with pytest.raises(LocalProtocolError) as info:
        c.encode_outputs(msg)
    assert info.value.clause == "ECP-COMPAT-1" and "0.29" in str(info.value)


def test_an_older_ready_payload_gives_033s_view_with_zeros_for_what_it_never_had():
    c = wire_codec(shipped_profile("0.21"))
    [frame] = [c.encode_handshake(ready_response(0))]
    assert len(msgspec.msgpack.decode(frame)) == 3
    view = c.decode_ready_response(frame)
    assert isinstance(view, spec.EngineCoreReadyResponse)
    assert view.max_model_len == 256 and view.block_size == 0


@pytest.mark.parametrize("release", ["0.21", "0.27", "0.31", "0.32"])
def test_machines_speak_a_release_end_to_end(release):
    """Both roles' machines over one release's codec: handshake, ADD, outputs, a utility call."""
    c = wire_codec(shipped_profile(release))
    p = Pair(codec=c)
    p.handshake()
    sends = p.fe.send(Add(0, request("r1")))
    type_frame, payload = sends[0].frames[1:3]
    assert type_frame == shipped_profile(release).request_types["ADD"]
    shipped_profile(release).codec.decode_input([type_frame, payload])  # the release reads what was sent
    events: list[Event] = p.deliver_to_engine(0, sends)
    assert events[0].request.request_id == "r1"
    got = p.output(0, out(0, "r1", spec.FinishReason.LENGTH))
    [finished] = [o for e in got for o in getattr(getattr(e, "outputs", None), "outputs", ())]
    assert finished.request_id == "r1" and finished.finish_reason is spec.FinishReason.LENGTH
    p.call(0, 5, "reset_prefix_cache")
    got = p.output(0, reply(0, 5, True))
    assert got and not p.fe.violations


def test_a_release_s_message_where_033_keeps_a_map():
    """0.29..0.32 send ``EngineCoreOutput.spec_decode_metrics`` as a ``RequestSpecDecodeMetrics`` message;
    0.33's class holds it as a plain map: the translation gives that map, keyed by the layout's names."""
    import msgspec

    from ecp.spec.layout.wire import sample
    from ecp.spec.profile import shipped_profile, wire_codec

    for release in ("0.29", "0.32"):
        profile = shipped_profile(release)
        raw = sample(profile.layout, "EngineCoreOutputs", "full")
        raw[4] = None   # the sample's utility result is no value a caller could have asked for
        out = wire_codec(profile).decode_outputs([msgspec.msgpack.encode(raw)]).outputs[0]
        assert isinstance(out.spec_decode_metrics, dict), release
        assert out.spec_decode_metrics["num_spec_tokens"] == 7, (release, out.spec_decode_metrics)
