"""Frontend → engine payloads: ``EngineCoreRequest`` (ADD) and its nested types.

``EngineCoreRequest`` is an *array* of 22 elements in vLLM 0.33 wire order.
Indices 0–8 are required (a decoder needs at least 9 elements, ``ECP-FRAME-4``);
9–21 have defaults. Senders always emit all 22 (``ECP-FRAME-3``).

The nested messages with no behaviour of their own (LoRA, pooling, placeholder ranges, KV hints) are
the release's generated ones (:mod:`ecp.spec.wiretypes.current`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .sampling import SamplingParams
from .tensors import Tensor
from .wiretypes.current import (  # noqa: F401 -- re-exported: ecp.spec.request is where the API names them
    KvHintAction, KvHintsEnvelope, LateChunkingParams, LateInteractionParams, LoRARequest, PlaceholderRange,
    PoolingParams,
)


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
