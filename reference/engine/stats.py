"""What an engine core reports besides request outputs: ``scheduler_stats``, the
``finished_requests`` sets a DP deployment tracks, the stats-only message after
finishes and aborts, and the queue counts the coordinator balances on."""

from __future__ import annotations

from typing import Any, Protocol

from ecp.spec import EngineCoreOutputs, SchedulerStats
from ecp.spec.outputs import PrefixCacheStats


class StatsSource(Protocol):
    """What the stats read of their engine core (the core satisfies it; this module does not import
    the core, and writes nothing of it)."""

    scheduler: Any
    connector: Any
    engine_index: int
    step_counter: int

    @property
    def current_wave(self) -> int: ...

    @property
    def weight_version(self) -> str: ...

    def clock(self) -> float: ...


class EngineStats:
    """Bookkeeping for the messages that carry stats; the core emits what it returns."""

    def __init__(self, *, log_stats: bool, include_finished_set: bool) -> None:
        self.log_stats = log_stats
        #: with a coordinator, every message to a client names the ids finished since the last one
        self.include_finished_set = include_finished_set
        #: a stats-only message is owed once the engine is idle (after finishes and aborts)
        self.dirty = False
        self._finished_for_client: dict[int, set[str]] = {}
        self._last_coord_counts: tuple[int, int] | None = None

    def finished(self, client: int, request_id: str) -> None:
        if self.include_finished_set:
            self._finished_for_client.setdefault(client, set()).add(request_id)

    def take_finished(self, client: int) -> set[str] | None:
        if not self.include_finished_set:
            return None
        return self._finished_for_client.pop(client, None)

    def snapshot(self, core: StatsSource) -> SchedulerStats:
        s = core.scheduler
        pc = s.pool.take_stats()
        return SchedulerStats(
            num_running_reqs=s.num_running, num_waiting_reqs=s.num_waiting,
            step_counter=core.step_counter, current_wave=core.current_wave,
            kv_cache_usage=s.pool.usage,
            prefix_cache_stats=PrefixCacheStats(reset=pc["reset"], requests=pc["requests"],
                                                queries=pc["queries"], hits=pc["hits"]),
            kv_connector_stats=core.connector.snapshot() if core.connector is not None else None,
        )

    def stats_only(self, core: StatsSource) -> EngineCoreOutputs | None:
        """The stats-only message for client 0, if one is owed (then no longer)."""
        msg = None
        if self.log_stats and self.dirty:
            msg = EngineCoreOutputs(engine_index=core.engine_index, scheduler_stats=self.snapshot(core),
                                    timestamp=core.clock(), weight_version=core.weight_version,
                                    finished_requests=self.take_finished(0))
        self.dirty = False
        return msg

    def coordinator_counts(self, core: StatsSource) -> EngineCoreOutputs | None:
        """The coordinator's view of the queues, when it has changed since the last one."""
        counts = (core.scheduler.num_waiting, core.scheduler.num_running)
        if counts == self._last_coord_counts:
            return None
        self._last_coord_counts = counts
        return EngineCoreOutputs(
            engine_index=core.engine_index, scheduler_stats=self.snapshot(core) if self.log_stats else
            SchedulerStats(num_running_reqs=counts[1], num_waiting_reqs=counts[0], current_wave=core.current_wave),
            timestamp=core.clock())
