"""Frontend-role output cases: what the frontend does with outputs it did not expect."""

from __future__ import annotations

from ecp.conformance.frontend.cases._common import EXPECT_S, SHORT_MAX_TOKENS, expect, program
from ecp.conformance.frontend.script import EngineScript
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.registry import case

#: tokens a request runs before its engine ends it with ERROR (FE-OUT-2)
ERROR_AFTER = 1


async def _still_serving(fe: FrontendUnderTest, what: str, clause: str) -> None:
    """A completion finishes normally and /health answers 200 (the frontend did not fail)."""
    program(fe, EngineScript())
    reply = await fe.driver.complete("ecp still serving", SHORT_MAX_TOKENS)
    expect(reply.ok, f"after {what}, a plain completion answered HTTP {reply.status_code}: {reply.text[:200]}",
           clause)
    status = await fe.driver.health()
    expect(status == 200, f"after {what}, GET /health answered {status}", clause)


async def unknown_ids_dropped(m: FrontendManager) -> None:
    """FE-OUT-1."""
    fe = await m.shared()
    program(fe, EngineScript(stray_outputs=True))
    for stream in (False, True):
        what = "outputs for an id it never sent"
        if stream:
            s = await fe.driver.stream_completion("ecp stray stream", SHORT_MAX_TOKENS)
            expect(s.status_code == 200, f"a streaming completion answered HTTP {s.status_code}: {s.text[:200]}")
            end = await s.read_to_end(EXPECT_S)
            expect(not end.timed_out and not end.ended_with_error,
                   f"the engine also sent {what}; the stream of the request it served ended with "
                   f"{end.transport_error or end.error_events[:1] or end.finish_reasons or 'nothing'}")
        else:
            reply = await fe.driver.complete("ecp stray", SHORT_MAX_TOKENS)
            expect(reply.ok, f"the engine also sent {what}; the request it served answered HTTP "
                             f"{reply.status_code}: {reply.text[:200]}")
    await _still_serving(fe, "outputs for ids it never sent", "ECP-OUT-9")


async def error_output_reaches_client(m: FrontendManager) -> None:
    """FE-OUT-2."""
    fe = await m.shared()
    program(fe, EngineScript(error_after=ERROR_AFTER))
    reply = await fe.driver.complete("ecp engine error", 8)
    finish = None
    if reply.ok and isinstance(reply.body, dict):
        finish = [c.get("finish_reason") for c in reply.body.get("choices") or [] if isinstance(c, dict)]
    expect(not reply.ok or "error" in (finish or []) or (isinstance(reply.body, dict) and "error" in reply.body),
           f"the engine ended the request with ERROR (RequestError); the non-streaming client got HTTP "
           f"{reply.status_code} with finish_reason {finish}: {reply.text[:200]}")
    stream = await fe.driver.stream_completion("ecp engine error stream", 8)
    if stream.status_code == 200:
        end = await stream.read_to_end(EXPECT_S)
        expect(not end.timed_out, f"the engine ended the request with ERROR; the stream never ended "
                                  f"within {EXPECT_S:g} s")
        expect(end.ended_with_error, f"the engine ended the request with ERROR (RequestError); the stream "
                                     f"ended normally with finish_reason {end.finish_reasons}")
    else:
        stream.drop()
    m.mark_dirty()   # a frontend may count engine errors: later cases start from a clean launch


@case("FE-OUT-1")
def test_unknown_ids_dropped(frontends):
    frontends.run(unknown_ids_dropped)


@case("FE-OUT-2")
def test_error_output_reaches_client(frontends):
    frontends.run(error_output_reaches_client)
