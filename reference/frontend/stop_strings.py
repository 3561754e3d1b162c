"""Incremental stop-string matching (frontend side, as both vLLM frontends do).

The engine never sees stop strings as such (it only sees them listed in
``SamplingParams.stop``); the frontend matches them on the detokenized text,
across token boundaries, and then auto-aborts the engine request with cause
``stop_string_matched`` (``ECP-ABORT-7``).
"""

from __future__ import annotations

from typing import Sequence


class StopStringMatcher:
    """Feed text deltas; get back what may be shown and whether a stop matched.

    Text that could still be the beginning of a stop string is held back
    (at most ``max(len(stop)) - 1`` characters), so a match that spans deltas
    is found and the stop string itself never leaks to the client unless
    ``include_stop_str_in_output`` is set. After a match the matcher is
    finished and ignores further input.
    """

    def __init__(self, stops: Sequence[str], include_stop_str_in_output: bool = False) -> None:
        self.stops = [s for s in stops if s] if stops else []
        self.include = include_stop_str_in_output
        self._hold = max(map(len, self.stops)) - 1 if self.stops else 0
        self._pending = ""
        self.matched: str | None = None

    def feed(self, delta: str) -> str:
        """Return the text releasable now. Check :attr:`matched` afterwards."""
        if self.matched is not None:
            return ""
        if not self.stops:
            return delta
        buf = self._pending + delta
        best: tuple[int, str] | None = None
        for stop in self.stops:
            pos = buf.find(stop)
            if pos != -1 and (best is None or pos < best[0]):
                best = (pos, stop)
        if best is not None:
            pos, stop = best
            self.matched = stop
            self._pending = ""
            return buf[: pos + len(stop)] if self.include else buf[:pos]
        cut = max(len(buf) - self._hold, 0)
        self._pending = buf[cut:]
        return buf[:cut]

    def flush(self) -> str:
        """The generation ended without a match: release what was held back."""
        out, self._pending = self._pending, ""
        return out if self.matched is None else ""
