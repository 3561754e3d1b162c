"""Malformed input never kills the engine (ECP-ROB-1); recoverable ADDs get an ERROR output."""

from __future__ import annotations

import msgspec
import pytest

from engine_rawfront import make_request

from ecp.spec import FinishReason, encode_add, encode_utility


def _still_serving(fe, rid, client=0):
    fe.add(0, make_request(rid, max_tokens=2, client_index=client), client=client)
    assert fe.wait_finished([rid], client=client)[rid].finish_reason == FinishReason.LENGTH


BAD_MESSAGES = {
    "unknown-type-byte": [b"\x09", b"\x90"],
    "reserved-type-byte": [b"\x05", b"\x90"],
    "long-type-frame": [b"\x00\x00", b"\x90"],
    "one-frame": [b"\x00"],
    "abort-three-frames": [b"\x01", b"\x91\xa1x", b"extra"],
    "undecodable-add": [b"\x00", b"\xc1\xc1\xc1"],
    "undecodable-utility": [b"\x03", b"\xff\xff"],
    "utility-wrong-shape": [b"\x03", msgspec.msgpack.encode({"a": 1})],
    "abort-not-strings": [b"\x01", msgspec.msgpack.encode([1, 2, 3])],
}


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_bad_frames_are_dropped_and_engine_keeps_serving(rig, transport):
    fe, handle = rig.start(1, transport=transport)
    for name, frames in BAD_MESSAGES.items():
        fe.send(0, frames)
        _still_serving(fe, f"ok-{name}")
    assert handle.servers[0].bad_frames == len(BAD_MESSAGES)
    assert not fe.dead()


def test_recoverable_bad_add_gets_error_output(rig):
    fe, handle = rig.start(1)
    # only 8 elements (needs 9): the id is readable, so the engine answers with ERROR
    short = msgspec.msgpack.encode(["short-1", [1, 2], None, {"max_tokens": 2}, None, 0.0, None, None])
    fe.send(0, [b"\x00", short])
    # a pickle ext type inside sampling_params: refused, never decoded (ECP-SEC-1)
    pickled = msgspec.msgpack.encode(["pickle-1", [1, 2], None, msgspec.msgpack.Ext(1, b"cos\nsystem\n."),
                                      None, 0.0, None, None, None])
    fe.send(0, [b"\x00", pickled])
    # ... and one where the decoder would have to interpret it (an untyped map value)
    pickled2 = msgspec.msgpack.encode(["pickle-2", [1, 2], None,
                                       {"max_tokens": 2, "extra_args": {"x": msgspec.msgpack.Ext(1, b"c")}},
                                       None, 0.0, None, None, None])
    fe.send(0, [b"\x00", pickled2])
    # a wrongly typed field
    typed = msgspec.msgpack.encode(["typed-1", "not-a-list", None, {}, None, 0.0, None, None, None])
    fe.send(0, [b"\x00", typed])
    done = fe.wait_finished(["short-1", "pickle-1", "pickle-2", "typed-1"])
    for rid, out in done.items():
        assert out.finish_reason == FinishReason.ERROR and out.error.code == "invalid_request", rid
    assert "ECP-SEC-1" in done["pickle-2"].error.message
    _still_serving(fe, "after")


def test_out_of_range_client_index(rig):
    fe, _ = rig.start(1, num_clients=2)
    fe.add(0, make_request("oob", max_tokens=2, client_index=7), client=1)
    err = fe.wait_finished(["oob"], client=1)["oob"]
    assert err.finish_reason == FinishReason.ERROR and err.error.code == "invalid_client_index"
    # a utility naming a bad client_index is answered on the socket it came in on
    fe.send(0, encode_utility(9, 77, "is_sleeping", []), client=1)
    assert fe.pump(lambda: any(m.utility_output and m.utility_output.call_id == 77 for m in fe.messages[1]))
    _still_serving(fe, "after", client=1)


def test_aux_frames_on_add_are_accepted(rig):
    fe, _ = rig.start(1)
    frames = encode_add(make_request("aux", max_tokens=2))
    fe.send(0, frames + [b"\x00" * 300])  # an unreferenced aux frame is tolerated
    assert fe.wait_finished(["aux"])["aux"].finish_reason == FinishReason.LENGTH


def test_a_flood_of_bad_frames_costs_bounded_log_lines(rig, caplog, monkeypatch):
    """200 bad frames of one kind: at most the limiter's burst of log lines, every frame still counted."""
    from ecp.reference.engine.log_limit import RepeatLimiter
    from ecp.reference.engine.server import bad_input_log

    assert any(isinstance(f, RepeatLimiter) for f in bad_input_log.filters)
    limiter = RepeatLimiter(burst=5, interval=60.0)  # a fresh window, whatever earlier tests logged
    monkeypatch.setattr(bad_input_log, "filters", [limiter])
    fe, handle = rig.start(1)
    with caplog.at_level("WARNING", logger="ecp.engine.bad_input"):
        for _ in range(200):
            fe.send(0, BAD_MESSAGES["unknown-type-byte"])
        _still_serving(fe, "ok-after-flood")
    lines = [r for r in caplog.records if "dropped a bad input message" in r.getMessage()]
    assert handle.servers[0].bad_frames == 200
    assert len(lines) == limiter.burst and limiter.suppressed == 200 - limiter.burst
