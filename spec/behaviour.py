"""Behaviour we write by hand for generated wire types: the bases an overlay note names.

A :class:`~ecp.spec.overlay.Note` with ``base="EngineZmqAddresses"`` makes the generated class of
that message (or enum), in every release that has it, derive from the class of the same name here
as well: its invariants checked or its normalisation applied while msgspec decodes (``__post_init__``),
its readable form (``__str__``), the properties and checks a receiver asks of it. A base holds no fields
(``__slots__ = ()``; the annotations only say what it reads): the fields are the layout's.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import InvalidMessageError


class EngineZmqAddresses:
    """INIT's addresses hold lists an engine can connect by (``ECP-HS-2``), kept by the type itself: no
    INIT, built or decoded (msgspec calls this while it decodes), holds any other."""

    __slots__ = ()
    inputs: list[str]
    outputs: list[str]
    coordinator_input: Any
    coordinator_output: Any

    def __post_init__(self) -> None:
        if not self.inputs or len(self.inputs) != len(self.outputs):
            raise InvalidMessageError(
                f"INIT needs equal, non-empty input/output lists (got {len(self.inputs)} inputs, "
                f"{len(self.outputs)} outputs)", clause="ECP-HS-2",
                expected="len(inputs) == len(outputs) >= 1", got=(len(self.inputs), len(self.outputs)))
        if (self.coordinator_input is None) != (self.coordinator_output is None):
            raise InvalidMessageError("INIT names only one coordinator address", clause="ECP-HS-2",
                                      expected="both or neither coordinator address")


class FinishReason:
    """A finish reason reads as the string vLLM exposes to users (``stop``, ``length``, ...)."""

    __slots__ = ()
    name: str

    def __str__(self) -> str:
        return self.name.lower()


class SamplingParams:
    """What vLLM's ``SamplingParams`` does beyond its fields, in every release.

    ``__post_init__`` applies exactly the normalisation vLLM applies on decode (nil ``stop``/
    ``stop_token_ids``/``bad_words`` become ``[]``, a bare ``stop`` string becomes a list,
    ``skip_reading_prefix_cache`` is derived, ``_all_stop_token_ids`` absorbs ``stop_token_ids``). Value
    validation is separate (:meth:`validation_errors`): a receiver decides what to do with an invalid
    request (an engine answers it with an ERROR output, ``ECP-REQ-3``) instead of failing the whole frame.
    """

    __slots__ = ()
    n: int
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    stop: Any
    stop_token_ids: list[int] | None
    max_tokens: int | None
    min_tokens: int
    logprobs: int | None
    prompt_logprobs: int | None
    _eos_token_id: int | None
    _all_stop_token_ids: set[int]
    extra_args: dict[str, Any] | None
    bad_words: list[str] | None
    skip_reading_prefix_cache: bool | None

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
        stream_interval = getattr(self, "stream_interval", None)  # (vLLM 0.27 onwards)
        if stream_interval is not None and stream_interval < 1:
            errs.append(f"stream_interval must be at least 1, got {stream_interval}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and v < -1:
                errs.append(f"{name} must be -1 or non-negative, got {v}")
        return errs


class EngineCoreRequest:
    """An ADD names its P/D transfer parameters where its sampling parameters carry them."""

    __slots__ = ()
    sampling_params: Any

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        return self.sampling_params.kv_transfer_params if self.sampling_params else None


class MultiModalFeatureSpec:
    """A multimodal item's tensors are :class:`~ecp.spec.tensors.Tensor` once decoded: inside each item's
    ``data`` (``[dtype, shape, ext 3 | frame index]``), aux-frame indexes resolved while msgspec decodes,
    so receivers see the values the sender encoded; everything else stays as plain values."""

    __slots__ = ()
    data: dict[str, Any] | None

    def __post_init__(self) -> None:
        if self.data:
            for item in self.data.values():
                if isinstance(item, dict) and "data" in item:
                    item["data"] = _nested_tensors(item["data"])


def _looks_like_tensor(x: Any) -> bool:
    return (isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and isinstance(x[1], list)
            and all(isinstance(d, int) and not isinstance(d, bool) for d in x[1])
            and (isinstance(x[2], bytes) or (isinstance(x[2], int) and not isinstance(x[2], bool))))


def _nested_tensors(x: Any) -> Any:
    """``NestedTensors`` of a multimodal item: a tensor, a number, or a list of those."""
    if _looks_like_tensor(x):
        from .codec import _dec_hook  # the codec resolves aux-frame indexes of the message being decoded
        from .tensors import Tensor

        return _dec_hook(Tensor, x)
    if isinstance(x, list):
        return [_nested_tensors(v) for v in x]
    return x


class EngineCoreOutput:
    """A non-nil ``finish_reason`` marks a request's last output."""

    __slots__ = ()
    finish_reason: Any

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class EngineCoreOutputs:
    """What kind of message an outputs message is."""

    __slots__ = ()
    wave_complete: int | None
    start_wave: int | None
    utility_output: Any

    @property
    def is_dp_control(self) -> bool:
        """``wave_complete``/``start_wave`` set: meant for the coordinator only (``ECP-OUT-6``)."""
        return self.wave_complete is not None or self.start_wave is not None

    @property
    def is_utility(self) -> bool:
        return self.utility_output is not None
