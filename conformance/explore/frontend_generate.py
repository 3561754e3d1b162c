"""Random frontend-role sessions, drawn from a seed.

A session programs the scripted engines (output form, step delay, ABORT outputs, a stall after a
few tokens for longer requests) and sends concurrent HTTP requests -- completions and chat,
streaming or not, with varied parameters and sometimes a shared ``X-Request-Id`` -- drops streams
right after their head or after their first event, calls the explicit-abort route and utility
routes, and waits now and then (the timing choices). The executor skips a step that has nothing
to act on (a drop of a request that is not a stream). Some requests are pinned to a rank
(``X-data-parallel-rank``), some sessions drop a crowd of streams at once, and in some the engines
end every request longer than a few tokens with an ERROR output; these are drawn from a stream of
their own, so the rest of the session is the same either way.

Sessions are drawn for the release the scripted engines speak (``--vllm``): a utility route whose
method the release lacks is not called, and engines that end requests with ERROR are drawn only
where the release's ERROR output carries its RequestError (what the judge of such a session
cites, ``ECP-OUT-5``). What is left out is drawn all the same, so vLLM 0.33's sessions are
the same as before releases were told apart.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from ..frontend.output_forms import FORMS
from .session import ROUTES, Session, Topology

#: the utility method each utility route makes the frontend call on its engines (the others call none)
ROUTE_METHODS = {"is_sleeping": "is_sleeping", "reset_prefix_cache": "reset_prefix_cache"}

MAX_TOKENS = (1, 2, 3, 8, 16, 64)
PROMPT_LENS = (1, 3, 12, 40)
LOGPROBS = (None, None, None, 0, 2)
#: (ms) between the scripted engines' token steps
DELAYS_MS = (0, 0, 1, 5, 20)
#: after how many tokens requests with a larger ``max_tokens`` stall (None: none stalls)
HOLDS = (None, 2, 2, 4)


def draw_frontend(seed: int, max_engines: int = 1, max_steps: int = 16, profile: Any = None) -> Session:
    """The frontend-role session of ``seed`` for a frontend launched with up to ``max_engines`` engines
    of ``profile``'s release (:class:`ecp.spec.profile.Profile`; ``None``: vLLM 0.33)."""
    routes = sorted(ROUTES)
    errors = True
    if profile is not None:
        routes = [name for name in routes
                  if name not in ROUTE_METHODS or ROUTE_METHODS[name] in profile.utility_methods]
        errors = profile.has_field("EngineCoreOutput", "error")
    r = random.Random(seed)
    engines = max_engines if max_engines == 1 or r.random() < 0.7 else r.randint(1, max_engines)
    topo = Topology(engines=engines, form=r.choice(sorted(FORMS)), delay_ms=r.choice(DELAYS_MS),
                    abort_outputs=r.random() < 0.3, hold=r.choice(HOLDS))
    steps: list[dict[str, Any]] = []
    refs = 0
    streams: list[int] = []
    for _ in range(r.randint(2, max_steps)):
        roll = r.random()
        if roll < 0.45 or not refs:
            step = _request(r, refs)
            steps.append(step)
            if step["stream"]:
                streams.append(refs)
            refs += 1
        elif roll < 0.62 and streams:
            steps.append({"op": "drop", "ref": r.choice(streams), "after": r.choice(("open", "first"))})
        elif roll < 0.72:
            targets = r.sample(streams, k=min(len(streams), r.choice((1, 1, 2))))
            if not targets or r.random() < 0.2:
                targets.append(-1)
            steps.append({"op": "abort", "targets": targets})
        elif roll < 0.82:
            route = r.choice(sorted(ROUTES))  # drawn either way: the rest of the session stays the same
            steps.append({"op": "route", "route": route} if route in routes else {"op": "wait", "until": "idle"})
        else:
            until = r.choice(("first", "end", "end", "idle"))
            step = {"op": "wait", "until": until}
            if until != "idle":
                step["ref"] = r.randrange(refs)
            steps.append(step)
    forms = random.Random(f"frontend-forms-{seed}")
    _routing_and_crowds(forms, topo, steps)
    if forms.random() < ERROR_P:
        error_after = forms.choice(ERROR_AFTER)
        if errors:
            topo = dataclasses.replace(topo, error_after=error_after)
    return Session(topo, steps, seed, role="frontend")


#: the share of requests pinned to a rank, and of sessions given a crowd drop
PIN_P = 0.25
CROWD_P = 0.3
#: the share of sessions whose engines fail requests with ERROR, and after how many tokens
ERROR_P = 0.15
ERROR_AFTER = (0, 1, 3)


def _routing_and_crowds(r: random.Random, topo: Topology, steps: list[dict[str, Any]]) -> None:
    """Pin some requests to a rank; in some sessions, drop every stream opened so far at once, at
    a point where at least two are open."""
    streams: list[tuple[int, int]] = []  # (step index, ref)
    for i, step in enumerate(steps):
        if step["op"] == "request":
            step["pin"] = r.randrange(topo.engines) if r.random() < PIN_P else None
            if step["stream"]:
                streams.append((i, step["ref"]))
    if len(streams) < 2 or r.random() >= CROWD_P:
        return
    at = r.randint(streams[1][0] + 1, len(steps))
    refs = [ref for i, ref in streams if i < at]
    steps.insert(at, {"op": "crowd", "refs": refs, "after": r.choice(("open", "first"))})


def _request(r: random.Random, ref: int) -> dict[str, Any]:
    roll = r.random()
    # a shared X-Request-Id now and then: the frontend must still give each request its own internal id
    named = None if roll < 0.5 else "xr-shared" if roll < 0.6 else f"xr{ref}"
    return {"op": "request", "ref": ref, "api": r.choice(("completions", "completions", "chat")),
            "stream": r.random() < 0.6, "max_tokens": r.choice(MAX_TOKENS), "prompt_len": r.choice(PROMPT_LENS),
            "temperature": r.choice((0.0, 0.0, 0.7)), "logprobs": r.choice(LOGPROBS), "named": named}
