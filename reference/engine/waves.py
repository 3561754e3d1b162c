"""DP waves of one engine core (``ECP-DP-4``/``-5``), sans-IO.

A deployment with a DP coordinator runs in waves: an engine joins the current
wave when a request or ``START_DP_WAVE`` arrives, and tells the coordinator
when it has nothing left (``wave_complete``). Without a coordinator an engine
only keeps the highest wave it was told about.
"""

from __future__ import annotations


class Waves:
    """The wave an engine is in and whether it is running. The core asks and sends;
    each method returns what the coordinator must be told (``None``: nothing)."""

    __slots__ = ("has_coordinator", "current", "running")

    def __init__(self, has_coordinator: bool) -> None:
        self.has_coordinator = has_coordinator
        self.current = 0
        self.running = False

    def on_request(self, wave: int) -> int | None:
        """An admitted request of ``wave``; returns the wave to announce with
        ``start_wave`` when a stale-wave request reaches an idle engine (``ECP-DP-5``)."""
        if not self.has_coordinator:
            self.current = max(self.current, wave)
            return None
        notice = None
        if wave > self.current:
            self.current = wave
        elif wave < self.current and not self.running:
            notice = self.current
        self.running = True
        return notice

    def on_start(self, wave: int, exclude_engine_index: int | None, engine_index: int) -> None:
        """START_DP_WAVE: a wave older than ours is ignored (``ECP-DP-4``)."""
        if wave >= self.current and exclude_engine_index != engine_index:
            self.current = wave
            self.running = True

    def on_idle(self) -> int | None:
        """The engine has nothing unfinished; returns the wave to report as
        ``wave_complete`` (the engine then waits in the next one)."""
        if not self.has_coordinator or not self.running:
            return None
        done = self.current
        self.current += 1
        self.running = False
        return done
