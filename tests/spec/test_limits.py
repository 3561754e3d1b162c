"""Every decode limit (ECP-FRAME-9) holds on the fast path, before allocation, in constant memory.

Each hostile frame is refused with a typed error; tracemalloc shows that the memory the decoder
takes does not grow with what the frame *declares* (a 2^32-element claim costs what a 2^8 one does).
"""

from __future__ import annotations

import gc
import tracemalloc

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecp import spec
from ecp.spec import codec, limits, untyped
from ecp.spec.control import UtilityRequest
from ecp.spec.handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from ecp.spec.outputs import EngineCoreOutputs
from ecp.spec.request import EngineCoreRequest

enc = msgspec.msgpack.encode
KIB = 1024


def _peak(fn) -> int:
    """Peak bytes allocated while ``fn`` runs (its exception, if any, swallowed)."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
    except spec.ProtocolError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def _refused(fn, error=spec.DecodeError) -> spec.ProtocolError:
    with pytest.raises(error) as info:
        fn()
    assert info.value.clause.startswith("ECP-")
    return info.value


def _add_payload(extra_args) -> bytes:
    params = spec.SamplingParams(extra_args=extra_args)
    req = EngineCoreRequest("r", [1, 2], None, params, None, 1.0, None, None, None)
    return spec.encode_add(req)[1]


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


# ------------------------------------------------------------------ declared lengths
@pytest.mark.parametrize("header", [b"\xdd", b"\xdf", b"\xc6", b"\xc9\xff", b"\xdb"],
                         ids=["array32", "map32", "bin32", "ext32", "str32"])
def test_a_length_beyond_the_frame_is_refused_in_constant_memory(header):
    def frame(declared: int) -> bytes:
        if header == b"\xc9\xff":  # ext32: length, then the type byte
            return b"\xc9" + declared.to_bytes(4, "big") + b"\x03" + b"\x00" * 16
        return header + declared.to_bytes(4, "big") + b"\xc0" * 16

    for place in ("outputs", "add", "untyped"):
        def decode(declared: int, place=place):
            if place == "outputs":
                return lambda: spec.decode_outputs([frame(declared)])
            if place == "add":  # in a typed position: the request id
                return lambda: spec.decode_input([b"\x00", b"\x99" + frame(declared)])
            # inside extra_args (Any), past every typed field
            payload = _add_payload({"k": 1})
            cut = payload.index(b"\xa1k") + 2
            return lambda: spec.decode_input([b"\x00", payload[:cut] + frame(declared)])

        _refused(decode(2**32 - 1))
        small, huge = _peak(decode(2**8)), _peak(decode(2**32 - 1))
        assert huge < 64 * KIB and huge < small + 16 * KIB, (place, small, huge)


def test_a_collection_longer_than_max_collection_len_is_limit_exceeded():
    tight = spec.DecodeLimits(max_collection_len=100)
    for count, tail in ((2**32 - 1, 200), (150, 150)):  # a claim, and a real 150-element array
        frame = b"\xdd" + count.to_bytes(4, "big") + b"\xc0" * tail
        exc = _refused(lambda: spec.decode_outputs([frame], tight), spec.LimitExceeded)
        assert (exc.clause, exc.got, exc.frame_index) == ("ECP-FRAME-9", count, 0)
    claim = b"\xdd\xff\xff\xff\xff" + b"\xc0" * 200
    assert _peak(lambda: spec.decode_outputs([claim], tight)) < 16 * KIB
    # the same real array inside an untyped field
    exc = _refused(lambda: spec.decode_input([b"\x00", _add_payload({"k": [0] * 150})], tight),
                   spec.LimitExceeded)
    assert exc.got == 150 and exc.frame_index == 1


# ------------------------------------------------------------------ nesting
@pytest.mark.parametrize("where", ["outputs", "typed", "extra_args", "utility args"])
def test_deep_nesting_is_limit_exceeded_in_constant_memory(where):
    def decode(depth: int):
        chain = b"\x91" * depth + b"\xc0"
        if where == "outputs":
            return lambda: spec.decode_outputs([chain])
        if where == "typed":  # where the ADD expects a str
            return lambda: spec.decode_input([b"\x00", b"\x99" + chain + b"\xc0" * 8])
        if where == "extra_args":
            payload = _add_payload({"k": 1})
            cut = payload.index(b"\xa1k") + 2
            return lambda: spec.decode_input([b"\x00", payload[:cut] + chain + payload[cut + 1:]])
        return lambda: spec.decode_input([b"\x03", b"\x94\x00\x01\xa1m\x91" + chain])

    exc = _refused(decode(100_000), spec.LimitExceeded)
    assert exc.clause == "ECP-FRAME-9"
    # memory: what the frame itself takes, whatever its depth (msgspec stops at the recursion
    # limit or the type, the walk on the error path keeps one counter per open level <= max_depth)
    for depth in (1_000, 100_000):
        assert _peak(decode(depth)) < depth + 256 * KIB


@pytest.mark.parametrize("field, place", [
    ("extra_args", "add"), ("kv_transfer_params", "outputs"), ("args", "utility"), ("value", "reply"),
])
def test_untyped_values_are_held_to_max_depth_exactly(field, place):
    """msgspec alone would accept these (they are far from the recursion limit): the checker
    generated from the types refuses one level past max_depth, and names the field."""
    limit = spec.DEFAULT_LIMITS.max_depth

    def frames(depth: int) -> list[bytes]:
        if place == "add":  # EngineCoreRequest (1) > SamplingParams (2) > extra_args
            return [b"\x00", _add_payload({"k": _nested(depth - 1)})]
        if place == "outputs":  # EngineCoreOutputs (1) > outputs (2) > EngineCoreOutput (3) > field
            out = spec.EngineCoreOutput("r", [1], kv_transfer_params={"k": _nested(depth - 1)})
            return spec.encode_outputs(spec.EngineCoreOutputs(outputs=[out]))
        if place == "utility":  # UtilityRequest (1) > args, the untyped list
            return spec.encode_utility(0, 1, "m", [_nested(depth - 1)])
        reply = spec.UtilityOutput(7, None, spec.UtilityResult(None, _nested(depth)))
        return spec.encode_outputs(spec.EngineCoreOutputs(utility_output=reply))  # outputs > reply > result

    levels = {"add": 2, "outputs": 3, "utility": 1, "reply": 3}[place]  # containers around the value
    decode = spec.decode_outputs if place in ("outputs", "reply") else spec.decode_input
    ok = frames(limit - levels)
    decode(ok)
    limits.check_frame(ok[-1] if place in ("outputs", "reply") else ok[1])  # the wire walk agrees
    bad = frames(limit - levels + 1)
    exc = _refused(lambda: decode(bad), spec.LimitExceeded)
    assert exc.clause == "ECP-FRAME-9" and exc.frame_index == len(bad) - 1
    assert exc.field_path == {"add": "$[3].extra_args['k']", "outputs": "$[1][0][8]['k']",
                              "utility": "$[3][0]", "reply": "$[4][2][1]"}[place]
    with pytest.raises(spec.LimitExceeded):
        limits.check_frame(bad[-1] if place in ("outputs", "reply") else bad[1])


@pytest.mark.parametrize("place", ["reasoning_parser_kwargs", "ready"])
def test_untyped_maps_at_other_levels_are_held_to_max_depth_exactly(place):
    """The same bound for a map of untyped values straight under the message (an ADD's
    ``reasoning_parser_kwargs``, as vllm-rs always sends it; the ready payload's
    ``kv_events_config``): one level past ``max_depth`` is refused, at its field path."""
    limit = spec.DEFAULT_LIMITS.max_depth

    def frame(depth: int) -> bytes:  # the map (level 2) > "k" > a chain of ``depth - 2`` lists
        if place == "ready":
            ready = EngineCoreReadyResponse(**{k: 0 for k in spec.REQUIRED_READY_KEYS} | dict(
                dp_stats_address=None, dtype="float32", vllm_version="0.33.0", instance_id="x",
                supports_lora=False, kv_events_config={"k": _nested(depth - 2)}))
            return spec.encode_handshake(ready)
        req = EngineCoreRequest("r", [1], None, spec.SamplingParams(), None, 1.0, None, None, None,
                                reasoning_parser_kwargs={"k": _nested(depth - 2)})
        return spec.encode_add(req)[1]

    def decode(payload: bytes):
        return spec.decode_ready_response(payload) if place == "ready" else spec.decode_input([b"\x00", payload])

    assert len(frame(limit)) > spec.DEFAULT_LIMITS.max_depth + 1  # long enough to be checked, not skipped
    decode(frame(limit))
    limits.check_frame(frame(limit))  # the wire walk agrees on both sides of the bound
    with pytest.raises(spec.LimitExceeded):
        limits.check_frame(frame(limit + 1))
    exc = _refused(lambda: decode(frame(limit + 1)), spec.LimitExceeded)
    assert exc.clause == "ECP-FRAME-9"
    assert exc.field_path == ("$.kv_events_config['k']" if place == "ready" else "$[18]['k']")


def test_a_tight_max_depth_walks_every_frame():
    out = spec.EngineCoreOutput("r", [1], events=[spec.EngineCoreEvent(1, 0.5)])
    frames = spec.encode_outputs(spec.EngineCoreOutputs(outputs=[out]))
    spec.decode_outputs(frames)
    # outputs > list > output > events > event: 5 levels, all typed
    exc = _refused(lambda: spec.decode_outputs(frames, spec.DecodeLimits(max_depth=4)), spec.LimitExceeded)
    assert exc.clause == "ECP-FRAME-9"
    spec.decode_outputs(frames, spec.DecodeLimits(max_depth=5))


def test_typed_positions_nest_no_deeper_than_the_bound_the_limits_assume():
    for typ in (EngineCoreRequest, EngineCoreOutputs, UtilityRequest, list[str], Hello | Ready,
                EngineHandshakeMetadata, EngineCoreReadyResponse, spec.StartDPWave, spec.CoordinatorPublication):
        assert untyped.typed_depth(typ) <= limits.TYPED_DEPTH_BOUND, typ


# ------------------------------------------------------------------ frames
def test_too_many_frames_and_an_oversized_frame_are_refused_before_decoding():
    many = [b"\x00", b"\x90"] + [b"x"] * 1100
    exc = _refused(lambda: spec.decode_input(many), spec.LimitExceeded)
    assert exc.got == 1102 and exc.expected == "<= 1024 frames"
    _refused(lambda: spec.decode_outputs([b"\x90"] * 1025), spec.LimitExceeded)

    small = spec.DecodeLimits(max_frame_bytes=1000)
    big = spec.encode_outputs(spec.EngineCoreOutputs(outputs=[spec.EngineCoreOutput("r" * 2000, [1])]))[0]
    for decode in (lambda: spec.decode_outputs([big], small), lambda: spec.decode_input([b"\x00", big], small),
                   lambda: spec.decode_any(big, small), lambda: spec.decode_ready_response(big, small),
                   lambda: spec.decode_handshake(big, small)):
        exc = _refused(decode, spec.RemoteProtocolError)  # handshake decoders raise HandshakeError
        assert (exc.clause, exc.got, exc.expected) == ("ECP-FRAME-9", len(big), "<= 1000 bytes")
    huge = b"\xdc\xff\xff" + b"\xc0" * (4 * 1024 * 1024)  # refused by its size alone: nothing is built
    assert _peak(lambda: spec.decode_outputs([huge], small)) < 16 * KIB
    many = [b"\x00", b"\x90"] + [b"x"] * 100_000
    assert _peak(lambda: spec.decode_input(many)) < 16 * KIB
    # an oversized aux frame, too
    exc = _refused(lambda: spec.decode_input([b"\x00", _add_payload(None), b"a" * 2000], small),
                   spec.LimitExceeded)
    assert exc.frame_index == 2


def test_fast_and_careful_paths_agree_on_good_frames():
    """The careful path (a header walk first) decodes what the hot path decodes, to the same value."""
    from ecp.spec import golden

    for v in golden.load_vectors():
        if v.kind == "outputs":
            frames = v.frames
            assert codec._decode_checked(codec._DEC_OUTPUTS, frames, 0, "ECP-FRAME-2", spec.DEFAULT_LIMITS, 0) \
                == spec.decode_outputs(frames)
        elif v.kind == "add":
            fast = spec.decode_input(v.frames)
            careful = codec._decode_checked(codec._DEC_REQUEST, v.frames, 1, "ECP-REQ-1", spec.DEFAULT_LIMITS, 0)
            assert fast == careful


_small = st.recursive(st.none() | st.integers(-5, 5) | st.text(max_size=3),
                      lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner,
                                                                                    max_size=2),
                      max_leaves=4)


@st.composite
def _deep_values(draw):
    """A chain of 0-16 nested arrays/maps (with siblings, empty containers among them) around a leaf."""
    value = draw(_small | st.just([]) | st.just({}))
    for _ in range(draw(st.integers(0, 16))):
        siblings = draw(st.lists(_small, max_size=2))
        if draw(st.booleans()):
            value = [*siblings, value]
        else:
            value = {**{f"s{i}": s for i, s in enumerate(siblings)}, "k": value}
    return value


@settings(max_examples=100, deadline=None)
@given(_deep_values(), _deep_values(), st.integers(limits.TYPED_DEPTH_BOUND, 14))
def test_the_generated_checker_agrees_with_the_wire_walk(extra_args, kv_params, max_depth):
    """For untyped values of any shape, the hot path refuses exactly what the header walk refuses."""
    tight = spec.DecodeLimits(max_depth=max_depth)
    cases = [(lambda f: spec.decode_input(f, tight), [b"\x00", _add_payload({"x": extra_args})], 1)]
    out = spec.EngineCoreOutput("r", [1], kv_transfer_params={"k": kv_params})
    cases.append((lambda f: spec.decode_outputs(f, tight), spec.encode_outputs(spec.EngineCoreOutputs(outputs=[out])), 0))
    for decode, frames, index in cases:
        try:
            limits.check_frame(frames[index], tight)
            walk_refuses = False
        except spec.LimitExceeded:
            walk_refuses = True
        try:
            decode(frames)
            refused = False
        except spec.LimitExceeded as exc:
            refused = True
            assert exc.frame_index == index
        assert refused == walk_refuses
