"""Reducing a failing session to a minimal one that still shows the same clause.

Delta debugging over the steps (timing choices are steps, so they are shrunk like the rest),
then a simpler topology (one engine, one client, no coordinator; for the frontend role also plain
scripted engines), then simpler values in each remaining ADD (HTTP request), then the steps once
more; every candidate is replayed against a fresh peer. ``fails(candidate)`` is the only
judge: a candidate that passes by chance is simply not taken, so a flaky finding shrinks less but
never to a session that does not fail.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

from .session import Session

#: simpler values tried for each field of an ADD, in order
SIMPLER_ADD: tuple[dict[str, Any], ...] = (
    {"logprobs": None, "prompt_logprobs": None}, {"abort_immediately": False}, {"wave": None}, {"oversize": False},
    {"id_len": 8}, {"temperature": 0.0}, {"prompt_len": 1}, {"max_tokens": 2}, {"max_tokens": 32},
    {"max_tokens": 200}, {"client": 0}, {"engine": 0},
)
#: simpler values tried for each field of a frontend role's HTTP request, in order
SIMPLER_REQUEST: tuple[dict[str, Any], ...] = (
    {"logprobs": None}, {"named": None}, {"pin": None}, {"api": "completions"}, {"stream": False}, {"temperature": 0.0},
    {"prompt_len": 1}, {"max_tokens": 2}, {"max_tokens": 8}, {"max_tokens": 64},
)
#: per op, the simpler values tried
SIMPLER: dict[str, tuple[dict[str, Any], ...]] = {"add": SIMPLER_ADD, "request": SIMPLER_REQUEST}
#: simpler topologies, tried one change at a time
SIMPLER_TOPOLOGY: tuple[dict[str, Any], ...] = (
    {"engines": 1}, {"clients": 1}, {"coordinator": False}, {"form": "full"}, {"delay_ms": 0},
    {"abort_outputs": False}, {"error_after": None},
)


class Budget:
    """How many replays (and until when) a shrink may spend."""

    def __init__(self, runs: int, seconds: float) -> None:
        self.runs = runs
        self.deadline = time.monotonic() + seconds
        self.used = 0

    def left(self) -> bool:
        return self.used < self.runs and time.monotonic() < self.deadline


def shrink(session: Session, fails: Callable[[Session], bool], budget: Budget) -> Session:
    """The smallest session found, within ``budget``, for which ``fails`` still holds.

    ``session`` must be one that fails; ``fails`` is called with candidates only."""

    def check(candidate: Session) -> bool:
        if not budget.left():
            return False
        budget.used += 1
        return fails(candidate)

    best = _ddmin(session, check, budget)
    for simpler in SIMPLER_TOPOLOGY:
        topo = dataclasses.replace(best.topology, **simpler)
        if topo != best.topology and check(best.with_topology(topo)):
            best = best.with_topology(topo)
    simplified = False
    for i, step in enumerate(best.steps):
        for values in SIMPLER.get(step["op"], ()):
            if all(_no_simpler(step.get(k), v) for k, v in values.items()):
                continue
            steps = list(best.steps)
            steps[i] = {**step, **values}
            if check(best.with_steps(steps)):
                best, step, simplified = best.with_steps(steps), steps[i], True
    if simplified:  # simpler values may make more steps unnecessary
        best = _ddmin(best, check, budget)
    return best


def _no_simpler(current: Any, candidate: Any) -> bool:
    """Whether ``candidate`` is no simpler than ``current`` (the same, or a larger number)."""
    if current == candidate:
        return True
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (current, candidate))
    return numbers and current < candidate


def _ddmin(session: Session, check: Callable[[Session], bool], budget: Budget) -> Session:
    """Zeller's delta debugging, complements only: remove one of ``n`` chunks while the rest fails."""
    steps = list(session.steps)
    n = 2
    while len(steps) >= 2 and budget.left():
        size = math.ceil(len(steps) / n)
        for i in range(n):
            candidate = steps[:i * size] + steps[(i + 1) * size:]
            if candidate and check(session.with_steps(candidate)):
                steps, n = candidate, max(n - 1, 2)
                break
        else:
            if n >= len(steps):
                break
            n = min(len(steps), 2 * n)
    return session.with_steps(steps)
