"""``SamplingParams``: a msgpack *map* keyed by field name (vLLM 0.33, 43 fields).

Encoding follows msgspec's ``omit_defaults=True``: a key is omitted when its
value *is* the default object, so a decoded value re-encodes to the bytes it
came from. Because the struct declares more than 15 fields, the Python
encoder always writes a map16 header (``de 00 NN``); vllm-rs writes a fixmap.
Receivers accept both (``ECP-FRAME-5``, ``ECP-FRAME-6``).

``__post_init__`` applies exactly the normalisation vLLM applies on decode
(nil ``stop``/``stop_token_ids``/``bad_words`` become ``[]``, a bare ``stop``
string becomes a list, ``skip_reading_prefix_cache`` is derived,
``_all_stop_token_ids`` absorbs ``stop_token_ids``). Value validation is
separate (:meth:`SamplingParams.validation_errors`): a receiver decides what
to do with an invalid request (an engine answers it with an ERROR output,
``ECP-REQ-3``) instead of failing the whole frame.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from .enums import RequestOutputKind
from .tensors import Tensor


class SamplingParams(msgspec.Struct, omit_defaults=True):
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: Tensor | None = None
    prompt_logprob_start: int | None = None
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    _eos_token_id: int | None = None
    _all_stop_token_ids: set[int] = msgspec.field(default_factory=set)
    _watermarking_skipped: bool = False
    #: ``{json|regex|choice|grammar|json_object|structural_tag: …, disable_*: …}``
    structured_outputs: dict[str, Any] | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    #: carries ``kv_transfer_params`` for P/D disaggregation
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    _bad_words_token_ids: list[list[int]] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    #: ``{max_pattern_size, min_pattern_size, min_count}``
    repetition_detection: dict[str, Any] | None = None
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        elif self.stop_token_ids:
            self._all_stop_token_ids.update(self.stop_token_ids)
        if self.bad_words is None:
            self.bad_words = []
        if self.skip_reading_prefix_cache is None:
            self.skip_reading_prefix_cache = self.prompt_logprobs is not None

    # -- helpers for receivers -------------------------------------------------
    @property
    def eos_token_id(self) -> int | None:
        return self._eos_token_id

    @property
    def all_stop_token_ids(self) -> set[int]:
        return self._all_stop_token_ids

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        """``extra_args["kv_transfer_params"]`` when present and a map."""
        if not self.extra_args:
            return None
        params = self.extra_args.get("kv_transfer_params")
        return params if isinstance(params, dict) else None

    @property
    def is_greedy(self) -> bool:
        return self.temperature < 1e-5

    def validation_errors(self) -> list[str]:
        """The value checks vLLM runs on decode, as messages (empty = valid)."""
        # (a message is only formatted for a check that fails: this runs on every request)
        errs: list[str] = []
        if self.n < 1:
            errs.append(f"n must be at least 1, got {self.n}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not -2.0 <= v <= 2.0:
                errs.append(f"{name} must be in [-2, 2], got {v}")
        rp = self.repetition_penalty
        if not (rp > 0 and math.isfinite(rp)):
            errs.append(f"repetition_penalty must be positive and finite, got {rp}")
        if not 0.0 <= self.temperature <= 2.0 or math.isnan(self.temperature):
            errs.append(f"temperature must be in [0, 2], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            errs.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            errs.append(f"top_k must be -1 (disable) or at least 0, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            errs.append(f"min_p must be in [0, 1], got {self.min_p}")
        if self.max_tokens is not None and self.max_tokens < 1:
            errs.append(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            errs.append(f"min_tokens must be at least 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            errs.append(f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})")
        if self.stream_interval is not None and self.stream_interval < 1:
            errs.append(f"stream_interval must be at least 1, got {self.stream_interval}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and v < -1:
                errs.append(f"{name} must be -1 or non-negative, got {v}")
        return errs
