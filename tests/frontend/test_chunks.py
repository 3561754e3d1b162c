"""The SSE events ``SseChunks`` writes are byte for byte the chunk objects encoded whole."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecp.reference.frontend.choice import ChoiceDelta
from ecp.reference.frontend.chunks import SseChunks

enc = msgspec.json.encode


def whole(kind: str, rid: str, created: int, model: str, d: ChoiceDelta) -> bytes:
    """The chunk as the OpenAI shape spells it, encoded in one call (the reference)."""
    if kind == "chat":
        choice = {"index": d.index, "delta": {"content": d.text} if d.text or not d.finish_reason else {},
                  "logprobs": None, "finish_reason": d.finish_reason, "stop_reason": d.stop_reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": d.index, "text": d.text, "logprobs": None, "finish_reason": d.finish_reason,
                  "stop_reason": d.stop_reason}
        obj = "text_completion"
    return b"data: " + enc({"id": rid, "object": obj, "created": created, "model": model,
                            "choices": [choice]}) + b"\n\n"


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(['"', "\\", "\n", "\u2028", ""])


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["chat", "completion"]), rid=texts, model=texts,
       created=st.integers(0, 2**40), index=st.integers(0, 300), text=texts,
       finish=st.none() | st.sampled_from(["stop", "length", "abort"]),
       stop=st.none() | st.integers(0, 2**31) | texts)
def test_delta_events_equal_the_whole_chunk_encoded(kind, rid, model, created, index, text, finish, stop):
    d = ChoiceDelta(index, text, [1], finish, stop)
    assert SseChunks(kind, rid, created, model).delta(d) == whole(kind, rid, created, model, d)


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_role_and_usage_events(kind):
    c = SseChunks(kind, "cmpl-x", 7, "m")
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    assert c.usage(3, 4) == b"data: " + enc({"id": "cmpl-x", "object": obj, "created": 7, "model": "m", "choices": [],
                                              "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                                        "total_tokens": 7}}) + b"\n\n"
    assert c.role([0, 1]).count(b'"delta":{"role":"assistant","content":""}') == 2
