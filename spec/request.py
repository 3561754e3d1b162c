"""Frontend → engine payloads: ``EngineCoreRequest`` (ADD) and its nested types.

``EngineCoreRequest`` is an *array* of 22 elements in vLLM 0.33 wire order.
Indices 0–8 are required (a decoder needs at least 9 elements, ``ECP-FRAME-4``);
9–21 have defaults. Senders always emit all 22 (``ECP-FRAME-3``).

Every class here is the newest release's generated one (:mod:`ecp.spec.wiretypes.current`, from its
layout and :mod:`ecp.spec.overlay`); what they do beyond their fields (``kv_transfer_params``, the
multimodal tensors) is :mod:`ecp.spec.behaviour`.
"""

from __future__ import annotations

from .wiretypes.current import (  # noqa: F401 -- re-exported: ecp.spec.request is where the API names them
    EngineCoreRequest, KvHintAction, KvHintsEnvelope, LateChunkingParams, LateInteractionParams, LoRARequest,
    MultiModalFeatureSpec, PlaceholderRange, PoolingParams,
)

#: ABORT payload: internal request ids (``ECP-ABORT-1``).
AbortPayload = list[str]
