"""The bytes of a streamed OpenAI response (Server-Sent Events), one request at a time.

Every event of a response repeats the same envelope (id, object, created, model),
so :class:`SseChunks` encodes it once per response and each delta only encodes
its text. The output is byte for byte what encoding the whole chunk object
with msgspec's JSON encoder gives (``tests/frontend/test_chunks.py``).
"""

from __future__ import annotations

from typing import Any, Sequence

import msgspec

from .choice import ChoiceDelta

_json = msgspec.json.Encoder()
_encode = _json.encode

SSE_DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    """One event carrying ``obj`` as JSON."""
    return b"data: " + _encode(obj) + b"\n\n"


class SseChunks:
    """The events of one response (``kind`` ``"chat"`` or ``"completion"``)."""

    __slots__ = ("kind", "envelope", "_head", "_object")

    def __init__(self, kind: str, response_id: str, created: int, model: str) -> None:
        self.kind = kind
        self._object = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self.envelope = {"id": response_id, "object": self._object, "created": created, "model": model}
        # the envelope up to the choice's index: `{"id":…,"object":…,"created":…,"model":…,"choices":[{"index":`
        self._head = b"data: " + _encode({**self.envelope, "choices": None})[:-len(b"null}")] + b'[{"index":'

    def role(self, indexes: Sequence[int]) -> bytes:
        """A chat stream's first event per choice: the assistant role, empty content."""
        return b"".join(sse({**self.envelope, "choices": [{
            "index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]})
            for i in indexes)

    def delta(self, d: ChoiceDelta) -> bytes:
        """The event of one choice's delta."""
        if self.kind == "chat":
            body = (b'{"content":' + _encode(d.text) + b"}") if d.text or not d.finish_reason else b"{}"
            middle = b',"delta":' + body
        else:
            middle = b',"text":' + _encode(d.text)
        if d.finish_reason is None and d.stop_reason is None:
            tail = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
        else:
            tail = (b',"logprobs":null,"finish_reason":' + _encode(d.finish_reason) + b',"stop_reason":'
                    + _encode(d.stop_reason) + b"}]}\n\n")
        return self._head + str(d.index).encode() + middle + tail

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The final usage event (``stream_options.include_usage``)."""
        return sse({**self.envelope, "choices": [], "usage": {
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}})
