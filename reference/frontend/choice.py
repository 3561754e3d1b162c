"""One engine request seen from the frontend: its text state and its partial result.

A :class:`Choice` is one OpenAI choice (one prompt × one of ``n`` samples)
and exactly one engine request. It turns the engine's delta outputs into
text deltas (streaming detokenization + stop strings) and always knows the
partial result so far, which the abort APIs report. It does no IO.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ecp.spec import EngineCoreOutput, FinishReason

from ..tokenizer import DecodeStream
from .stop_strings import StopStringMatcher


@dataclass
class ChoiceDelta:
    """What one engine output changed, as the HTTP layer needs it."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def merge(self, later: "ChoiceDelta") -> "ChoiceDelta":
        """Fold a later delta of the same choice into this one (returns ``self``)."""
        self.text += later.text
        self.token_ids.extend(later.token_ids)
        self.finish_reason, self.stop_reason = later.finish_reason, later.stop_reason
        return self


class EngineRequestFailed(Exception):
    """The engine ended the request with ``FinishReason.ERROR`` (``ECP-OUT-5``)."""

    def __init__(self, code: str, message: str, retryable: bool, produced_tokens: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.produced_tokens = produced_tokens


#: OpenAI finish reasons (vllm-rs maps REPETITION to "stop" as well).
_FINISH_STRINGS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.ABORT: "abort",
                   FinishReason.REPETITION: "stop"}


@dataclass
class Choice:
    index: int
    internal_id: str
    external_id: str
    response_id: str
    base_id: str
    prompt_token_ids: list[int]
    detok: DecodeStream
    stop: StopStringMatcher
    data_parallel_rank: int | None = None
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    #: set by the abort APIs; later token outputs are ignored so the partial
    #: result they reported is exactly what the stream shows.
    abort_requested: bool = False
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def stop_string_matched(self) -> bool:
        return self.stop.matched is not None

    def apply(self, out: EngineCoreOutput) -> ChoiceDelta | None:
        """Fold one engine output in. Returns the delta to show (``None`` if nothing
        changed) and raises :class:`EngineRequestFailed` on an ERROR output."""
        if self.finished:
            return None  # e.g. tokens after a matched stop string: never shown
        if out.finish_reason == FinishReason.ERROR:
            err = out.error
            raise EngineRequestFailed(err.code if err else "engine_error",
                                      err.message if err else "the engine failed the request",
                                      bool(err and err.retryable), len(self.token_ids))
        new_ids = [] if self.abort_requested else list(out.new_token_ids)
        text = ""
        if new_ids:
            now = time.monotonic()
            if self.first_token_at is None:
                self.first_token_at = now
            self.last_token_at = now
            self.token_ids.extend(new_ids)
            text = self.stop.feed(self.detok.step(new_ids))
        if self.stop.matched is not None:
            self.finish_reason, self.stop_reason = "stop", self.stop.matched
        elif out.finish_reason is not None:
            if not self.abort_requested:
                # what the detokenizer and the stop strings held back ends the text; after
                # an abort API call it stays back, as in the partial result that call reported
                text += self.stop.feed(self.detok.flush()) + self.stop.flush()
            if self.stop.matched is not None:
                self.finish_reason, self.stop_reason = "stop", self.stop.matched
            else:
                self.finish_reason = "abort" if self.abort_requested else _FINISH_STRINGS[out.finish_reason]
                self.stop_reason = out.stop_reason
            self.kv_transfer_params = out.kv_transfer_params
        self.text += text
        if not text and not new_ids and self.finish_reason is None:
            return None
        return ChoiceDelta(self.index, text, new_ids, self.finish_reason, self.stop_reason)

    def finish_locally(self, reason: str) -> ChoiceDelta:
        """End the choice without an engine terminal (abort, stream closed)."""
        self.finish_reason = reason
        return ChoiceDelta(self.index, "", [], reason)

    def partial_result(self) -> dict[str, Any]:
        """What the abort APIs report for this request."""
        return {"request_id": self.internal_id, "external_id": self.external_id,
                "response_id": self.response_id, "index": self.index,
                "token_ids": list(self.token_ids), "text": self.text,
                "num_tokens": len(self.token_ids), "finish_reason": "abort"}
