"""Engine → frontend payloads: ``EngineCoreOutputs`` and everything inside it.

``EngineCoreOutputs`` (9) and ``EngineCoreOutput`` (19) are arrays in vLLM 0.33
wire order; events, stats and ``RequestError`` are maps. ``UtilityOutput`` is
always 3 elements and its ``result`` is the ``[type_info, value]`` envelope
(``ECP-UTIL-2``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .enums import EngineCoreEventType, FinishReason
from .tensors import Tensor


class EngineCoreEvent(msgspec.Struct, omit_defaults=False):
    """``{type, timestamp}``; the timestamp is the engine's monotonic clock."""

    type: EngineCoreEventType
    timestamp: float


class RequestError(msgspec.Struct, omit_defaults=False):
    """Why a request ended with ERROR (``ECP-OUT-5``)."""

    code: str
    message: str
    retryable: bool = False


class PrefillStats(msgspec.Struct, omit_defaults=False):
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0
    num_cache_creation_tokens: int = 0


class PrefixCacheStats(msgspec.Struct, omit_defaults=False):
    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    hits_by_source: dict[str, int] = {}


class SchedulerStats(msgspec.Struct, omit_defaults=False):
    """Per-step scheduler snapshot (map of 18). Optional for frontends (``ECP-OUT-7``)."""

    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_skipped_waiting_reqs: int = 0
    #: requests per KV-fetch stage (vLLM 0.33 sends ``waiting_to_start``, ``in_progress``,
    #: ``completed_waiting``; the key set is open, a receiver must not assume it)
    num_kv_fetch_reqs_by_stage: dict[str, int] = {}
    step_counter: int = 0
    current_wave: int = 0
    kv_cache_usage: float = 0.0
    iteration_details: Any = None
    prefix_cache_stats: PrefixCacheStats = msgspec.field(default_factory=PrefixCacheStats)
    connector_prefix_cache_stats: PrefixCacheStats | None = None
    kv_cache_eviction_events: list[Any] = []
    spec_decoding_stats: Any = None
    kv_connector_stats: dict[str, Any] | None = None
    ec_connector_stats: dict[str, Any] | None = None
    waiting_lora_adapters: dict[str, int] = {}
    running_lora_adapters: dict[str, int] = {}
    cudagraph_stats: Any = None
    perf_stats: Any = None


class LogprobsLists(msgspec.Struct, array_like=True, omit_defaults=False):
    """Sampled-token logprobs: ``[token_ids [N,K+1], logprobs float32 [N,K+1], ranks [N], cu]``.

    Row i holds the sampled token first, then the top-K alternatives.
    """

    logprob_token_ids: Tensor
    logprobs: Tensor
    sampled_token_ranks: Tensor
    cu_num_generated_tokens: list[int] | None = None


class LogprobsTensors(msgspec.Struct, array_like=True, omit_defaults=False):
    """Prompt logprobs, same layout as :class:`LogprobsLists` plus a 5th element.

    ``cu_num_generated_tokens_tensor`` carries the per-request boundaries as a
    tensor when the sender only has them on device; a receiver uses it when
    ``cu_num_generated_tokens`` is nil.
    """

    logprob_token_ids: Tensor
    logprobs: Tensor
    selected_token_ranks: Tensor
    cu_num_generated_tokens: list[int] | None = None
    cu_num_generated_tokens_tensor: Tensor | None = None


class SamplingMaskLists(msgspec.Struct, array_like=True, omit_defaults=False):
    """The tokens a request was allowed to sample, in CSR form: ``token_ids`` of
    every kept token, ``offsets`` (``[positions + 1]``, nil for a single position)
    and ``cu_num_generated_tokens`` for multi-position batches."""

    token_ids: Tensor
    offsets: Tensor | None = None
    cu_num_generated_tokens: list[int] | None = None


class UtilityResult(msgspec.Struct, array_like=True, omit_defaults=False):
    """The ``[type_info, value]`` envelope. ``type_info`` is nil unless the sender
    runs with insecure serialization, which ecp never honours."""

    type_info: Any = None
    value: Any = None


class UtilityOutput(msgspec.Struct, array_like=True, omit_defaults=False):
    """A utility reply: ``[call_id, failure_message, result]`` (always 3 elements)."""

    call_id: int
    failure_message: str | None = None
    result: UtilityResult | None = None


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """One request's progress in one step. Non-nil ``finish_reason`` = last output."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: LogprobsLists | None = None
    new_prompt_logprobs_tensors: LogprobsTensors | None = None
    pooling_output: Tensor | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    events: list[EngineCoreEvent] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    trace_headers: dict[str, str] | None = None
    prefill_stats: PrefillStats | None = None
    routed_experts: Tensor | None = None
    num_nans_in_logits: int = 0
    mm_cache_miss_hashes: list[str] | None = None
    new_sampling_mask: SamplingMaskLists | None = None
    spec_decode_metrics: dict[str, Any] | None = None
    prompt_token_id_logprobs: Tensor | None = None
    error: RequestError | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class EngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True):
    """Everything one engine sends one client in one message (``ECP-FRAME-2``)."""

    engine_index: int = 0
    outputs: list[EngineCoreOutput] = []
    scheduler_stats: SchedulerStats | None = None
    timestamp: float = 0.0
    utility_output: UtilityOutput | None = None
    finished_requests: set[str] | None = None
    wave_complete: int | None = None
    start_wave: int | None = None
    weight_version: str | None = None

    @property
    def is_dp_control(self) -> bool:
        """``wave_complete``/``start_wave`` set: meant for the coordinator only (``ECP-OUT-6``)."""
        return self.wave_complete is not None or self.start_wave is not None

    @property
    def is_utility(self) -> bool:
        return self.utility_output is not None
