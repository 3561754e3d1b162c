"""Deliberate faults of the reference client (``ecp serve --bug NAME``, ``ClientConfig.bugs``).

The client implements the protocol correctly; each fault here bends it at one
seam, chosen when the client is built, so no branch of ``client.py``,
``aggregation.py`` or ``abort_coalescer.py`` knows about faults:

- the auto-abort queue (``abort-one-per-request``: a coalescer that drains one
  id at a time, so every id gets its own ABORT message);
- the utility aggregation table (``first-engine-is-sleeping``,
  ``reset-prefix-cache-any``: which engines a call goes to, how replies combine);
- the handler of output frames (``ignore-engine-dead``: the sentinel is dropped
  before the client sees it).

Without faults every hook hands back what it was given, so a correct client
pays nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

from ecp.spec import ENGINE_CORE_DEAD

from ..faults import Fault, table
from .abort_coalescer import AbortCoalescer
from .aggregation import Rule, UtilityAggregation

log = logging.getLogger("ecp.client")

ABORT_ONE_PER_REQUEST = "abort-one-per-request"
FIRST_ENGINE_IS_SLEEPING = "first-engine-is-sleeping"
RESET_PREFIX_CACHE_ANY = "reset-prefix-cache-any"
IGNORE_ENGINE_DEAD = "ignore-engine-dead"

FAULTS: dict[str, Fault] = table(
    Fault(ABORT_ONE_PER_REQUEST, "ECP-ABORT-5", "no coalescing: one ABORT message per auto-aborted id"),
    Fault(FIRST_ENGINE_IS_SLEEPING, "ECP-UTIL-4",
          "consensus methods (is_sleeping ...) ask only the first engine (vLLM's Python DP behaviour)"),
    Fault(RESET_PREFIX_CACHE_ANY, "ECP-UTIL-5", "reset_prefix_cache aggregates with OR instead of AND"),
    Fault(IGNORE_ENGINE_DEAD, "ECP-ROB-3", "the ENGINE_CORE_DEAD sentinel is ignored instead of failing the client"),
)


class ClientFaults:
    """The faults a client runs with. ``names`` may hold other roles' faults (the
    frontend passes its whole ``--bug`` set); only this table's are kept."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n for n in names if n in FAULTS)

    def __bool__(self) -> bool:
        return bool(self.names)

    def coalescer(self, coalescer: AbortCoalescer) -> AbortCoalescer:
        """The auto-abort queue the client uses instead of ``coalescer``."""
        return _OneIdPerDrain() if ABORT_ONE_PER_REQUEST in self.names else coalescer

    def aggregation(self, aggregation: UtilityAggregation) -> UtilityAggregation:
        """The aggregation table the client uses instead of ``aggregation``."""
        bent = self.names & {FIRST_ENGINE_IS_SLEEPING, RESET_PREFIX_CACHE_ANY}
        return _BentAggregation(bent, aggregation.rules) if bent else aggregation

    def output_handler(self, handler: Callable[[list[bytes]], None]) -> Callable[[list[bytes]], None]:
        """The handler of every output message the client uses instead of ``handler``."""
        if IGNORE_ENGINE_DEAD not in self.names:
            return handler

        def ignoring_engine_dead(frames: list[bytes]) -> None:
            if len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD:
                log.warning("ignoring ENGINE_CORE_DEAD (fault %s)", IGNORE_ENGINE_DEAD)
                return
            handler(frames)

        return ignoring_engine_dead


class _OneIdPerDrain(AbortCoalescer):
    def drain(self, take_owner: Callable[[str, Any], int | None], max_items: int = 1) -> dict[int, list[str]]:
        return super().drain(take_owner, max_items=1)


class _BentAggregation(UtilityAggregation):
    def __init__(self, faults: frozenset[str], rules: Mapping[str, Any]) -> None:
        super().__init__(rules)
        self.faults = faults

    def targets(self, method: str, ranks: tuple[int, ...]) -> tuple[int, ...]:
        if FIRST_ENGINE_IS_SLEEPING in self.faults and self.rule(method).rule is Rule.CONSENSUS:
            return ranks[:1]
        return super().targets(method, ranks)

    def combine(self, method: str, values: Mapping[int, Any]) -> Any:
        if RESET_PREFIX_CACHE_ANY in self.faults and method == "reset_prefix_cache" and values:
            return any(values.values())
        return super().combine(method, values)
