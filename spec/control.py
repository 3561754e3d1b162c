"""Control payloads: UTILITY calls, START_DP_WAVE, coordinator publications."""

from __future__ import annotations

from typing import Any

import msgspec


class UtilityRequest(msgspec.Struct, array_like=True, omit_defaults=False):
    """UTILITY payload ``[client_index, call_id, method_name, args]`` (``ECP-UTIL-1``).

    ``call_id`` is any u64 (Python clients use ``uuid1().int >> 64``, vllm-rs
    counts 1, 2, …); the engine echoes it verbatim.
    """

    client_index: int
    call_id: int
    method_name: str
    # required, as in vLLM 0.33: its engine unpacks exactly four items
    args: list[Any]


class StartDPWave(msgspec.Struct, array_like=True, omit_defaults=False):
    """START_DP_WAVE payload ``[wave, exclude_engine_index]`` (``ECP-DP-4``)."""

    wave: int
    # required, as in vLLM 0.33: its engine unpacks exactly two items
    exclude_engine_index: int | None


class CoordinatorPublication(msgspec.Struct, array_like=True, omit_defaults=False):
    """Coordinator → frontends: ``(counts, wave, running)``; counts are
    ``[[waiting, running], …]`` per engine."""

    counts: list[list[int]]
    wave: int
    running: bool
