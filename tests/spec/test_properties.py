"""Property tests: encode∘decode is the identity for valid messages of every kind, and arbitrary
bytes or frame lists only ever raise typed ``ProtocolError``s."""

from __future__ import annotations

import pickle

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecp import spec
from ecp.spec import codec, golden
from ecp.spec.errors import ProtocolError
from ecp.spec.frames import decode_frames
from message_strategies import ids, json_like, opt, outputs, ready_responses, requests, small, tensors, text, u64

FAST = settings(max_examples=40, deadline=5000, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ round trips
@FAST
@given(requests)
def test_add_roundtrip(req):
    frames = spec.encode_add(req)
    assert frames[0] == b"\x00" and frames[1][:3] == b"\xdc\x00\x16"
    assert spec.decode_input(frames) == req
    # re-encoding a decoded request gives the same bytes up to set order (sets are unordered
    # on the wire, ``_all_stop_token_ids``), hence the same length
    again = spec.encode_add(spec.decode_input(frames))
    assert [len(f) for f in again] == [len(f) for f in frames]


@FAST
@given(outputs)
def test_outputs_roundtrip(out):
    frames = spec.encode_outputs(out)
    assert frames[0][:1] == b"\x99"
    assert spec.decode_outputs(frames) == out


@FAST
@given(st.integers(0, 8), u64, st.text(min_size=1, max_size=30), st.lists(json_like, max_size=4))
def test_utility_roundtrip(client, call_id, method, args):
    msg = spec.decode_input(spec.encode_utility(client, call_id, method, args))
    assert (msg.client_idx, msg.call_id, msg.method_name, msg.args) == (
        client, call_id, method, args)


@FAST
@given(st.lists(ids, max_size=20), small, opt(st.integers(0, 65535)))
def test_abort_and_wave_roundtrip(request_ids, wave, exclude):
    assert spec.decode_input(spec.encode_abort(request_ids)) == request_ids
    w = spec.decode_input(spec.encode_start_dp_wave(wave, exclude))
    assert (w.new_wave, w.exclude_eng_index) == (wave, exclude)


@FAST
@given(st.lists(st.lists(small, min_size=2, max_size=2), max_size=4), small, st.booleans())
def test_coordinator_publication_roundtrip(counts, wave, running):
    pub = spec.CoordinatorPublication(counts, wave, running)
    frame = spec.encode_handshake(pub)  # one plain msgpack frame, like the handshake messages
    assert spec.decode_coordinator_publication(frame) == pub
    assert decode_frames([frame], "coordinator").message == pub


@FAST
@given(st.booleans(), st.booleans(), opt(text), ready_responses,
       st.lists(text, min_size=1, max_size=3), st.dictionaries(text, st.one_of(small, text), max_size=3))
def test_handshake_roundtrip(local, headless, pch, ready_resp, inputs, parallel_config):
    hello = spec.Hello(local=local, headless=headless)
    ready = spec.Ready(local=local, headless=headless, parallel_config_hash=pch)
    assert spec.decode_handshake(spec.encode_handshake(hello)) == hello
    assert spec.decode_handshake(spec.encode_handshake(ready)) == ready
    init = spec.EngineHandshakeMetadata(
        addresses=spec.EngineZmqAddresses(inputs=inputs, outputs=[i + "o" for i in inputs]),
        parallel_config=parallel_config)
    assert spec.decode_init(spec.encode_handshake(init)) == init
    assert spec.decode_ready_response(spec.encode_handshake(ready_resp)) == ready_resp


@FAST
@given(st.lists(tensors(), min_size=1, max_size=4))
def test_tensors_inline_and_in_aux_frames(ts):
    out = spec.EngineCoreOutputs(outputs=[spec.EngineCoreOutput(f"r{i}", [], pooling_output=t)
                                          for i, t in enumerate(ts)])
    frames = spec.encode_outputs(out)
    assert len(frames) == 1 + sum(t.nbytes >= spec.AUX_FRAME_THRESHOLD for t in ts)
    assert sorted(frames[1:]) == sorted(t.data for t in ts if t.nbytes >= spec.AUX_FRAME_THRESHOLD)
    assert spec.decode_outputs(frames) == out


# ------------------------------------------------------------------ arbitrary input
DECODERS = [
    lambda f: spec.decode_input(f),
    lambda f: spec.decode_outputs(f),
    lambda f: spec.decode_handshake(f[0]) if f else spec.decode_handshake(b""),
    lambda f: spec.decode_init(f[0]) if f else spec.decode_init(b""),
    lambda f: spec.decode_ready_response(f[0]) if f else spec.decode_ready_response(b"\xc1"),
    lambda f: spec.decode_coordinator_publication(f[0]) if f else spec.decode_coordinator_publication(b""),
    lambda f: decode_frames(f),
]
GOLDEN_FRAMES = [v.frames for v in golden.load_vectors()]


def _only_protocol_errors(frames):
    for decode in DECODERS:
        try:
            decode(frames)
        except ProtocolError as exc:
            assert exc.clause in spec.CLAUSES


@settings(max_examples=200, deadline=5000)
@given(st.lists(st.binary(max_size=64), max_size=4))
def test_arbitrary_frames_raise_only_protocol_errors(frames):
    _only_protocol_errors(frames)


@settings(max_examples=200, deadline=5000)
@given(st.sampled_from(GOLDEN_FRAMES), st.data())
def test_mutated_golden_frames_raise_only_protocol_errors(frames, data):
    frames = list(frames)
    i = data.draw(st.integers(0, len(frames) - 1))
    buf = bytearray(frames[i])
    for _ in range(data.draw(st.integers(1, 4))):
        if buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    frames[i] = bytes(buf[:cut]) if data.draw(st.booleans()) else bytes(buf)
    _only_protocol_errors(frames)


@settings(max_examples=100, deadline=5000)
@given(json_like)
def test_wrongly_shaped_msgpack_raises_only_protocol_errors(value):
    payload = codec._PLAIN_ENCODER.encode(value)
    for type_byte in (b"\x00", b"\x01", b"\x02", b"\x03"):
        _only_protocol_errors([type_byte, payload])
    _only_protocol_errors([payload])


# ------------------------------------------------------------------ limits and unsafe payloads
def test_header_claiming_2_to_the_32_elements_is_a_typed_error():
    for payload in (b"\xdd\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff" + b"\xc0" * 200,
                    b"\xdf\xff\xff\xff\xff" + b"\xc0" * 200, b"\xc6\xff\xff\xff\xff"):
        for decode in (lambda p: spec.decode_outputs([p]), lambda p: spec.decode_input([b"\x00", p])):
            try:
                decode(payload)
            except spec.DecodeError as exc:  # LimitExceeded is a DecodeError
                assert exc.clause.startswith("ECP-")
            else:
                raise AssertionError("decoded a 2^32-element claim")
    # a frame longer than max_collection_len is walked, and the claim is reported as a limit breach
    try:
        spec.decode_outputs([b"\xdd\xff\xff\xff\xff" + b"\xc0" * 200], spec.DecodeLimits(max_collection_len=100))
    except spec.LimitExceeded as exc:
        assert exc.clause == "ECP-FRAME-9" and exc.got == 2**32 - 1
    else:
        raise AssertionError("max_collection_len not enforced")


def test_deep_nesting_is_limit_exceeded():
    deep = b"\x91" * 100_000 + b"\xc0"
    for frames in ([deep], [b"\x03", deep]):
        try:
            decode_frames(frames)
        except spec.LimitExceeded as exc:
            assert exc.clause == "ECP-FRAME-9"
        else:
            raise AssertionError("decoded 100000 levels of nesting")
    tight = spec.DecodeLimits(max_depth=8)
    try:
        spec.decode_outputs([b"\x91" * 20 + b"\xc0"], tight)
    except spec.LimitExceeded:
        pass
    else:
        raise AssertionError("max_depth not enforced")


class _CreatesMarker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # unpickling would call open(path, "w"): creates the marker file
        return (open, (self.path, "w"))


def test_pickle_ext_types_are_refused_and_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_CreatesMarker(str(marker)))  # dumping does not call open()
    assert not marker.exists()
    for code in (1, 2):
        ext = codec._PLAIN_ENCODER.encode(codec.msgspec.msgpack.Ext(code, evil))
        reply = spec.EngineCoreOutputs(utility_output=spec.UtilityOutput(7, None, spec.UtilityResult(None, None)))
        payload = spec.encode_outputs(reply)[0]
        assert payload.endswith(b"\x92\xc0\xc0\xc0\xc0\xc0\xc0")
        hostile = payload[:-7] + b"\x92\xc0" + ext + b"\xc0\xc0\xc0\xc0"
        for decode in (lambda: spec.decode_outputs([hostile]),
                       lambda: spec.decode_input([b"\x03", b"\x94\x00\x01\xa1m\x91" + ext]),
                       lambda: spec.decode_input([b"\x00", b"\x99\xa1r\x90\xc0\x81\xaaextra_args" + ext
                                                  + b"\xc0\x01\xc0\xc0\xc0"]),
                       # where the type admits no ext at all (sampling_params, a timestamp)
                       lambda: spec.decode_input([b"\x00", b"\x99\xa1r\x90\xc0" + ext + b"\xc0\x01\xc0\xc0\xc0"]),
                       lambda: spec.decode_outputs([b"\x94\x00\x90\xc0" + ext])):
            try:
                decode()
            except spec.UnsafeExtType as exc:  # also where msgspec refuses the ext by type
                assert exc.code == code and exc.clause == "ECP-SEC-1" and exc.frame_index is not None
            else:
                raise AssertionError(f"ext type {code} decoded")
    assert not marker.exists()
