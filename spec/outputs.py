"""Engine → frontend payloads: ``EngineCoreOutputs`` and everything inside it.

``EngineCoreOutputs`` (9) and ``EngineCoreOutput`` (19) are arrays in vLLM 0.33
wire order; events, stats and ``RequestError`` are maps. ``UtilityOutput`` is
always 3 elements and its ``result`` is the ``[type_info, value]`` envelope
(``ECP-UTIL-2``).

The nested messages with no behaviour of their own (events, request errors, prefill and prefix-cache
stats, logprobs, sampling masks) are the release's generated ones (:mod:`ecp.spec.wiretypes.current`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .enums import FinishReason
from .tensors import Tensor
from .wiretypes.current import (  # noqa: F401 -- re-exported: ecp.spec.outputs is where the API names them
    EngineCoreEvent, LogprobsLists, LogprobsTensors, PrefillStats, PrefixCacheStats, RequestError, SamplingMaskLists,
)


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
