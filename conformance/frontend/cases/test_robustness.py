"""Frontend-role robustness: a dead engine makes the frontend fail closed (runs last)."""

from __future__ import annotations

import asyncio

from ecp.conformance.frontend.cases._common import EXPECT_S, expect, held_script, open_held
from ecp.conformance.frontend.session import FrontendManager
from ecp.conformance.frontend.sse import drop_all
from ecp.conformance.outcomes import CaseTimeout, PeerCrashed, Violation
from ecp.conformance.registry import case


async def engine_dead_fails_closed(m: FrontendManager) -> None:
    """FE-ROB-1."""
    async with m.fresh(scripts=[held_script() for _ in range(m.cfg.engine_count)]) as fe:
        streams = await open_held(fe, 2 * fe.engine_count)
        try:
            await fe.engines[0].die()
            try:
                await fe.wait_health(lambda s: s != 200, EXPECT_S, "GET /health to stop answering 200")
            except CaseTimeout:
                raise Violation(f"GET /health still answers 200 {EXPECT_S:.0f} s after ENGINE_CORE_DEAD") from None
            except PeerCrashed:
                pass   # exiting is a way of failing closed
            ends = await asyncio.gather(*(s.read_to_end(EXPECT_S) for s in streams))
            hung = sum(1 for e in ends if e.timed_out)
            expect(not hung, f"{hung} of {len(streams)} open streams never ended after ENGINE_CORE_DEAD")
            clean = [e.finish_reasons for e in ends if not e.ended_with_error]
            expect(not clean, f"{len(clean)} open stream(s) ended normally ({clean[:2]}) after "
                              f"ENGINE_CORE_DEAD instead of with an error")
        finally:
            drop_all(streams)

@case("FE-ROB-1")
def test_engine_dead_fails_closed(frontends):
    frontends.run(engine_dead_fails_closed)
