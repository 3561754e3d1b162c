"""Protocol errors: structured fields that stay as they were raised."""

import pytest


def test_an_errors_fields_are_read_only_and_replace_makes_a_new_one():
    from ecp.spec.errors import DecodeError

    err = DecodeError("bad", clause="ECP-FRAME-9", frame_index=None, got="x")
    with pytest.raises(AttributeError, match="read-only"):
        err.clause = "ECP-HS-11"
    moved = err.replace(frame_index=2, request_id="r")
    assert type(moved) is DecodeError and moved is not err
    assert (moved.clause, moved.frame_index, moved.request_id, moved.got) == ("ECP-FRAME-9", 2, "r", "x")
    assert (err.frame_index, err.request_id) == (None, None)  # whoever holds the first one sees it unchanged
    assert str(moved) == "[ECP-FRAME-9] bad (frame 2)"
    with pytest.raises(TypeError):
        err.replace(colour="red")
