"""Where ecp.spec's own layout knowingly differs from vLLM 0.33.0's, and why.

``ecp spec diff vllm-0.33 current`` compares the layout extracted from the
vLLM 0.33.0 wheel (``spec/layouts/vllm-0.33.json``) with the layout of
ecp.spec's msgspec types. Every finding it reports must be listed here, with
the finding's exact message and the reason it is harmless on the wire; a
finding that is not listed is a divergence to fix in ecp.spec (a test fails
on it, and on an entry that no longer matches a finding).

Kinds of deviation:

``unresolved``
    The extractor reads vLLM's source without importing it and records
    ``any`` where the type is not declared statically; ecp.spec pins the type
    the 0.33 source actually produces. The bytes are the same.
``map``
    vLLM carries a struct or dataclass of its own as a msgpack map; ecp.spec
    types it as ``map[str, any]`` (a receiver checks only that it is a map,
    a sender is responsible for the keys). The bytes are the same.
``stats``
    A typed statistics struct inside ``SchedulerStats`` that ecp.spec keeps as
    ``any``: scheduler stats are optional for frontends (``ECP-OUT-7``) and a
    receiver must not fail a step on them.
``name``
    A position of a tuple payload that ecp.spec names differently in its
    Python API; the bytes are the same (array positions carry no names).
``ecp``
    Something ecp.spec describes that the extracted layout does not: a type
    the extractor cannot see, or a method that is not vLLM 0.33's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from ..version import VLLM_RELEASE

Kind = Literal["unresolved", "map", "stats", "name", "ecp"]

#: the shipped layout the deviations are relative to
BASELINE = f"vllm-{VLLM_RELEASE}"


@dataclass(frozen=True)
class Deviation:
    """One expected finding of ``ecp spec diff vllm-0.33 current``."""

    rule: str
    subject: str
    #: the finding's message, exactly; any other change to the subject is a new finding
    message: str
    kind: Kind
    reason: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.rule, self.subject, self.message)


def _d(rule: str, subject: str, message: str, kind: Kind, reason: str) -> Deviation:
    return Deviation(rule, subject, message, kind, reason)


_MAP = "a msgpack map on the wire either way"
_STATS = "typed statistics kept as any (optional for frontends, ECP-OUT-7)"

DEVIATIONS: tuple[Deviation, ...] = (
    # -- handshake
    _d("DIFF-022", "EngineCoreReadyResponse.kv_events_config",
       "type changed from struct:KVEventsConfig | nil to map[str, any] | nil", "map",
       f"KVEventsConfig is a config dataclass (vllm/config/kv_events.py), {_MAP}"),
    _d("DIFF-002", "KVEventsConfig", "message KVEventsConfig removed", "map",
       "carried as map[str, any] in EngineCoreReadyResponse.kv_events_config"),
    _d("DIFF-020", "Ready.parallel_config_hash", "type narrowed from any to str | nil", "unresolved",
       "ParallelConfig.compute_hash() returns a SHA-256 hex digest (vllm/config/utils.py hash_factors)"),
    _d("DIFF-020", "Ready.coord_store_port", "type narrowed from any to int | nil", "unresolved",
       "ParallelConfig._coord_store_port is declared int"),
    _d("DIFF-020", "Ready.elastic_ep_max_dp_size", "type narrowed from any to int | nil", "unresolved",
       "ParallelConfig.elastic_ep_max_dp_size is declared int"),
    _d("DIFF-020", "Ready.num_redundant_experts", "type narrowed from any to int | nil", "unresolved",
       "EPLBConfig.num_redundant_experts is declared int"),
    # -- requests
    _d("DIFF-020", "MultiModalFeatureSpec.data", "type narrowed from any to map[str, any] | nil", "unresolved",
       "MultiModalKwargsItem is a UserDict that vLLM's encoder writes as a map (nil: cached in the engine)"),
    _d("DIFF-022", "SamplingParams.structured_outputs",
       "type changed from struct:StructuredOutputsParams | nil to map[str, any] | nil", "map",
       f"StructuredOutputsParams is a dataclass (vllm/sampling_params.py), {_MAP}"),
    _d("DIFF-002", "StructuredOutputsParams", "message StructuredOutputsParams removed", "map",
       "carried as map[str, any] in SamplingParams.structured_outputs"),
    _d("DIFF-022", "SamplingParams.repetition_detection",
       "type changed from struct:RepetitionDetectionParams | nil to map[str, any] | nil", "map",
       f"RepetitionDetectionParams is a dataclass (vllm/sampling_params.py), {_MAP}"),
    _d("DIFF-002", "RepetitionDetectionParams", "message RepetitionDetectionParams removed", "map",
       "carried as map[str, any] in SamplingParams.repetition_detection"),
    # -- control
    _d("DIFF-015", "UtilityRequest.client_index", "field renamed from 'client_idx' to 'client_index'", "name",
       "position 0 of the UTILITY tuple; ecp's name is the one EngineCoreRequest uses for the same value"),
    _d("DIFF-020", "UtilityRequest.call_id", "type narrowed from any to int", "unresolved",
       "the Python client's call id is uuid1().int >> 64 (vllm/v1/engine/core_client.py), vllm-rs counts 1, 2, ..."),
    _d("DIFF-015", "StartDPWave.wave", "field renamed from 'new_wave' to 'wave'", "name",
       "position 0 of the START_DP_WAVE tuple"),
    _d("DIFF-015", "StartDPWave.exclude_engine_index",
       "field renamed from 'exclude_eng_index' to 'exclude_engine_index'", "name",
       "position 1 of the START_DP_WAVE tuple"),
    _d("DIFF-001", "CoordinatorPublication", "message CoordinatorPublication added", "ecp",
       "the coordinator's publication to frontends is not extracted from vLLM (the extractor covers "
       "frontend<->engine payloads only)"),
    # -- outputs
    _d("DIFF-022", "EngineCoreOutput.spec_decode_metrics",
       "type changed from struct:RequestSpecDecodeMetrics | nil to map[str, any] | nil", "map",
       f"RequestSpecDecodeMetrics is a map-encoded msgspec Struct (vllm/v1/metrics/stats.py), {_MAP}"),
    _d("DIFF-002", "RequestSpecDecodeMetrics", "message RequestSpecDecodeMetrics removed", "map",
       "carried as map[str, any] in EngineCoreOutput.spec_decode_metrics"),
    _d("DIFF-021", "SchedulerStats.iteration_details",
       "type widened from struct:SchedulerIterationDetails | nil to any", "stats", _STATS),
    _d("DIFF-002", "SchedulerIterationDetails", "message SchedulerIterationDetails removed", "stats", _STATS),
    _d("DIFF-021", "SchedulerStats.kv_cache_eviction_events",
       "type widened from array[struct:KVCacheEvictionEvent] to array[any]", "stats", _STATS),
    _d("DIFF-002", "KVCacheEvictionEvent", "message KVCacheEvictionEvent removed", "stats", _STATS),
    _d("DIFF-021", "SchedulerStats.spec_decoding_stats",
       "type widened from struct:SpecDecodingStats | nil to any", "stats", _STATS),
    _d("DIFF-002", "SpecDecodingStats", "message SpecDecodingStats removed", "stats", _STATS),
    _d("DIFF-021", "SchedulerStats.cudagraph_stats",
       "type widened from struct:CUDAGraphStat | nil to any", "stats", _STATS),
    _d("DIFF-002", "CUDAGraphStat", "message CUDAGraphStat removed", "stats", _STATS),
    _d("DIFF-021", "SchedulerStats.perf_stats", "type widened from struct:PerfStats | nil to any", "stats", _STATS),
    _d("DIFF-002", "PerfStats", "message PerfStats removed", "stats", _STATS),
    _d("DIFF-002", "DebugPerfStats", "message DebugPerfStats removed", "stats", _STATS + "; nested in PerfStats"),
    _d("DIFF-020", "UtilityOutput.result", "type narrowed from any to struct:UtilityResult | nil", "unresolved",
       "vLLM's UtilityResult is a plain class its encoder writes as [type_info, value] (ECP-UTIL-2)"),
    _d("DIFF-001", "UtilityResult", "message UtilityResult added", "unresolved",
       "the [type_info, value] envelope of UtilityOutput.result, typed by ecp.spec (ECP-UTIL-2)"),
    # -- UTILITY methods
    _d("DIFF-056", "utility sleep", "result narrowed from any to nil", "unresolved",
       "the method returns None or a Future the engine core waits for; the reply's value is nil"),
    _d("DIFF-056", "utility pause_generation", "result narrowed from any to nil", "unresolved",
       "the method returns None or a Future the engine core waits for; the reply's value is nil"),
    _d("DIFF-056", "utility pause_scheduler", "result narrowed from any to nil", "unresolved",
       "the method returns None or a Future the engine core waits for; the reply's value is nil"),
    _d("DIFF-052", "utility collective_rpc",
       "arguments changed from [any, float | nil, array[any], map[str, any] | nil] "
       "to [str, float | nil, array[any], map[str, any] | nil]", "unresolved",
       "vLLM's method is str | Callable; a callable travels only pickled, which ecp never decodes (ECP-SEC-1), "
       "so on the wire it is a method name"),
    _d("DIFF-052", "utility reinitialize_distributed",
       "arguments changed from [struct:ReconfigureDistributedRequest] to [map[str, any]]", "map",
       f"ReconfigureDistributedRequest is a map-encoded msgspec Struct (vllm/v1/engine/__init__.py), {_MAP}"),
    _d("DIFF-002", "ReconfigureDistributedRequest", "message ReconfigureDistributedRequest removed", "map",
       "carried as map[str, any], the argument of utility reinitialize_distributed"),
    _d("DIFF-006", "utility handle_fault_tolerance", "arguments not compared: OLD does not document them",
       "unresolved", "answered by the engine's fault-tolerance sentinel, not an engine core method "
       "(vllm/v1/fault_tolerance/engine_core_sentinel.py): one FaultToleranceRequest map"),
    _d("DIFF-056", "utility handle_fault_tolerance", "result narrowed from any to map[str, any]", "unresolved",
       "the sentinel replies with a FaultToleranceResult as a map {request_id, success, reason}"),
    _d("DIFF-050", "utility get_kv_connector_handshake_entries",
       "new utility method get_kv_connector_handshake_entries", "ecp",
       "called by vLLM's Rust frontend source after 0.33; not in the 0.33.0 wheel (UtilityMethod.origin)"),
    _d("DIFF-050", "utility add_remote_kv_handshake", "new utility method add_remote_kv_handshake", "ecp",
       "called by vLLM's Rust frontend source after 0.33; not in the 0.33.0 wheel (UtilityMethod.origin)"),
)
