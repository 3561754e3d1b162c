"""A frontend flooding a scripted engine with garbage costs the harness bounded memory: the first
undecodable frames are kept as evidence, the rest only counted (docs/reliability.md)."""

from __future__ import annotations

import tracemalloc

from ecp.conformance.frontend.recorder import MAX_UNDECODABLE, FrameRecord, Recorder
from ecp.spec import DecodeError, decode_input, encode_abort


def _bad(i: int) -> FrameRecord:
    frames = [b"\x00", b"\xc1" * 4096 + i.to_bytes(4, "big")]
    try:
        decode_input(frames)
    except DecodeError as exc:
        return FrameRecord(float(i), 0, "in", "input", 0, frames, error=exc)
    raise AssertionError("the frame was meant not to decode")


def test_undecodable_frames_beyond_the_cap_are_counted_not_kept():
    rec = Recorder()
    tracemalloc.start()
    try:
        for i in range(MAX_UNDECODABLE):
            rec.append(_bad(i))
        _, before = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for i in range(MAX_UNDECODABLE, 5_000):
            rec.append(_bad(i))
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.undecodable == 5_000
    assert len(rec.decode_errors()) == MAX_UNDECODABLE  # the first ones are the evidence
    assert [r.t for r in rec.decode_errors()][:2] == [0.0, 1.0]
    assert current - before < 64 * 1024  # 4,900 more 4 KiB frames did not stay
    good = FrameRecord(0.0, 0, "in", "input", 0, encode_abort(["x"]), message=decode_input(encode_abort(["x"])))
    rec.append(good)
    assert rec.aborted_ids() == ["x"]  # well-formed traffic is always kept
    rec.clear()
    assert rec.undecodable == 0 and rec.records == []
