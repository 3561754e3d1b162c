"""Engine → frontend payloads: ``EngineCoreOutputs`` and everything inside it.

``EngineCoreOutputs`` (9) and ``EngineCoreOutput`` (19) are arrays in vLLM 0.33
wire order; events, stats and ``RequestError`` are maps. ``UtilityOutput`` is
always 3 elements and its ``result`` is the ``[type_info, value]`` envelope
(``ECP-UTIL-2``: :class:`ecp.spec.envelope.UtilityResult`).

Every message here is the newest release's generated one (:mod:`ecp.spec.wiretypes.current`);
``finished``, ``is_dp_control`` and ``is_utility`` are :mod:`ecp.spec.behaviour`.
"""

from __future__ import annotations

from .envelope import UtilityResult  # noqa: F401 -- re-exported
from .wiretypes.current import (  # noqa: F401 -- re-exported: ecp.spec.outputs is where the API names them
    EngineCoreEvent, EngineCoreOutput, EngineCoreOutputs, LogprobsLists, LogprobsTensors, PrefillStats,
    PrefixCacheStats, RequestError, SamplingMaskLists, SchedulerStats, UtilityOutput,
)
