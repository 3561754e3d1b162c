"""Frontend → engine payloads: ``EngineCoreRequest`` (ADD) and its nested types.

``EngineCoreRequest`` is an *array* of 22 elements in vLLM 0.33 wire order.
Indices 0–8 are required (a decoder needs at least 9 elements, ``ECP-FRAME-4``);
9–21 have defaults. Senders always emit all 22 (``ECP-FRAME-3``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .enums import RequestOutputKind
from .sampling import SamplingParams
from .tensors import Tensor


class LoRARequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """A LoRA adapter reference: an array of 6 in vLLM 0.33 wire order
    (``vllm/lora/request.py``). Receivers must refuse ``lora_int_id < 1``.

    vLLM 0.31 and older carry a 7th element, ``tensorizer_config_dict``, at
    position 4 (removed in 0.32): every later field is shifted between those
    releases and 0.33 (``ECP-FRAME-3``).
    """

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class LateInteractionParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """Late-interaction scoring metadata of a pooling request (array of 3).

    ``mode`` is ``cache_query`` or ``score_doc``; ``query_key`` names the cached
    query (also used for DP routing); ``query_uses`` is how many documents will be
    scored against it (a positive int for ``cache_query``).
    """

    mode: str
    query_key: str
    query_uses: int | None = None


class LateChunkingParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """Mean-pool token states into chunks of ``chunk_size`` tokens (array of 1;
    ``0 < chunk_size < 2**63``)."""

    chunk_size: int


class PoolingParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """Pooling parameters: an array of 11 in vLLM 0.33 wire order (``vllm/pooling_params.py``).

    ``task`` is one of ``embed``, ``classify``, ``token_embed``,
    ``token_classify``, ``plugin``, ``embed&token_classify``. vllm-rs sends only
    the first 5 elements; a receiver applies the defaults to the rest.
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
    late_chunking_params: LateChunkingParams | None = None


class PlaceholderRange(msgspec.Struct, omit_defaults=False):
    """Where a multimodal item sits in the prompt."""

    offset: int
    length: int
    is_embed: Tensor | None = None


class MultiModalFeatureSpec(msgspec.Struct, omit_defaults=False):
    """One multimodal item of ``mm_features``.

    ``data`` maps kwarg name → ``{data: nested tensors/numbers, field: [factory, kwargs]}``
    (factory ``batched``/``flat``/``shared``) or is nil when the item is already cached in
    the engine. Tensors inside an item's ``data`` (``[dtype, shape, ext 3 | frame index]``)
    are decoded to :class:`Tensor`; everything else stays as plain values.
    """

    data: dict[str, Any] | None
    modality: str
    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str | None = None

    def __post_init__(self) -> None:
        # Runs during decoding: turn the wire tensors inside each item's ``data`` into Tensor
        # (resolving aux-frame indexes), so receivers see the same values the sender encoded.
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

        return _dec_hook(Tensor, x)
    if isinstance(x, list):
        return [_nested_tensors(v) for v in x]
    return x


class KvHintAction(msgspec.Struct, omit_defaults=False):
    """One versioned KV hint action (map; every key required, as in
    ``vllm/v1/kv_hints/protocol.py``). ``payload`` holds JSON-compatible values
    whose schema is the action's own."""

    action_id: str
    action_type: str
    action_version: str
    payload: dict[str, Any]


class KvHintsEnvelope(msgspec.Struct, omit_defaults=False):
    """``kv_hints``: a map of 3 required keys (``vllm/v1/kv_hints/protocol.py``)."""

    protocol_version: str
    message_id: str
    actions: list[KvHintAction]


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """The ADD payload (``ECP-REQ-1``). Field order is the wire order."""

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
    client_index: int = 0
    current_wave: int = 0
    priority: int = 0
    trace_headers: dict[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    abort_immediately: bool = False
    session_id: str | None = None
    kv_hints: KvHintsEnvelope | None = None

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        return self.sampling_params.kv_transfer_params if self.sampling_params else None


#: ABORT payload: internal request ids (``ECP-ABORT-1``).
AbortPayload = list[str]
