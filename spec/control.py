"""Control payloads: UTILITY calls, START_DP_WAVE, coordinator publications.

``UtilityRequest`` (``[client_idx, call_id, method_name, args]``, ``ECP-UTIL-1``) and ``StartDPWave``
(``[new_wave, exclude_eng_index]``, ``ECP-DP-4``) are the newest release's generated classes
(:mod:`ecp.spec.wiretypes.current`), named as vLLM's engine core unpacks them.
"""

from __future__ import annotations

import msgspec

from .wiretypes.current import StartDPWave, UtilityRequest  # noqa: F401 -- re-exported


class CoordinatorPublication(msgspec.Struct, array_like=True, omit_defaults=False):
    """Coordinator → frontends: ``(counts, wave, running)``; counts are
    ``[[waiting, running], …]`` per engine."""

    counts: list[list[int]]
    wave: int
    running: bool
