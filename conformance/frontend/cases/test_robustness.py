"""Frontend-role robustness: a dead engine makes the frontend fail closed (runs last)."""

from __future__ import annotations

import asyncio

from ecp.conformance.frontend.cases._common import EXPECT_S, expect, held_script, open_held
from ecp.conformance.frontend.session import FrontendManager
from ecp.conformance.frontend.sse import drop_all
from ecp.conformance.outcomes import CaseTimeout, PeerCrashed, CaseFailure
from ecp.conformance.registry import case


async def engine_dead_fails_closed(m: FrontendManager) -> None:
    """FE-ROB-1."""
    async with m.fresh(scripts=[held_script() for _ in range(m.cfg.engine_count)]) as fe:
        # two streams pinned to every engine: ENGINE_CORE_DEAD names no engine (ECP-OUT-8), so the other
        # engines' streams must fail too
        streams = []
        try:
            for engine in fe.engines:
                streams += await open_held(fe, 2, headers={"X-data-parallel-rank": str(engine.rank)})
            await fe.engines[0].die()
            try:
                await fe.wait_health(lambda s: s != 200, EXPECT_S, "GET /health to stop answering 200")
            except CaseTimeout:
                raise CaseFailure(f"GET /health still answers 200 {EXPECT_S:.0f} s after ENGINE_CORE_DEAD") from None
            except PeerCrashed:
                pass   # exiting is a way of failing closed
            ends = await asyncio.gather(*(s.read_to_end(EXPECT_S) for s in streams))
            hung = [i // 2 for i, e in enumerate(ends) if e.timed_out]
            expect(not hung, f"{len(hung)} of {len(streams)} open streams (pinned to engines {sorted(set(hung))}) "
                             f"never ended after ENGINE_CORE_DEAD from engine 0")
            clean = [(i // 2, e.finish_reasons) for i, e in enumerate(ends) if not e.ended_with_error]
            expect(not clean, f"{len(clean)} open stream(s) ended normally after ENGINE_CORE_DEAD from engine 0 "
                              f"instead of with an error (engine, finish reasons: {clean[:3]}); the frame names "
                              f"no engine, so every engine's requests fail")
        finally:
            drop_all(streams)

@case("FE-ROB-1")
def test_engine_dead_fails_closed(frontends):
    frontends.run(engine_dead_fails_closed)
