"""ecp.spec's codec (the tuned codec of vLLM 0.33's typed API) and the codec of the vLLM 0.33 profile
(generated from spec/layouts/vllm-0.33.json, spec/profile/codec.py) describe the same wire.

Both take the same classes (ecp.spec's messages are the 0.33 module's generated ones) but decode and
encode them by separate code: decoders with their own hooks and limits, the tuned codec's aux-frame and
recovery paths. Wire-identical means, for every message the tests can name (the golden vectors of real
vLLM 0.33 peers and random messages of every kind):

* both codecs decode it to the same value (same fields, positions, defaults, enums; the classes' own
  normalisation, e.g. ``SamplingParams.stop`` nil -> [], applies to both);
* a message carried over into the profile's classes encodes to exactly the bytes ecp.spec's codec
  writes (field order, array lengths, omitted defaults, tags), a set's order aside;
* a payload cut short is refused by both or by neither.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecp import spec
from ecp.spec import codec, golden
from ecp.spec.control import StartDPWave, UtilityRequest
from ecp.spec.errors import ProtocolError
from ecp.spec.frames import KIND_DIRECTION, decode_frames
from ecp.spec.profile import shipped_profile
from message_strategies import outputs, ready_responses, requests, text, u64

FAST = settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.too_slow])

P33 = shipped_profile("0.33")
C33 = P33.codec

#: ecp.spec's class -> the 0.33 profile's message of the same name
API_CLASSES = {
    spec.EngineCoreRequest: "EngineCoreRequest", UtilityRequest: "UtilityRequest", StartDPWave: "StartDPWave",
    spec.EngineCoreOutputs: "EngineCoreOutputs", spec.Hello: "Hello", spec.Ready: "Ready",
    spec.EngineHandshakeMetadata: "EngineHandshakeMetadata", spec.EngineCoreReadyResponse: "EngineCoreReadyResponse",
}


def _wire(value: Any) -> Any:
    """The wire form of a decoded value with every field written out (defaults included, so
    that two types with different defaults cannot agree by both leaving a field out):
    array structs as lists, map structs as maps (tag first), tensors as ``[dtype, shape, bytes]``."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        items = [_wire(getattr(value, name)) for name in value.__struct_fields__]
        if config.array_like:
            return items
        out = {config.tag_field: config.tag} if config.tag_field else {}
        out.update(zip(value.__struct_encode_fields__, items))
        return out
    if isinstance(value, spec.Tensor):
        return [value.dtype, list(value.shape), value.data]
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_wire(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # an enum member: its number
    return value


def _tensor_out(obj: Any) -> Any:
    if isinstance(obj, spec.Tensor):
        return [obj.dtype, list(obj.shape), obj.data]
    raise TypeError(type(obj).__name__)


def _carry(value: Any, target: Any, *, full: bool) -> Any:
    """``value`` (decoded by either codec) as an instance of ``target``, through its wire
    form: with every field (``full``; a default the two types disagree on then shows), or
    as msgspec encodes it (a field whose value is its default object left out, so that the
    target's encoder omits the same fields the source's does)."""
    wire = _wire(value) if full else msgspec.to_builtins(value, builtin_types=(bytes,), enc_hook=_tensor_out)
    return msgspec.convert(wire, target, dec_hook=codec._dec_hook)


def _api_type(message: Any) -> Any:
    if isinstance(message, list):
        return list[str]
    if isinstance(message, (spec.Hello, spec.Ready)):
        return spec.Hello | spec.Ready
    return type(message)


def _profile_type(message: Any) -> Any:
    if isinstance(message, list):
        return list[str]
    if isinstance(message, (spec.Hello, spec.Ready)):
        return P33.message("Hello") | P33.message("Ready")
    return P33.message(API_CLASSES[type(message)])


def _profile_frames(message: Any, direction: str) -> list[bytes]:
    if direction == "input":
        return C33.encode_input(message)
    if direction == "output":
        return C33.encode_outputs(message)
    return [C33.encode_handshake(message)]


def _api_frames(message: Any, direction: str) -> list[bytes]:
    if direction == "input":
        return spec.encode_input(message)
    if direction == "output":
        return spec.encode_outputs(message)
    return [spec.encode_handshake(message)]


def _assert_parity(frames: list[bytes], direction: str) -> None:
    hand = decode_frames(frames, direction).message
    generated = C33.decode(frames, direction)
    if hand is None:  # an empty ready payload
        assert generated is None
        return
    assert _carry(generated, _api_type(hand), full=True) == hand
    again = _carry(hand, _profile_type(hand), full=False)
    ours, theirs = _profile_frames(again, direction), _api_frames(hand, direction)
    if ours != theirs:  # only a set's order may differ: each side writes it in its own set's iteration order
        assert [len(f) for f in ours] == [len(f) for f in theirs]
        assert _sorted_sets(decode_frames(ours, direction).message) == _sorted_sets(hand)


def _sorted_sets(value: Any) -> Any:
    """``value`` with every field written out (as :func:`_wire`), each set as its sorted list."""
    if isinstance(value, msgspec.Struct):
        return [_sorted_sets(getattr(value, name)) for name in value.__struct_fields__]
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, dict):
        return {k: _sorted_sets(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sorted_sets(v) for v in value]
    return _wire(value)


# ------------------------------------------------------------------ golden vectors
def _golden() -> list[golden.Vector]:
    return [v for v in golden.load_vectors()
            if KIND_DIRECTION[v.kind] in ("input", "output", "handshake", "init", "ready")
            and v.kind != "engine_dead"]


def _frames_of(v: golden.Vector) -> list[bytes]:
    frames = list(v.frames)
    if KIND_DIRECTION[v.kind] == "input" and len(frames[0]) == 2:  # captured on a ROUTER: identity first
        frames = frames[1:]
    return frames


@pytest.mark.parametrize("vector", _golden(), ids=lambda v: v.name[:60])
def test_golden_vectors_decode_and_encode_alike(vector):
    _assert_parity(_frames_of(vector), KIND_DIRECTION[vector.kind])


def test_the_golden_vectors_cover_every_kind_the_profile_decodes():
    kinds = {v.kind for v in _golden()}
    assert kinds >= {"add", "abort", "utility", "start_dp_wave", "outputs", "hello", "ready", "init",
                     "ready_response"}


def test_a_golden_python_frontend_add_comes_back_byte_for_byte():
    # a sender that wrote every key (as vLLM's Python frontend does): the profile re-encodes
    # exactly the bytes it decoded, without ecp.spec's codec's help
    v = next(v for v in golden.load_vectors() if v.kind == "add" and v.producer == "python-frontend")
    frames = _frames_of(v)
    assert C33.encode_input(C33.decode_input(frames)) == frames


# ------------------------------------------------------------------ random messages
@FAST
@given(requests)
def test_random_adds(req):
    _assert_parity(spec.encode_add(req), "input")


@FAST
@given(outputs)
def test_random_outputs(out):
    _assert_parity(spec.encode_outputs(out), "output")


@FAST
@given(st.integers(0, 8), u64, st.text(min_size=1, max_size=30), st.lists(text, max_size=3),
       st.lists(text, max_size=4), st.integers(0, 2**31), st.none() | st.integers(0, 65535))
def test_random_control_messages(client, call_id, method, args, ids, wave, exclude):
    _assert_parity(spec.encode_utility(client, call_id, method, args), "input")
    _assert_parity(spec.encode_abort(ids), "input")
    _assert_parity(spec.encode_start_dp_wave(wave, exclude), "input")


@FAST
@given(ready_responses, st.booleans(), st.booleans(), st.none() | text)
def test_random_handshake_messages(ready_response, local, headless, config_hash):
    _assert_parity([spec.encode_handshake(ready_response)], "ready")
    _assert_parity([spec.encode_handshake(spec.Hello(local=local, headless=headless))], "handshake")
    _assert_parity([spec.encode_handshake(spec.Ready(local=local, headless=headless,
                                                     parallel_config_hash=config_hash))], "handshake")


def _refused(decode: Any, frames: list[bytes]) -> bool:
    try:
        decode(frames)
    except ProtocolError:
        return True
    return False


@FAST
@given(requests, outputs)
def test_payloads_cut_short_are_refused_alike(req, out):
    # the same required prefix: an array shorter than its required fields fails both
    for frames, at, hand, generated in ((spec.encode_add(req), 1, spec.decode_input, C33.decode_input),
                                        (spec.encode_outputs(out), 0, spec.decode_outputs, C33.decode_outputs)):
        value = msgspec.msgpack.decode(frames[at], ext_hook=lambda code, data: msgspec.msgpack.Ext(code, bytes(data)))
        for keep in range(len(value)):
            cut = [*frames[:at], msgspec.msgpack.encode(value[:keep]), *frames[at + 1:]]
            assert _refused(hand, cut) == _refused(generated, cut)
            if at == 1:
                assert _refused(generated, cut) == (keep < 9)  # EngineCoreRequest: 9 required elements


# ------------------------------------------------------------------ sparse messages: the defaults
def _pack(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


SPARSE = {
    # the 9 required elements; SamplingParams an empty map: every other value is a default
    "ADD, 9 elements, empty SamplingParams": (
        [b"\x00", _pack(["r", [1], None, {}, None, 1.5, None, None, None])], "input"),
    "ADD with 2-element LoRARequest and empty PoolingParams": (
        [b"\x00", _pack(["r", [1], None, None, [], 1.5, ["a", 1], None, None])], "input"),
    "outputs: empty array": ([_pack([])], "output"),
    "outputs: one 2-element output, empty stats and 1-element utility reply": (
        [_pack([0, [["r", [1]]], {}, 0.0, [5]])], "output"),
    "ready payload: required keys only": ([_pack({
        "max_model_len": 8, "num_gpu_blocks": 1, "block_size": 16, "dp_stats_address": None, "dtype": "x",
        "vllm_version": "0.33.0", "world_size": 1, "data_parallel_size": 1, "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1, "decode_context_parallel_size": 1, "data_parallel_rank": 0,
        "max_num_seqs": 1, "max_num_batched_tokens": 8, "instance_id": "i", "supports_lora": False,
        "max_loras": 0})], "ready"),
    "READY without optional keys": ([_pack({"status": "READY", "local": True, "headless": False})], "handshake"),
    "INIT with two address lists": ([_pack({"addresses": {"inputs": ["a"], "outputs": ["b"]},
                                            "parallel_config": {}})], "init"),
}


@pytest.mark.parametrize("name", list(SPARSE))
def test_sparse_messages_take_the_same_defaults(name):
    frames, direction = SPARSE[name]
    _assert_parity(frames, direction)
