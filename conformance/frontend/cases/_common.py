"""What the frontend-role cases share: budgets, the scripted engines' programming, held streams.

Requests are correlated with what the engines saw without knowing the
frontend's tokenizer or id scheme: engines *hold* long requests after their
first tokens (so the set of requests an engine is running is exactly the set
of open streams it owns), and stop strings are planted by making engines echo
the prompt. Every wait is bounded and event- or poll-driven.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ecp.conformance.frontend.script import EngineScript
from ecp.conformance.frontend.session import POLL_S, FrontendUnderTest
from ecp.conformance.frontend.sse import SseStream, drop_all
from ecp.conformance.outcomes import CaseTimeout, CaseFailure

HELD_MAX_TOKENS = 64
#: ``max_tokens`` of requests that run to completion at once.
SHORT_MAX_TOKENS = 2
#: How long an auto-abort may take (issue 7: "a single dropped stream is aborted within 1 s").
PROMPT_ABORT_S = 1.0
#: How long the harness waits for something that must happen, before calling it missing.
EXPECT_S = 3.0
#: The model name no frontend serves: requests naming it are rejected before admission.
NO_SUCH_MODEL = "ecp-conformance-no-such-model"


def expect(condition: Any, message: str, clause: str | None = None) -> None:
    if not condition:
        raise CaseFailure(message, clause)


async def expect_refused(fe: FrontendUnderTest, what: str, window: float, clause: str | None = None) -> str:
    """The frontend does not serve after ``what``: within ``window`` s it exits with an error status
    or keeps GET /health from answering 200 (a handshake error, ``ECP-HS-7``/``-8``/``-10``/``-11``).
    Returns how it refused, for the transcript."""
    deadline = time.monotonic() + window
    while True:
        if not fe.alive():
            code = fe.handle.exit_status() if fe.handle is not None else None
            expect(code not in (0, None), f"the frontend exited with status {code} (success) although {what}",
                   clause)
            return f"exited with status {code}"
        status = await fe.driver.health()
        expect(status != 200, f"GET /health answered 200 although {what}", clause)
        if time.monotonic() >= deadline:
            return f"stayed unhealthy for {window:.1f} s"
        await asyncio.sleep(POLL_S)   # neither the process nor /health has an event to wait on


def unique(tag: str) -> str:
    return f"ecp-{tag}-{uuid.uuid4().hex[:12]}"


def held_script(**overrides: Any) -> EngineScript:
    """Requests with ``max_tokens > SHORT_MAX_TOKENS`` stall after their first token(s)."""
    return EngineScript(hold_after=overrides.pop("hold_after", SHORT_MAX_TOKENS), **overrides)


def program(fe: FrontendUnderTest, script: EngineScript) -> None:
    for engine in fe.engines:
        engine.script = script


def check_decode_errors(fe: FrontendUnderTest) -> None:
    for engine in fe.engines:
        for rec in engine.recorder.decode_errors():
            err = rec.error
            raise CaseFailure(f"engine {engine.rank} received a frame that does not decode: {err}",
                            clause=err.clause)


def open_count(fe: FrontendUnderTest) -> int:
    return sum(len(e.generation.active) for e in fe.engines)


async def wait_open(fe: FrontendUnderTest, n: int, what: str) -> None:
    await fe.until(lambda: open_count(fe) >= n, EXPECT_S + n / 200, f"{n} {what} to reach the engines")


async def open_held(fe: FrontendUnderTest, n: int, *, chat: bool = False,
                    headers: dict[str, str] | None = None) -> list[SseStream]:
    """Open ``n`` streams at once and return when each delivered its first token."""
    before = open_count(fe)

    async def one(i: int) -> SseStream:
        if chat:
            return await fe.driver.stream_chat(f"ecp held chat {i}", HELD_MAX_TOKENS, headers=headers)
        return await fe.driver.stream_completion(f"ecp held stream {i}", HELD_MAX_TOKENS, headers=headers)

    opened = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    streams = [s for s in opened if isinstance(s, SseStream)]
    errors = [e for e in opened if not isinstance(e, SseStream)]
    if errors:
        drop_all(streams)
        if all(isinstance(e, (asyncio.TimeoutError, TimeoutError, CaseTimeout)) for e in errors):
            raise CaseTimeout(f"{len(errors)} of {n} streaming requests got no response head")
        raise CaseFailure(f"{len(errors)} of {n} streaming requests failed: {errors[0]!r}", "ECP-REQ-1")
    bad = [s.status_code for s in streams if s.status_code != 200]
    if bad:
        drop_all(streams)
        raise CaseFailure(f"{len(bad)} of {n} streaming requests were refused (HTTP {bad[0]})", "ECP-REQ-1")
    try:
        await asyncio.gather(*(s.first_token(EXPECT_S + n / 200) for s in streams))
    except (asyncio.TimeoutError, TimeoutError):
        drop_all(streams)
        raise CaseTimeout(f"not every one of {n} streams delivered its first token") from None
    except EOFError as exc:
        drop_all(streams)
        raise CaseFailure(f"a held stream ended early: {exc}", "ECP-OUT-1") from None
    await wait_open(fe, before + n, "held requests")
    return streams


def adds_in_order(fe: FrontendUnderTest) -> list[tuple[int, Any]]:
    """(rank, request) of every ADD (notices excluded), in arrival order across engines."""
    out = []
    for engine in fe.engines:
        for rec, req in engine.recorder.adds(include_notices=False):
            out.append((rec.t, engine.rank, req))
    return [(rank, req) for _, rank, req in sorted(out, key=lambda x: x[0])]


def notices(fe: FrontendUnderTest) -> list[tuple[int, Any]]:
    return [(e.rank, req) for e in fe.engines for _, req in e.recorder.adds() if req.abort_immediately]
