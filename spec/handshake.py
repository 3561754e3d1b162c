"""Startup handshake messages (``ECP-HS-*``).

HELLO and READY travel on the handshake socket and are told apart by their
``status`` key (msgspec tagged union: the tag is written first, as vLLM's dict
literal does). INIT is ``EngineHandshakeMetadata``; the ready payload is
``EngineCoreReadyResponse`` (a dataclass in vLLM: every key is emitted). ``Hello`` and INIT
(``EngineHandshakeMetadata``, ``EngineZmqAddresses``: its ``ECP-HS-2`` check is
:class:`ecp.spec.behaviour.EngineZmqAddresses`) are the release's generated ones
(:mod:`ecp.spec.wiretypes.current`).
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from .wiretypes.current import EngineHandshakeMetadata, EngineZmqAddresses, Hello  # noqa: F401 -- re-exported


class Ready(msgspec.Struct, tag_field="status", tag="READY", omit_defaults=True):
    """Engine → frontend, last handshake message (``ECP-HS-5``).

    ``parallel_config_hash`` is present only when the engine's DP size > 1;
    the elastic-EP keys only with elastic EP.
    """

    local: bool
    headless: bool
    parallel_config_hash: str | None = None
    coord_store_port: int | None = None
    elastic_ep_max_dp_size: int | None = None
    num_redundant_experts: int | None = None


HandshakeMessage = Union[Hello, Ready]


class EngineCoreReadyResponse(msgspec.Struct, omit_defaults=False):
    """The ready payload on each input socket (``ECP-HS-3``, ``ECP-HS-4``).

    The first 17 fields are required; the rest are optional with defaults.
    """

    max_model_len: int
    num_gpu_blocks: int
    block_size: int
    dp_stats_address: str | None
    dtype: str
    vllm_version: str
    world_size: int
    data_parallel_size: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    decode_context_parallel_size: int
    data_parallel_rank: int
    max_num_seqs: int
    max_num_batched_tokens: int
    instance_id: str
    supports_lora: bool
    max_loras: int
    mamba_block_size: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: dict[str, Any] | None = None
    weight_transfer_backend: str | None = None
    enable_sleep_mode: bool = False
    supports_draft_weight_updates: bool = False
    effective_attention_block_size: int | None = None
    coord_store_port: int = 0
    coordinator_input_address: str | None = None
    coordinator_output_address: str | None = None


REQUIRED_READY_KEYS: tuple[str, ...] = tuple(
    f.encode_name for f in msgspec.structs.fields(EngineCoreReadyResponse) if f.required
)

#: Coordinator → engine startup gate frame (``ECP-HS-6``) and the XSUB subscribe frame.
COORDINATOR_READY = b"READY"
XSUB_SUBSCRIBE = b"\x01"


def engine_identity(rank: int) -> bytes:
    """The 2-byte little-endian identity of a global DP rank (``ECP-SOCK-2``)."""
    if not 0 <= rank <= 0xFFFF:
        from .errors import LocalProtocolError

        raise LocalProtocolError(
            f"DP rank {rank} does not fit the 2-byte identity",
            clause="ECP-SOCK-2", expected="0..65535", got=rank,
        )
    return rank.to_bytes(2, "little")


def rank_of_identity(identity: bytes) -> int:
    """Inverse of :func:`engine_identity`; raises ``HandshakeError`` on a bad length."""
    if len(identity) != 2:
        from .errors import HandshakeError

        raise HandshakeError(
            f"engine identity must be 2 bytes, got {len(identity)}",
            clause="ECP-SOCK-2", expected="2 bytes", got=identity.hex(),
        )
    return int.from_bytes(identity, "little")
