"""Frontend-role data-parallel waves (``ECP-DP-5``): the wave a frontend stamps on its ADDs.

Without a DP coordinator in INIT every ADD carries wave 0. With one, the harness's engines play
the wave protocol towards it: rank 0 starts a newer wave (``start_wave``), which a coordinator that
runs waves rebroadcasts to the other engines as START_DP_WAVE, then reports it complete
(``wave_complete``), which moves the coordinator to the next wave; the frontend must adopt the
wave its coordinator publishes and stamp it on the ADDs that follow.
"""

from __future__ import annotations

from ecp.conformance.frontend.cases._common import EXPECT_S, SHORT_MAX_TOKENS, adds_in_order, expect, unique
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance import capabilities
from ecp.conformance.outcomes import CaseTimeout
from ecp.conformance.registry import case
from ecp.spec import EngineCoreOutputs

#: How many completions FE-DP-1 sends at most while it waits for the new wave on the ADDs (the
#: frontend learns it from its coordinator asynchronously)
ADOPTION_REQUESTS = 20


async def _waves(fe: FrontendUnderTest, n: int) -> list[int]:
    """Send ``n`` completions one after the other; the current_wave of every ADD of the case so far."""
    for _ in range(n):
        reply = await fe.driver.complete(unique("wave"), SHORT_MAX_TOKENS)
        expect(reply.ok, f"a completion answered HTTP {reply.status_code}: {reply.text[:200]}")
    return [req.current_wave for _, req in adds_in_order(fe)]


async def waves_stamped(m: FrontendManager) -> None:
    """FE-DP-1."""
    fe = await m.shared()
    addresses = fe.engines[0].init.addresses
    if addresses.coordinator_output is None:
        # two requests with the frontend idle in between: a frontend that counts waves itself moves on
        waves = await _waves(fe, 2)
        expect(waves and all(w == 0 for w in waves),
               f"INIT names no DP coordinator, so every ADD carries current_wave 0; the ADDs carried {waves}")
        return
    fe.require_engines(2)
    waves = capabilities.get("frontend", "dp_waves")
    capabilities.require(waves, fe.cfg.lacks)
    first, other = fe.engines[0], fe.engines[1]
    start = max(await _waves(fe, 1))
    new = start + 1
    await first.send_to_coordinator(EngineCoreOutputs(engine_index=first.rank, start_wave=new))
    try:
        await fe.until(lambda: any(w == new for w, _ in other.start_waves), EXPECT_S,
                       f"the coordinator to rebroadcast start_wave {new} as START_DP_WAVE")
    except CaseTimeout:
        raise capabilities.missing(waves, f"engine {first.rank}'s start_wave {new} was not rebroadcast as "
                                          f"START_DP_WAVE within {EXPECT_S:.0f} s") from None
    await first.send_to_coordinator(EngineCoreOutputs(engine_index=first.rank, wave_complete=new))
    adopted = new + 1
    waves: list[int] = []
    for _ in range(ADOPTION_REQUESTS):
        waves = await _waves(fe, 1)
        if waves[-1] == adopted:
            break
    expect(waves[-1] == adopted,
           f"engine {first.rank} started wave {new} and reported it complete, so the coordinator moved to wave "
           f"{adopted}; {ADOPTION_REQUESTS} ADDs later the frontend still stamps {waves[-1]} (all: {waves})")
    # the wave stays until the coordinator moves it: more requests, one after the other, change nothing
    waves = await _waves(fe, 2)
    expect(waves[-2:] == [adopted, adopted],
           f"the coordinator's wave is {adopted} and no engine reported it complete; the frontend's next ADDs "
           f"carried {waves[-2:]} (all: {waves})")
    expect(waves == sorted(waves), f"the frontend's ADDs went back to an older wave: {waves}")


@case("FE-DP-1")
def test_waves_stamped(frontends):
    frontends.run(waves_stamped)
