"""Bounded logging of a peer's bad messages.

An engine logs every malformed message it drops (``ECP-ROB-1``), but a peer that
floods it with garbage must not turn into an unbounded log: at 100,000 bad frames
one line each is ~15 MB. :class:`RepeatLimiter` lets through at most ``burst``
records of one message template per ``interval`` seconds and folds the rest into a
count, reported on the first record let through once the window has passed.
Errors and anything above WARNING always pass.
"""

from __future__ import annotations

import logging
import time
from typing import Callable


class RepeatLimiter(logging.Filter):
    """A :class:`logging.Filter` that rate-limits WARNING-and-below records per template."""

    def __init__(self, burst: int = 10, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if burst < 1 or interval <= 0:
            raise ValueError("burst must be >= 1 and interval > 0")
        self.burst = burst
        self.interval = interval
        self._clock = clock
        # template -> [window start, records let through in it, records suppressed]
        self._windows: dict[str, list] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        now = self._clock()
        key = str(record.msg)
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval:
            suppressed = window[2] if window is not None else 0
            self._windows[key] = [now, 1, 0]
            if suppressed:
                record.msg = f"{record.msg} (and {suppressed} more like it in the last {self.interval:g} s)"
            return True
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        return False

    @property
    def suppressed(self) -> int:
        """Records held back in the current windows, over all templates."""
        return sum(w[2] for w in self._windows.values())
