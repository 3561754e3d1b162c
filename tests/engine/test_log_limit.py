"""RepeatLimiter: a flood of one log template is cut to a burst per window and the rest counted."""

from __future__ import annotations

import logging

import pytest

from ecp.reference.engine.log_limit import RepeatLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("ecp.engine.bad_input", level, __file__, 1, msg, ("x",), None)


def test_burst_per_template_then_a_count_on_the_next_window():
    clock = Clock()
    limiter = RepeatLimiter(burst=3, interval=10.0, clock=clock)
    passed = [limiter.filter(_record("bad %s")) for _ in range(50)]
    assert passed == [True] * 3 + [False] * 47 and limiter.suppressed == 47
    assert limiter.filter(_record("other %s"))  # another template has its own budget
    clock.now = 10.0
    first = _record("bad %s")
    assert limiter.filter(first)
    assert first.getMessage() == "bad x (and 47 more like it in the last 10 s)"
    assert limiter.suppressed == 0


def test_errors_always_pass():
    limiter = RepeatLimiter(burst=1, interval=10.0, clock=Clock())
    assert all(limiter.filter(_record("fatal %s", logging.ERROR)) for _ in range(20))


@pytest.mark.parametrize("burst, interval", [(0, 1.0), (1, 0.0)])
def test_bad_settings_are_refused(burst, interval):
    with pytest.raises(ValueError):
        RepeatLimiter(burst=burst, interval=interval)
