"""Hypothesis strategies for valid messages of every kind, as the types of
:mod:`ecp.spec` build them (shared by the property tests and the profile parity tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from ecp import spec
from ecp.spec.outputs import PrefixCacheStats, SamplingMaskLists
from ecp.spec.request import (KvHintAction, KvHintsEnvelope, LateChunkingParams, LateInteractionParams,
                              PlaceholderRange)

# ------------------------------------------------------------------ building blocks
i64 = st.integers(-(2**63), 2**63 - 1)
u64 = st.integers(0, 2**64 - 1)
small = st.integers(0, 2**31 - 1)
floats = st.floats(allow_nan=False)
text = st.text(max_size=12)
ids = st.text(min_size=1, max_size=24)
json_like = st.recursive(
    st.none() | st.booleans() | i64 | floats | text | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
opt = st.none().__or__


@st.composite
def tensors(draw):
    dtype, size = draw(st.sampled_from([("uint8", 1), ("float32", 4), ("int64", 8), ("bfloat16", 2),
                                        ("<f4", 4)]))
    # small ones go inline (ext type 3), >= 256 bytes into aux frames
    n = draw(st.one_of(st.integers(0, 8), st.integers(256 // size, 300 // size)))
    return spec.Tensor(dtype, (n,), draw(st.binary(min_size=n * size, max_size=n * size)))


sampling_params = st.builds(
    spec.SamplingParams,
    n=st.integers(1, 8), temperature=floats, top_p=floats, top_k=st.integers(-1, 100),
    presence_penalty=floats, seed=opt(i64), stop=opt(st.lists(text, max_size=3)),
    stop_token_ids=opt(st.lists(small, max_size=3)), max_tokens=opt(small), min_tokens=small,
    logprobs=opt(st.integers(-1, 20)), prompt_logprobs=opt(st.integers(-1, 20)),
    output_kind=st.sampled_from(list(spec.RequestOutputKind)), _eos_token_id=opt(small),
    _all_stop_token_ids=st.sets(small, max_size=3), watermarking=opt(st.booleans()),
    logit_bias=opt(st.dictionaries(small, floats, max_size=3)),
    extra_args=opt(st.dictionaries(text, json_like, max_size=3)),
    bad_words=opt(st.lists(text, max_size=2)), skip_reading_prefix_cache=opt(st.booleans()),
    prompt_logprob_token_ids=opt(tensors()),
)

requests = st.builds(
    spec.EngineCoreRequest,
    request_id=ids, prompt_token_ids=opt(st.lists(small, max_size=16)),
    mm_features=opt(st.lists(st.builds(
        spec.MultiModalFeatureSpec, data=st.none(), modality=st.sampled_from(["image", "audio"]),
        identifier=text, mm_position=st.builds(PlaceholderRange, offset=small, length=small,
                                               is_embed=opt(tensors())),
        mm_hash=opt(text)), max_size=2)),
    sampling_params=opt(sampling_params),
    pooling_params=opt(st.builds(spec.PoolingParams, use_activation=opt(st.booleans()),
                                 dimensions=opt(small), task=opt(st.sampled_from(["embed", "classify"])),
                                 late_interaction_params=opt(st.builds(
                                     LateInteractionParams, mode=st.sampled_from(["cache_query", "score_doc"]),
                                     query_key=text, query_uses=opt(st.integers(1, 9)))),
                                 extra_kwargs=opt(st.dictionaries(text, json_like, max_size=2)),
                                 output_kind=st.sampled_from(list(spec.RequestOutputKind)),
                                 late_chunking_params=opt(st.builds(LateChunkingParams, chunk_size=st.integers(1, 512))))),
    arrival_time=floats,
    lora_request=opt(st.builds(spec.LoRARequest, lora_name=text, lora_int_id=st.integers(1, 99),
                               lora_path=text)),
    cache_salt=opt(text), data_parallel_rank=opt(st.integers(0, 65535)), prompt_embeds=opt(tensors()),
    prompt_is_token_ids=opt(st.lists(st.booleans(), max_size=3)), client_index=st.integers(0, 8),
    current_wave=small, priority=i64, trace_headers=opt(st.dictionaries(text, text, max_size=2)),
    resumable=st.booleans(), external_req_id=opt(text), reasoning_ended=opt(st.booleans()),
    reasoning_parser_kwargs=opt(st.dictionaries(text, json_like, max_size=2)),
    abort_immediately=st.booleans(), session_id=opt(text),
    kv_hints=opt(st.builds(KvHintsEnvelope, protocol_version=text, message_id=text,
                           actions=st.lists(st.builds(KvHintAction, action_id=text, action_type=text,
                                                      action_version=text,
                                                      payload=st.dictionaries(text, json_like, max_size=2)),
                                            max_size=2))),
)

outputs_one = st.builds(
    spec.EngineCoreOutput,
    request_id=ids, new_token_ids=st.lists(small, max_size=8),
    new_logprobs=opt(st.builds(spec.LogprobsLists, logprob_token_ids=tensors(), logprobs=tensors(),
                               sampled_token_ranks=tensors(),
                               cu_num_generated_tokens=opt(st.lists(small, max_size=3)))),
    new_prompt_logprobs_tensors=opt(st.builds(spec.LogprobsTensors, logprob_token_ids=tensors(), logprobs=tensors(),
                                              selected_token_ranks=tensors(),
                                              cu_num_generated_tokens_tensor=opt(tensors()))),
    pooling_output=opt(tensors()), finish_reason=opt(st.sampled_from(list(spec.FinishReason))),
    stop_reason=opt(st.one_of(small, text)),
    events=opt(st.lists(st.builds(spec.EngineCoreEvent, type=st.sampled_from(list(spec.EngineCoreEventType)),
                                  timestamp=floats), max_size=3)),
    kv_transfer_params=opt(st.dictionaries(text, json_like, max_size=3)),
    prefill_stats=opt(st.builds(spec.PrefillStats, num_prompt_tokens=small, num_cached_tokens=small)),
    routed_experts=opt(tensors()), num_nans_in_logits=small,
    new_sampling_mask=opt(st.builds(SamplingMaskLists, token_ids=tensors(), offsets=opt(tensors()),
                                    cu_num_generated_tokens=opt(st.lists(small, max_size=3)))),
    error=opt(st.builds(spec.RequestError, code=text, message=text, retryable=st.booleans())),
)

outputs = st.builds(
    spec.EngineCoreOutputs,
    engine_index=st.integers(0, 65535), outputs=st.lists(outputs_one, max_size=3),
    scheduler_stats=opt(st.builds(spec.SchedulerStats, num_running_reqs=small, num_waiting_reqs=small,
                                  kv_cache_usage=floats, step_counter=small,
                                  num_kv_fetch_reqs_by_stage=st.dictionaries(
                                      st.sampled_from(["waiting_to_start", "in_progress", "completed_waiting"]),
                                      small, max_size=3),
                                  prefix_cache_stats=st.builds(PrefixCacheStats, hits=small),
                                  connector_prefix_cache_stats=opt(st.builds(PrefixCacheStats, queries=small)))),
    timestamp=floats,
    utility_output=opt(st.builds(spec.UtilityOutput, call_id=u64, failure_message=opt(text),
                                 result=opt(st.builds(spec.UtilityResult, value=json_like)))),
    finished_requests=opt(st.sets(ids, max_size=3)), wave_complete=opt(small), start_wave=opt(small),
    weight_version=opt(text),
)

ready_responses = st.builds(
    spec.EngineCoreReadyResponse,
    max_model_len=small, num_gpu_blocks=small, block_size=small, dp_stats_address=opt(text), dtype=text,
    vllm_version=text, world_size=small, data_parallel_size=small, tensor_parallel_size=small,
    pipeline_parallel_size=small, decode_context_parallel_size=small, data_parallel_rank=small,
    max_num_seqs=small, max_num_batched_tokens=small, instance_id=text, supports_lora=st.booleans(),
    max_loras=small, kv_cache_max_concurrency=opt(floats), enable_sleep_mode=st.booleans(),
    effective_attention_block_size=opt(small),
)
