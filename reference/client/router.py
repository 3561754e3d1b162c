"""Engine choice for a new request (``ECP-DP-2``, ``ECP-DP-3``), sans-IO.

An explicit ``data_parallel_rank`` pins the request to that global rank,
which must be connected. Otherwise the least-loaded engine wins: the score is
the client's own in-flight count until the engine has sent
``scheduler_stats``, then ``max(in_flight, running + waiting +
admitted_since_stats)`` (the engine's view, plus what this client sent since
that snapshot). Ties go to the lowest rank. Coordinator counts are not used.
"""

from __future__ import annotations

from dataclasses import dataclass

from ecp.spec import SchedulerStats

from .errors import InvalidDataParallelRank


@dataclass(slots=True)
class _Load:
    stats_queued: int | None = None  # running + waiting at the last snapshot
    admitted_since_stats: int = 0


class Router:
    """Picks engines. The receiver must call :meth:`admitted` for every ADD it
    sends and :meth:`on_stats` for every ``scheduler_stats`` it receives."""

    def __init__(self, ranks: tuple[int, ...]) -> None:
        if not ranks:
            raise ValueError("a router needs at least one engine")
        self.ranks = tuple(sorted(ranks))
        self._load = {r: _Load() for r in self.ranks}

    def check_rank(self, rank: int) -> int:
        if rank not in self._load:
            raise InvalidDataParallelRank(rank, self.ranks)
        return rank

    def score(self, rank: int, in_flight: int) -> int:
        load = self._load[rank]
        if load.stats_queued is None:
            return in_flight
        return max(in_flight, load.stats_queued + load.admitted_since_stats)

    def choose(self, in_flight: dict[int, int], pinned: int | None = None) -> int:
        """The engine for a new request; raises :class:`InvalidDataParallelRank`."""
        if pinned is not None:
            return self.check_rank(pinned)
        if len(self.ranks) == 1:
            return self.ranks[0]
        return min(self.ranks, key=lambda r: (self.score(r, in_flight.get(r, 0)), r))

    def admitted(self, rank: int) -> None:
        self._load[rank].admitted_since_stats += 1

    def on_stats(self, rank: int, stats: SchedulerStats) -> None:
        load = self._load.get(rank)
        if load is None:
            return
        load.stats_queued = stats.num_running_reqs + stats.num_waiting_reqs
        load.admitted_since_stats = 0
