"""Decoder tolerance (spec/PROTOCOL.md ECP-FRAME-4/5/6) and typed errors of the codec."""

from __future__ import annotations

import msgspec
import pytest

from ecp import spec
from ecp.spec import codec
from ecp.spec import request as request_module

enc = codec._PLAIN_ENCODER.encode


def _outputs(value):
    return spec.decode_outputs([enc(value)])


def test_short_and_long_arrays_are_accepted():
    out = _outputs([2, [["r", [1, 2]]]])  # EngineCoreOutputs [engine_index, outputs]
    assert out.engine_index == 2 and out.outputs[0].new_token_ids == [1, 2]
    assert out.outputs[0].num_nans_in_logits == 0 and out.timestamp == 0.0
    out = _outputs([0, [], None, 1.0, None, None, None, None, None, "extra", 42])
    assert out.timestamp == 1.0
    six = _outputs([0, [["r", [], None, None, None, 1]]])
    assert six.outputs[0].finish_reason is spec.FinishReason.LENGTH
    req = spec.decode_input([b"\x00", enc(["r", [1, 2], None, {}, None, 1, None, None, None])])
    assert req.client_index == 0 and req.abort_immediately is False and req.sampling_params.max_tokens == 16


def test_eight_element_request_is_rejected_with_its_clause():
    with pytest.raises(spec.DecodeError) as info:
        spec.decode_input([b"\x00", enc(["r", [1], None, {}, None, 1.0, None, None])])
    assert info.value.clause == "ECP-REQ-1" and "at least length 9" in info.value.message


def test_int_and_float32_where_floats_go_and_list_for_set():
    req = spec.decode_input([b"\x00", enc(["r", [1], None, {"temperature": 1}, None, 1700000000,
                                           None, None, None])])
    assert req.arrival_time == 1700000000.0 and isinstance(req.arrival_time, float)
    f32 = b"\x81\xabtemperature\xca\x3f\x00\x00\x00"  # fixmap, float32 0.5
    payload = b"\x99\xa1r\x91\x01\xc0" + f32 + b"\xc0\xcb" + msgspec.msgpack.encode(1.5)[1:] + b"\xc0\xc0\xc0"
    assert spec.decode_input([b"\x00", payload]).sampling_params.temperature == 0.5
    out = _outputs([0, [], None, 1.0, None, ["a", "b", "a"]])
    assert out.finished_requests == {"a", "b"}


def test_unknown_sampling_keys_ignored_and_normalisation_applied():
    req = spec.decode_input([b"\x00", enc(["r", [1], None, {"no_such_key": 3, "stop": "x",
                                                             "stop_token_ids": [9], "prompt_logprobs": 1},
                                           None, 1.0, None, None, None])])
    sp = req.sampling_params
    assert sp.stop == ["x"] and sp.bad_words == [] and 9 in sp.all_stop_token_ids
    assert sp.skip_reading_prefix_cache is True


def test_default_sampling_params_bytes_match_vllm():
    expected = bytes.fromhex("de0004a473746f7090ae73746f705f746f6b656e5f69647390a96261645f776f72647390"
                             "b9736b69705f72656164696e675f7072656669785f6361636865c2")
    assert spec.encode_payload(spec.SamplingParams()) == [expected]


def test_finish_reason_out_of_range_and_bare_utility_result():
    with pytest.raises(spec.DecodeError) as info:
        _outputs([0, [["r", [], None, None, None, 9]]])
    assert info.value.field_path == "$[1][0][5]" and "Invalid enum value 9" in info.value.message
    with pytest.raises(spec.DecodeError) as info:
        _outputs([0, [], None, 1.0, [7, None, False]])
    assert info.value.field_path == "$[4][2]"


def test_request_type_frame_and_frame_counts():
    for bad in (b"\x04", b"\x05", b"\x09", b"", b"\x00\x00"):
        with pytest.raises(spec.UnknownRequestType) as info:
            spec.decode_input([bad, b"\x90"])
        assert info.value.clause == "ECP-FRAME-1"
    with pytest.raises(spec.FrameCountError):
        spec.decode_input([b"\x01"])
    with pytest.raises(spec.FrameCountError):
        spec.decode_input([b"\x01", b"\x91\xa1r", b"aux"])  # only ADD carries aux frames
    with pytest.raises(spec.FrameCountError):
        spec.decode_outputs([])
    assert spec.decode_outputs([spec.ENGINE_CORE_DEAD]) is spec.ENGINE_DEAD
    assert spec.encode_engine_dead() == [b"ENGINE_CORE_DEAD"]


def test_tensor_wire_form_inline_and_aux():
    small = spec.Tensor("float32", (2,), b"\x00\x00\x80\x3f\x00\x00\x00\x40")
    (payload,) = spec.encode_payload(small)
    assert payload == bytes.fromhex("93a7666c6f617433329102d703") + small.data  # fixext8, type 3
    big = spec.Tensor("uint8", (300,), bytes(range(256)) + bytes(44))
    req = spec.EngineCoreRequest("r", [1], None, spec.SamplingParams(), None, 1.0, None, None, None,
                                 prompt_embeds=big)
    frames = spec.encode_add(req)
    assert len(frames) == 3 and frames[2] == big.data and b"\x93\xa5uint8\x91\xcd\x01\x2c\x01" in frames[1]
    assert spec.decode_input(frames).prompt_embeds == big


@pytest.mark.parametrize("data, message", [
    (0, "payload itself"), (5, "refers to frame 5"), ("x", "ext type 3"),
])
def test_bad_tensor_references_are_decode_errors(data, message):
    value = [0, [["r", [], None, None, ["uint8", [2], data]]]]
    with pytest.raises(spec.DecodeError) as info:
        spec.decode_outputs([enc(value), b"ab"])
    assert message in info.value.message


def test_tensor_shape_and_buffer_must_agree():
    bad = b"\x99\x00\x91\x95\xa1r\x90\xc0\xc0\x93\xa7float32\x91\x03\xd5\x03\x00\x00"  # 3 floats, 2 bytes
    with pytest.raises(spec.DecodeError) as info:
        spec.decode_outputs([bad])
    assert "needs 12 bytes" in info.value.message


def test_handshake_errors():
    with pytest.raises(spec.HandshakeError):
        spec.decode_handshake(enc({"status": "HELO", "local": True, "headless": False}))
    hello = spec.decode_handshake(enc({"status": "HELLO", "local": False, "headless": True,
                                       "parallel_config_hash": None}))  # Rust mock engine's 4th key
    assert hello == spec.Hello(local=False, headless=True)
    for addresses, got in (({"inputs": [], "outputs": []}, (0, 0)), ({"inputs": ["a"], "outputs": ["b", "c"]}, (1, 2)),
                           ({"inputs": ["a"], "outputs": ["b"], "coordinator_input": "x"}, None)):
        with pytest.raises(spec.HandshakeError) as info:
            spec.decode_init(enc({"addresses": addresses, "parallel_config": {}}))
        assert info.value.clause == "ECP-HS-2" and info.value.got == got
        assert info.value.field_path == "$.addresses" and info.value.frame_index == 0
        # built here, the same INIT is local misuse, refused by the type itself
        with pytest.raises(spec.InvalidMessageError) as local:
            spec.EngineZmqAddresses(**addresses)
        assert isinstance(local.value, spec.LocalProtocolError) and local.value.clause == "ECP-HS-2"
    assert spec.decode_ready_response(b"") is None
    with pytest.raises(spec.HandshakeError) as info:
        spec.decode_ready_response(enc({"max_model_len": 1}))
    assert info.value.clause == "ECP-HS-4" and "missing required field" in info.value.message


def test_ready_response_with_required_keys_only():
    required = {k: 0 for k in spec.REQUIRED_READY_KEYS}
    required.update(dp_stats_address=None, dtype="float32", vllm_version="0.33.0", instance_id="x",
                    supports_lora=False)
    resp = spec.decode_ready_response(enc(required))
    assert len(spec.REQUIRED_READY_KEYS) == 17 and resp.enable_sleep_mode is False
    full = spec.encode_handshake(resp)
    assert full[:3] == b"\xde\x00\x1c"  # all 28 keys, as the Python engine sends


def test_identity_helpers():
    assert spec.engine_identity(258) == b"\x02\x01" and spec.rank_of_identity(b"\x01\x00") == 1
    with pytest.raises(spec.LocalProtocolError):
        spec.engine_identity(70000)
    with pytest.raises(spec.HandshakeError):
        spec.rank_of_identity(b"\x00")


def test_encode_errors_are_local():
    with pytest.raises(spec.LocalProtocolError) as info:
        spec.encode_utility(0, -1, "is_sleeping")
    assert info.value.clause == "ECP-UTIL-1"
    with pytest.raises(spec.LocalProtocolError):
        spec.encode_payload(object())


def test_error_fields_are_structured():
    with pytest.raises(spec.DecodeError) as info:
        spec.decode_input([b"\x03", b"\x94\x00\x01\x02\x90"], frame_offset=1)
    d = info.value.to_dict()
    assert d["clause"] == "ECP-UTIL-1" and d["frame_index"] == 2 and d["field_path"] == "$[2]"
    assert (d["expected"], d["got"]) == ("str", "int")  # from the type table and the value
    assert str(info.value).startswith("[ECP-UTIL-1]")
    with pytest.raises(spec.DecodeError) as info:
        spec.decode_input([b"\x00", enc(["r", [1], None, {}, None, 1.0, None, None])])
    assert (info.value.field_path, info.value.expected, info.value.got) == ("$", "array of at least length 9", "8")
    with pytest.raises(spec.HandshakeError) as info:
        spec.decode_ready_response(b"\x80")
    assert (info.value.expected, info.value.got) == ("required field `max_model_len`", "missing")


def test_multimodal_tensors_inline_and_in_aux_frames():
    pixels = spec.Tensor("uint8", (2, 200), bytes(400))
    small = spec.Tensor("float32", (1,), b"\x00\x00\x80\x3f")
    feature = spec.MultiModalFeatureSpec(
        data={"pixel_values": {"data": [pixels, small, 3], "field": ["batched", {"keep_on_cpu": False}]},
              "image_grid_thw": {"data": small, "field": ["batched", {}]}},
        modality="image", identifier="img-0", mm_position=request_module.PlaceholderRange(1, 4), mm_hash="h")
    req = spec.EngineCoreRequest("r", [1, 2, 3, 4, 5], [feature], spec.SamplingParams(), None, 1.0, None,
                                 None, None)
    frames = spec.encode_add(req)
    assert len(frames) == 3 and frames[2] == pixels.data  # the 400-byte tensor went to an aux frame
    got = spec.decode_input(frames).mm_features[0]
    assert got.data["pixel_values"]["data"] == [pixels, small, 3]
    assert got.data["image_grid_thw"]["data"] == small and got == feature
    cached = spec.decode_input(spec.encode_add(spec.EngineCoreRequest(
        "r", [1], [spec.MultiModalFeatureSpec(None, "image", "img-0", request_module.PlaceholderRange(0, 1))],
        spec.SamplingParams(), None, 1.0, None, None, None)))
    assert cached.mm_features[0].data is None


def test_invalid_utf8_after_an_ext_in_a_typed_position_is_a_protocol_error():
    """The error path re-reads the payload untyped to name refused ext types; invalid UTF-8 met
    there (here after an ext-3 request id) must still surface as a typed error, not UnicodeDecodeError."""
    from ecp.spec import ProtocolError, decode_input

    payload = bytes.fromhex("99" "d40378" "91a1ff") + b"\xc0" * 7
    with pytest.raises(ProtocolError) as info:
        decode_input([b"\x00", payload])
    assert info.value.clause.startswith("ECP-")


def test_error_fields_do_not_depend_on_msgspec_wording():
    """expected/got/field path come from the type table and the value, not from msgspec's prose:
    the same fields result when msgspec's message says something else entirely."""
    cases = [
        (codec._DEC_UTILITY, b"\x94\x00\x01\x02\x90", "ECP-UTIL-1", ("$[2]", "str", "int")),
        (codec._DEC_REQUEST, enc(["r", [1], None, {}, None, 1.0, None, None]), "ECP-REQ-1",
         ("$", "array of at least length 9", "8")),
        (codec._DEC_READY_RESPONSE, b"\x80", "ECP-HS-4", ("$", "required field `max_model_len`", "missing")),
        (codec._DEC_OUTPUTS, enc([0, [["r", [], None, None, None, 9]]]), "ECP-FRAME-2",
         ("$[1][0][5]", "FinishReason (0, 1, 2, 3, 4)", "9")),
        (codec._DEC_OUTPUTS, enc([0, [["r", [], None, None, None, None, None, None, {"k": 1},
                                       None, {"t": 5}]]]), "ECP-FRAME-2", ("$[1][0][10][...]", "str", "int")),
        (codec._DEC_HANDSHAKE, enc({"status": "HELO", "local": True, "headless": False}), "ECP-HS-7",
         ("$.status", "'HELLO' | 'READY'", "'HELO'")),
    ]
    for decoder, payload, clause, fields in cases:
        with pytest.raises(codec.msgspec.ValidationError):
            decoder.decode(payload)
        err = codec._validation_error(decoder, payload, codec.msgspec.ValidationError("(reworded)"), clause, 1)
        assert (err.field_path, err.expected, err.got) == fields, err.to_dict()
        assert err.clause == clause and err.frame_index == 1


def test_refused_ext_in_a_typed_position_is_named_with_its_path():
    pickled = codec._PLAIN_ENCODER.encode(codec.msgspec.msgpack.Ext(1, b"\x80\x04N."))
    with pytest.raises(spec.UnsafeExtType) as info:
        spec.decode_input([b"\x00", b"\x99\xa1r\x90\xc0" + pickled + b"\xc0\x01\xc0\xc0\xc0"])
    assert (info.value.code, info.value.field_path, info.value.frame_index) == (1, "$[3]", 1)
    with pytest.raises(spec.DecodeError) as info:  # ext 3 is a tensor body, not a request id
        spec.decode_input([b"\x00", b"\x99\xd4\x03\x00" + b"\x90" + b"\xc0" * 7])
    assert (info.value.field_path, info.value.expected, info.value.got) == ("$[0]", "str", "ext 3")


def test_an_input_message_is_its_payload_and_its_class_names_the_request_type():
    req = spec.EngineCoreRequest("r", [1], None, spec.SamplingParams(), None, 1.0, None, None, None)
    call = spec.UtilityRequest(0, 5, "is_sleeping", [])
    wave = spec.StartDPWave(3, None)
    for message, rtype in ((req, spec.RequestType.ADD), (["a", "b"], spec.RequestType.ABORT),
                           (call, spec.RequestType.UTILITY), (wave, spec.RequestType.START_DP_WAVE)):
        assert spec.request_type_of(message) is rtype
        frames = spec.encode_input(message)
        assert frames[0] == rtype.value and spec.decode_input(frames) == message
    assert spec.encode_input(("a", "b")) == spec.encode_abort(["a", "b"])  # any sequence of ids
    with pytest.raises(spec.LocalProtocolError) as info:
        spec.encode_input({"request_id": "r"})
    assert info.value.clause == "ECP-FRAME-1" and info.value.got == "dict"


def test_init_with_unusable_addresses_is_refused():
    """ECP-HS-2.2: an INIT with no inputs, unequal lists or one coordinator address does not decode."""
    from ecp.spec.handshake import EngineHandshakeMetadata, EngineZmqAddresses

    good = {"inputs": ["ipc://i"], "outputs": ["ipc://o"], "coordinator_input": None, "coordinator_output": None,
            "frontend_stats_publish_address": None}
    assert msgspec.msgpack.decode(msgspec.msgpack.encode({"addresses": good, "parallel_config": {}}),
                                  type=EngineHandshakeMetadata).addresses.inputs == ["ipc://i"]
    for bad in ({"inputs": [], "outputs": []}, {"inputs": ["ipc://i"], "outputs": ["ipc://o", "ipc://p"]},
                {"coordinator_input": "tcp://127.0.0.1:1"}):
        raw = msgspec.msgpack.encode({"addresses": {**good, **bad}, "parallel_config": {}})
        with pytest.raises((spec.ProtocolError, msgspec.ValidationError)) as info:
            msgspec.msgpack.decode(raw, type=EngineHandshakeMetadata)
        assert "ECP-HS-2" in str(info.value) or getattr(info.value, "clause", None) == "ECP-HS-2"
    with pytest.raises(spec.ProtocolError):
        EngineZmqAddresses(inputs=["ipc://i"], outputs=[])
