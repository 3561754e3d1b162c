"""Frontend-role handshake cases: the frontend owns the handshake, the scripted engines join it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ecp.conformance.frontend.cases._common import NO_READY_WINDOW_S, SHORT_MAX_TOKENS, expect, unique
from ecp.conformance.frontend.script import EngineScript, default_ready_payload, minimal_ready_payload
from ecp.conformance.frontend.session import FrontendManager
from ecp.conformance.outcomes import CaseTimeout, PeerCrashed, Violation
from ecp.conformance.registry import case

#: The max_model_len of the shortest engine in FE-HS-5.
SMALL_MODEL_LEN = 64


async def init_addresses_reachable(m: FrontendManager) -> None:
    """FE-HS-1."""
    fe = await m.shared()
    for engine in fe.engines:
        init = engine.init
        expect(init is not None, f"engine {engine.rank} got no INIT")
        a = init.addresses
        expect(a.inputs and len(a.inputs) == len(a.outputs),
               f"engine {engine.rank}: INIT has {len(a.inputs)} inputs and {len(a.outputs)} outputs")
        for address in [*a.inputs, *a.outputs]:
            expect(address.startswith(("tcp://", "ipc://")),
                   f"engine {engine.rank}: INIT address {address!r} is neither tcp:// nor ipc://")
    for engine in fe.engines:
        reply = await fe.driver.complete(unique("reach"), SHORT_MAX_TOKENS,
                                         headers={"X-data-parallel-rank": str(engine.rank)})
        expect(reply.status_code == 200,
               f"a request pinned to engine {engine.rank} failed with HTTP {reply.status_code}: {reply.text[:200]}")
        expect(engine.recorder.adds(include_notices=False),
               f"engine {engine.rank} connected to the INIT addresses but never received a request "
               f"(a request pinned to it was answered without reaching it)")


async def _served_with_payload(m: FrontendManager, payload: dict[str, Any], what: str) -> None:
    try:
        async with m.fresh(engine_count=1, scripts=[EngineScript(ready_payload=payload)]) as fe:
            reply = await fe.driver.complete(unique("ready"), SHORT_MAX_TOKENS)
            expect(reply.status_code == 200,
                   f"after {what} the frontend answered a completion with HTTP {reply.status_code}: "
                   f"{reply.text[:200]}")
            expect(fe.engines[0].recorder.adds(include_notices=False),
                   f"after {what} the request never reached the engine")
    except PeerCrashed as exc:
        if exc is m.startup_failure:
            raise   # COMMAND never came up at all: not this payload's fault
        raise Violation(f"the frontend exited after {what}: {exc}") from None
    except CaseTimeout as exc:
        if exc is m.startup_failure:
            raise
        raise Violation(f"the frontend never became healthy after {what}: {exc}") from None


async def minimal_ready_payload_accepted(m: FrontendManager) -> None:
    """FE-HS-2."""
    await _served_with_payload(m, minimal_ready_payload(0, 1), "a ready payload with only the 17 required keys")


async def ready_payload_extra_keys(m: FrontendManager) -> None:
    """FE-HS-3."""
    payload = default_ready_payload(0, 1)
    payload["ecp_conformance_unknown_key"] = {"nested": [1, 2, 3], "text": "ignore me"}
    payload["kv_transfer_info"] = None
    await _served_with_payload(m, payload, "a ready payload with unknown extra keys")


async def max_model_len_is_minimum(m: FrontendManager) -> None:
    """FE-HS-5."""
    n = max(2, m.cfg.engine_count)
    scripts = []
    for rank in range(n):
        payload = default_ready_payload(rank, n)
        if rank == n - 1:   # the last engine is the short one: "the first engine's" is then wrong too
            payload["max_model_len"] = SMALL_MODEL_LEN
        scripts.append(EngineScript(ready_payload=payload))
    async with m.fresh(engine_count=n, scripts=scripts) as fe:
        lens = [default_ready_payload(r, n)["max_model_len"] for r in range(n - 1)] + [SMALL_MODEL_LEN]
        fits = await fe.driver.complete(unique("hs9"), SHORT_MAX_TOKENS)
        expect(fits.ok, f"engines reported max_model_len {lens}; a request that fits the minimum "
                        f"({SHORT_MAX_TOKENS} tokens) answered HTTP {fits.status_code}: {fits.text[:200]}")
        reply = await fe.driver.complete(unique("hs9"), SMALL_MODEL_LEN)
        too_long = [(e.rank, len(req.prompt_token_ids or []) + (req.sampling_params.max_tokens or 0))
                    for e in fe.engines for _, req in e.recorder.adds(include_notices=False)
                    if req.sampling_params is not None
                    and len(req.prompt_token_ids or []) + (req.sampling_params.max_tokens or 0) > SMALL_MODEL_LEN]
        expect(not too_long, f"engines reported max_model_len {lens}; the frontend admitted a request of "
                             f"{too_long[0][1] if too_long else 0} tokens (prompt + max_tokens) to engine "
                             f"{too_long[0][0] if too_long else '?'} (HTTP {reply.status_code}): it did not "
                             f"use the minimum, {SMALL_MODEL_LEN}")


async def no_ready_fails_clearly(m: FrontendManager) -> None:
    """FE-HS-4."""
    async with m.fresh(engine_count=1, scripts=[EngineScript(send_ready=False)], wait_healthy=False) as fe:
        deadline = time.monotonic() + NO_READY_WINDOW_S
        while time.monotonic() < deadline:
            if not fe.alive():
                code = fe.handle.exit_status()
                expect(code not in (0, None),
                       f"the frontend exited with status {code} (success) although engine 0 never sent READY")
                return
            status = await fe.driver.health()
            expect(status != 200, "GET /health answered 200 although engine 0 never sent READY")
            await asyncio.sleep(0.1)

@case("FE-HS-1")
def test_init_addresses_reachable(frontends):
    frontends.run(init_addresses_reachable)


@case("FE-HS-2")
def test_minimal_ready_payload(frontends):
    frontends.run(minimal_ready_payload_accepted)


@case("FE-HS-3")
def test_ready_payload_extra_keys(frontends):
    frontends.run(ready_payload_extra_keys)


@case("FE-HS-5")
def test_max_model_len_is_minimum(frontends):
    frontends.run(max_model_len_is_minimum)


@case("FE-HS-4")
def test_no_ready_fails_clearly(frontends):
    frontends.run(no_ready_fails_clearly)
