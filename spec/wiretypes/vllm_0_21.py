"""vLLM 0.21's wire types: spec/layouts/vllm-0.21.json with spec/overlay.py, rendered by ``ecp spec types``.

Do not edit: ``ecp spec types`` rewrites this module and ``ecp spec types --check`` fails while it is
stale. What is written by hand about a message or a field belongs in spec/overlay.py.
"""

import enum
from typing import Any

import msgspec

from ecp.spec import behaviour
from ecp.spec import envelope
from ecp.spec.tensors import Tensor

#: the layout these types are generated from
LAYOUT = "vllm-0.21"
#: the release's short name
RELEASE = "0.21"


class EngineCoreEventType(enum.IntEnum):
    """The kind of a request event (``EngineCoreEvent.type``)."""

    QUEUED = 1
    SCHEDULED = 2
    PREEMPTED = 3


class FinishReason(behaviour.FinishReason, enum.IntEnum):
    """Why a request finished. Out-of-range values fail decoding; ``str()`` gives the string vLLM exposes to
    users (``stop``).

    Clause: ECP-OUT-4.
    """

    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4


class RequestOutputKind(enum.IntEnum):
    """What each output of a request holds: everything so far, the delta, or only the final result."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class Hello(msgspec.Struct, tag_field="status", tag="HELLO", omit_defaults=True):
    """Engine -> frontend, the first handshake message.

    Clause: ECP-HS-1.

    vLLM 0.21 wire: a map of 2 keys (2 required), tagged status='HELLO', the HELLO frame, engine->frontend
    (vllm/v1/engine/core.py).
    """

    local: bool
    headless: bool


class EngineZmqAddresses(behaviour.EngineZmqAddresses, msgspec.Struct, omit_defaults=False):
    """Where the engine connects. ``inputs[i]``/``outputs[i]`` belong to client i.

    Invariant: ``inputs`` and ``outputs`` are non-empty lists of equal length, and the two coordinator
    addresses are both given or both absent (ECP-HS-2); checked while it decodes.

    Clause: ECP-HS-2.

    vLLM 0.21 wire: a map of 5 keys (2 required), frontend->engine (vllm/v1/engine/utils.py).
    """

    inputs: list[str]
    outputs: list[str]
    coordinator_input: str | None = None
    coordinator_output: str | None = None
    frontend_stats_publish_address: str | None = None


class EngineHandshakeMetadata(msgspec.Struct, omit_defaults=False):
    """INIT, frontend -> engine.

    Clause: ECP-HS-2.

    vLLM 0.21 wire: a map of 2 keys (2 required), the INIT frame, frontend->engine
    (vllm/v1/engine/utils.py).
    """

    addresses: EngineZmqAddresses
    #: Empty, or the DP coordination keys (``data_parallel_master_ip``, ...).
    parallel_config: dict[str, int | str | list[int]]


class EngineCoreReadyResponse(msgspec.Struct, omit_defaults=False):
    """The ready payload on each input socket (a dataclass in vLLM: every key is emitted); every required key
    with its declared type (ECP-HS-4).

    Clause: ECP-HS-3.

    vLLM 0.21 wire: a map of 3 keys (3 required), the ready payload frame, engine->frontend
    (vllm/v1/engine/__init__.py).
    """

    max_model_len: int
    num_gpu_blocks: int
    dp_stats_address: str | None


class Ready(msgspec.Struct, tag_field="status", tag="READY", omit_defaults=True):
    """Engine -> frontend, the last handshake message.

    ``parallel_config_hash`` is present only when the engine's DP size > 1; the elastic-EP keys only with
    elastic EP.

    Clause: ECP-HS-5.

    vLLM 0.21 wire: a map of 3 keys (2 required), tagged status='READY', the READY frame, engine->frontend
    (vllm/v1/engine/core.py).
    """

    local: bool
    headless: bool
    #: Typed ``str | nil`` where the layout says ``any``: ``ParallelConfig.compute_hash()`` returns a SHA-256
    #: hex digest (vllm/config/utils.py hash_factors).
    parallel_config_hash: str | None = None


class PlaceholderRange(msgspec.Struct, omit_defaults=False):
    """Where a multimodal item sits in the prompt.

    vLLM 0.21 wire: a map of 3 keys (2 required), frontend->engine (vllm/multimodal/inputs.py).
    """

    offset: int
    length: int
    is_embed: Tensor | None = None


class MultiModalFeatureSpec(behaviour.MultiModalFeatureSpec, msgspec.Struct, omit_defaults=False):
    """One multimodal item of ``mm_features``.

    ``data`` maps kwarg name -> ``{data: nested tensors/numbers, field: [factory, kwargs]}`` (factory
    ``batched``/``flat``/``shared``) or is nil when the item is already cached in the engine. Tensors
    inside an item's ``data`` (``[dtype, shape, ext 3 | frame index]``) are decoded to ``Tensor``;
    everything else stays as plain values.

    vLLM 0.21 wire: a map of 5 keys (4 required), frontend->engine (vllm/multimodal/inputs.py).
    """

    #: Typed ``map[str, any] | nil`` where the layout says ``any``: ``MultiModalKwargsItem`` is a UserDict
    #: vLLM's encoder writes as a map (nil: cached in the engine).
    data: dict[str, Any] | None
    modality: str
    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str | None = None


class StructuredOutputsParams(msgspec.Struct, omit_defaults=False):
    """``StructuredOutputsParams`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 9 keys (0 required), frontend->engine (vllm/sampling_params.py).
    """

    json: str | dict[Any, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None


class RepetitionDetectionParams(msgspec.Struct, omit_defaults=False):
    """``RepetitionDetectionParams`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 3 keys (0 required), frontend->engine (vllm/sampling_params.py).
    """

    max_pattern_size: int = 0
    min_pattern_size: int = 0
    min_count: int = 0


class SamplingParams(behaviour.SamplingParams, msgspec.Struct, omit_defaults=True):
    """Sampling parameters, a map keyed by field name.

    A key is omitted when its value is the default, so a decoded value re-encodes to the bytes it came
    from; a Python sender writes a map16 header, vllm-rs a fixmap, receivers accept both (ECP-FRAME-5,
    ECP-FRAME-6).

    Invariant: the value checks vLLM runs on decode (``n >= 1``, penalties in range, ...) are separate from
    decoding: an engine answers an invalid request with an ERROR output (ECP-REQ-3).

    vLLM 0.21 wire: a map of 36 keys (0 required), frontend->engine (vllm/sampling_params.py).
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
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
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    _eos_token_id: int | None = None
    _all_stop_token_ids: set[int] = msgspec.field(default_factory=set)
    #: ``{json|regex|choice|grammar|json_object|structural_tag: ..., disable_*: ...}``.
    #:
    #: Received untyped (each message of its type as ``map[str, any]``): ``StructuredOutputsParams`` is a
    #: dataclass (vllm/sampling_params.py), a msgpack map on the wire.
    structured_outputs: dict[str, Any] | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    #: Carries ``kv_transfer_params`` for P/D disaggregation.
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    _bad_words_token_ids: list[list[int]] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    #: ``{max_pattern_size, min_pattern_size, min_count}``.
    #:
    #: Received untyped (each message of its type as ``map[str, any]``): ``RepetitionDetectionParams`` is a
    #: dataclass (vllm/sampling_params.py), a msgpack map on the wire.
    repetition_detection: dict[str, Any] | None = None


class LateInteractionParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """Late-interaction scoring metadata of a pooling request.

    ``mode`` is ``cache_query`` or ``score_doc``; ``query_key`` names the cached query (also used for DP
    routing); ``query_uses`` is how many documents will be scored against it (a positive int for
    ``cache_query``).

    vLLM 0.21 wire: an array of 3 (2 required), frontend->engine (vllm/pooling_params.py).
    """

    mode: str
    query_key: str
    query_uses: int | None = None


class PoolingParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """Pooling parameters.

    ``task`` is one of ``embed``, ``classify``, ``token_embed``, ``token_classify``, ``plugin``,
    ``embed&token_classify``. vllm-rs sends only the first 5 elements; a receiver applies the defaults to
    the rest.

    vLLM 0.21 wire: an array of 10 (0 required), frontend->engine (vllm/pooling_params.py).
    """

    use_activation: bool | None = None
    dimensions: int | None = None
    step_tag_id: int | None = None
    returned_token_ids: list[int] | None = None
    task: str | None = None
    requires_token_ids: bool = False
    skip_reading_prefix_cache: bool | None = None
    late_interaction_params: LateInteractionParams | None = None
    extra_kwargs: dict[str, Any] | None = None
    output_kind: RequestOutputKind = RequestOutputKind.FINAL_ONLY


class LoRARequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """A LoRA adapter reference.

    vLLM 0.31 and older carry a 7th element, ``tensorizer_config_dict``, at position 4 (removed in 0.32):
    every later field is shifted between those releases and 0.32 onwards (ECP-FRAME-3).

    Invariant: ``lora_int_id >= 1``; receivers refuse anything less.

    vLLM 0.21 wire: an array of 6 (2 required), frontend->engine (vllm/lora/request.py).
    """

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    tensorizer_config_dict: dict[Any, Any] | None = None
    load_inplace: bool = False


class EngineCoreRequest(behaviour.EngineCoreRequest, msgspec.Struct, array_like=True, omit_defaults=True):
    """The ADD payload. Field order is the wire order; senders emit every element (ECP-FRAME-3), a decoder
    needs at least the required ones (ECP-FRAME-4).

    Clause: ECP-REQ-1.

    vLLM 0.21 wire: an array of 20 (9 required), the ADD frame, frontend->engine
    (vllm/v1/engine/__init__.py).
    """

    #: The engine-internal request id every output and ABORT names.
    request_id: str
    prompt_token_ids: list[int] | None
    mm_features: list[MultiModalFeatureSpec] | None
    sampling_params: SamplingParams | None
    pooling_params: PoolingParams | None
    arrival_time: float
    lora_request: LoRARequest | None
    cache_salt: str | None
    data_parallel_rank: int | None
    prompt_embeds: Tensor | None = None
    prompt_is_token_ids: list[bool] | None = None
    #: The client (``output[i]``) the engine answers this request on.
    client_index: int = 0
    #: The DP wave the frontend believes current (ECP-DP-4).
    current_wave: int = 0
    priority: int = 0
    trace_headers: dict[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    #: Abort as soon as the request is admitted (ECP-ABORT-3).
    abort_immediately: bool = False


class UtilityRequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """The UTILITY payload.

    ``call_id`` is any u64 (Python clients use ``uuid1().int >> 64``, vllm-rs counts 1, 2, ...); the engine
    echoes it verbatim.

    Clause: ECP-UTIL-1.

    a tuple: names from the engine core's unpacking in vllm/v1/engine/core.py, types from the sender's
    tuple

    vLLM 0.21 wire: an array of 4 (4 required), the UTILITY frame, frontend->engine
    (vllm/v1/engine/core.py).
    """

    client_idx: int
    #: Typed ``int`` where the layout says ``any``: the Python client's call id is ``uuid1().int >> 64``
    #: (vllm/v1/engine/core_client.py), vllm-rs counts 1, 2, ...
    call_id: int
    method_name: str
    #: Required: the engine unpacks exactly four items.
    args: list[Any]


class StartDPWave(msgspec.Struct, array_like=True, omit_defaults=True):
    """The START_DP_WAVE payload.

    Clause: ECP-DP-4.

    a tuple: names from the engine core's unpacking in vllm/v1/engine/core.py, types from the sender's
    tuple

    vLLM 0.21 wire: an array of 2 (2 required), the START_DP_WAVE frame, coordinator->engine
    (vllm/v1/engine/core.py).
    """

    new_wave: int
    #: Required: the engine unpacks exactly two items.
    exclude_eng_index: int | None


class LogprobsLists(msgspec.Struct, array_like=True, omit_defaults=True):
    """Sampled-token logprobs: ``[token_ids [N,K+1], logprobs float32 [N,K+1], ranks [N], cu]``.

    Row i holds the sampled token first, then the top-K alternatives.

    vLLM 0.21 wire: an array of 4 (3 required), engine->frontend (vllm/v1/outputs.py).
    """

    logprob_token_ids: Tensor
    logprobs: Tensor
    sampled_token_ranks: Tensor
    cu_num_generated_tokens: list[int] | None = None


class LogprobsTensors(msgspec.Struct, array_like=True, omit_defaults=True):
    """Prompt logprobs, laid out as ``LogprobsLists``.

    ``cu_num_generated_tokens_tensor``, where the release has it, carries the per-request boundaries as a
    tensor when the sender only has them on device; a receiver uses it when ``cu_num_generated_tokens`` is
    nil.

    vLLM 0.21 wire: an array of 4 (3 required), engine->frontend (vllm/v1/outputs.py).
    """

    logprob_token_ids: Tensor
    logprobs: Tensor
    selected_token_ranks: Tensor
    cu_num_generated_tokens: list[int] | None = None


class EngineCoreEvent(msgspec.Struct, omit_defaults=False):
    """``{type, timestamp}``; the timestamp is the engine's monotonic clock.

    vLLM 0.21 wire: a map of 2 keys (2 required), engine->frontend (vllm/v1/engine/__init__.py).
    """

    type: EngineCoreEventType
    timestamp: float


class PrefillStats(msgspec.Struct, omit_defaults=False):
    """``PrefillStats`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 5 keys (0 required), engine->frontend (vllm/v1/metrics/stats.py).
    """

    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0


class EngineCoreOutput(behaviour.EngineCoreOutput, msgspec.Struct, array_like=True, omit_defaults=True):
    """One request's progress in one step. A non-nil ``finish_reason`` marks the last output of the request.

    Clause: ECP-OUT-4.

    vLLM 0.21 wire: an array of 13 (2 required), engine->frontend (vllm/v1/engine/__init__.py).
    """

    request_id: str
    new_token_ids: list[int]
    new_logprobs: LogprobsLists | None = None
    new_prompt_logprobs_tensors: LogprobsTensors | None = None
    pooling_output: Tensor | None = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    events: list[EngineCoreEvent] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    trace_headers: dict[str, str] | None = None
    prefill_stats: PrefillStats | None = None
    routed_experts: Tensor | None = None
    num_nans_in_logits: int = 0


class PrefixCacheStats(msgspec.Struct, omit_defaults=False):
    """``PrefixCacheStats`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 7 keys (0 required), engine->frontend (vllm/v1/metrics/stats.py).
    """

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0


class KVCacheEvictionEvent(msgspec.Struct, omit_defaults=False):
    """``KVCacheEvictionEvent`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 3 keys (3 required), engine->frontend (vllm/v1/metrics/stats.py).
    """

    lifetime_seconds: float
    idle_seconds: float
    reuse_gaps_seconds: list[float]


class SpecDecodingStats(msgspec.Struct, omit_defaults=False):
    """``SpecDecodingStats`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 5 keys (1 required), engine->frontend (vllm/v1/spec_decode/metrics.py).
    """

    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = []


class CUDAGraphStat(msgspec.Struct, omit_defaults=False):
    """``CUDAGraphStat`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 4 keys (4 required), engine->frontend (vllm/compilation/cuda_graph.py).
    """

    num_unpadded_tokens: int
    num_padded_tokens: int
    num_paddings: int
    runtime_mode: str


class DebugPerfStats(msgspec.Struct, omit_defaults=False):
    """``DebugPerfStats`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 7 keys (0 required), engine->frontend (vllm/v1/metrics/perf.py).
    """

    calc_duration: float = 0.0
    num_prefill_requests: int = 0
    num_decode_requests: int = 0
    context_breakdown: dict[str, int] | None = None
    num_flops_per_gpu_breakdown: dict[str, int] | None = None
    num_read_bytes_per_gpu_breakdown: dict[str, int] | None = None
    num_write_bytes_per_gpu_breakdown: dict[str, int] | None = None


class PerfStats(msgspec.Struct, omit_defaults=False):
    """``PerfStats`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 4 keys (0 required), engine->frontend (vllm/v1/metrics/perf.py).
    """

    num_flops_per_gpu: int = 0
    num_read_bytes_per_gpu: int = 0
    num_write_bytes_per_gpu: int = 0
    debug_stats: DebugPerfStats | None = None


class SchedulerStats(msgspec.Struct, omit_defaults=False):
    """Per-step scheduler snapshot. Optional for frontends.

    Clause: ECP-OUT-7.

    vLLM 0.21 wire: a map of 15 keys (0 required), engine->frontend (vllm/v1/metrics/stats.py).
    """

    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_skipped_waiting_reqs: int = 0
    step_counter: int = 0
    current_wave: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_stats: PrefixCacheStats = msgspec.field(default_factory=lambda: PrefixCacheStats())
    connector_prefix_cache_stats: PrefixCacheStats | None = None
    #: Received untyped (each message of its type as ``any``): typed statistics a receiver keeps as they come:
    #: scheduler stats are optional for frontends and a receiver must not fail a step on them (ECP-OUT-7).
    kv_cache_eviction_events: list[Any] = []
    #: Received untyped (each message of its type as ``any``): typed statistics a receiver keeps as they come:
    #: scheduler stats are optional for frontends and a receiver must not fail a step on them (ECP-OUT-7).
    spec_decoding_stats: Any = None
    kv_connector_stats: dict[str, Any] | None = None
    waiting_lora_adapters: dict[str, int] = {}
    running_lora_adapters: dict[str, int] = {}
    #: Received untyped (each message of its type as ``any``): typed statistics a receiver keeps as they come:
    #: scheduler stats are optional for frontends and a receiver must not fail a step on them (ECP-OUT-7).
    cudagraph_stats: Any = None
    #: Received untyped (each message of its type as ``any``): typed statistics a receiver keeps as they come:
    #: scheduler stats are optional for frontends and a receiver must not fail a step on them (ECP-OUT-7).
    perf_stats: Any = None


class UtilityOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """A utility reply: ``[call_id, failure_message, result]`` (always 3 elements).

    Clause: ECP-UTIL-2.

    vLLM 0.21 wire: an array of 3 (1 required), engine->frontend (vllm/v1/engine/__init__.py).
    """

    call_id: int
    failure_message: str | None = None
    #: The ``[type_info, value]`` envelope (ECP-UTIL-2).
    #:
    #: Typed ``struct:UtilityResult | nil`` where the layout says ``any``: vLLM's ``UtilityResult`` is a plain
    #: class its encoder writes as ``[type_info, value]``.
    result: envelope.UtilityResult | None = None


class EngineCoreOutputs(behaviour.EngineCoreOutputs, msgspec.Struct, array_like=True, omit_defaults=True):
    """Everything one engine sends one client in one message.

    Clause: ECP-FRAME-2.

    vLLM 0.21 wire: an array of 8 (0 required), the outputs frame, engine->frontend
    (vllm/v1/engine/__init__.py).
    """

    engine_index: int = 0
    outputs: list[EngineCoreOutput] = []
    scheduler_stats: SchedulerStats | None = None
    timestamp: float = 0.0
    utility_output: UtilityOutput | None = None
    finished_requests: set[str] | None = None
    #: DP control, meant for the coordinator only (ECP-OUT-6).
    wave_complete: int | None = None
    #: DP control, meant for the coordinator only (ECP-OUT-6).
    start_wave: int | None = None


class ReconfigureDistributedRequest(msgspec.Struct, omit_defaults=False):
    """``ReconfigureDistributedRequest`` of vLLM 0.21.

    vLLM 0.21 wire: a map of 7 keys (7 required), frontend->engine (vllm/v1/engine/__init__.py).
    """

    new_data_parallel_size: int
    new_data_parallel_rank: int
    new_data_parallel_rank_local: int
    new_data_parallel_master_ip: str
    new_data_parallel_master_port: int
    new_data_parallel_master_port_list: list[int]
    coord_store_port: int


#: every message of the layout by name, in layout order
MESSAGES: dict[str, type[msgspec.Struct]] = {
    "Hello": Hello,
    "EngineHandshakeMetadata": EngineHandshakeMetadata,
    "EngineZmqAddresses": EngineZmqAddresses,
    "EngineCoreReadyResponse": EngineCoreReadyResponse,
    "Ready": Ready,
    "EngineCoreRequest": EngineCoreRequest,
    "MultiModalFeatureSpec": MultiModalFeatureSpec,
    "SamplingParams": SamplingParams,
    "PoolingParams": PoolingParams,
    "LoRARequest": LoRARequest,
    "PlaceholderRange": PlaceholderRange,
    "StructuredOutputsParams": StructuredOutputsParams,
    "RepetitionDetectionParams": RepetitionDetectionParams,
    "LateInteractionParams": LateInteractionParams,
    "UtilityRequest": UtilityRequest,
    "StartDPWave": StartDPWave,
    "EngineCoreOutputs": EngineCoreOutputs,
    "EngineCoreOutput": EngineCoreOutput,
    "SchedulerStats": SchedulerStats,
    "UtilityOutput": UtilityOutput,
    "LogprobsLists": LogprobsLists,
    "LogprobsTensors": LogprobsTensors,
    "EngineCoreEvent": EngineCoreEvent,
    "PrefillStats": PrefillStats,
    "PrefixCacheStats": PrefixCacheStats,
    "KVCacheEvictionEvent": KVCacheEvictionEvent,
    "SpecDecodingStats": SpecDecodingStats,
    "CUDAGraphStat": CUDAGraphStat,
    "PerfStats": PerfStats,
    "DebugPerfStats": DebugPerfStats,
    "ReconfigureDistributedRequest": ReconfigureDistributedRequest,
}
#: every enum of the layout by name
ENUMS: dict[str, type[enum.IntEnum]] = {
    "EngineCoreEventType": EngineCoreEventType,
    "FinishReason": FinishReason,
    "RequestOutputKind": RequestOutputKind,
}
#: ``Message.field`` typed ``Any`` because msgspec decodes no such union as one type
WIDENED: tuple[str, ...] = ()

__all__ = [
    "LAYOUT",
    "RELEASE",
    "MESSAGES",
    "ENUMS",
    "WIDENED",
    "EngineCoreEventType",
    "FinishReason",
    "RequestOutputKind",
    "Hello",
    "EngineHandshakeMetadata",
    "EngineZmqAddresses",
    "EngineCoreReadyResponse",
    "Ready",
    "EngineCoreRequest",
    "MultiModalFeatureSpec",
    "SamplingParams",
    "PoolingParams",
    "LoRARequest",
    "PlaceholderRange",
    "StructuredOutputsParams",
    "RepetitionDetectionParams",
    "LateInteractionParams",
    "UtilityRequest",
    "StartDPWave",
    "EngineCoreOutputs",
    "EngineCoreOutput",
    "SchedulerStats",
    "UtilityOutput",
    "LogprobsLists",
    "LogprobsTensors",
    "EngineCoreEvent",
    "PrefillStats",
    "PrefixCacheStats",
    "KVCacheEvictionEvent",
    "SpecDecodingStats",
    "CUDAGraphStat",
    "PerfStats",
    "DebugPerfStats",
    "ReconfigureDistributedRequest",
]
