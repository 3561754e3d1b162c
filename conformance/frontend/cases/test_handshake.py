"""Frontend-role handshake cases: the frontend owns the handshake, the scripted engines join it."""

from __future__ import annotations

import asyncio
from typing import Any

from ecp.conformance.frontend.cases._common import EXPECT_S, SHORT_MAX_TOKENS, expect, expect_refused, unique
from ecp.conformance.frontend.script import (
    HANDSHAKE_FAULTS, EngineScript, default_ready_payload, minimal_ready_payload,
)
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.outcomes import CaseTimeout, PeerCrashed, CaseFailure
from ecp.conformance.registry import case

#: The max_model_len of the shortest engine in FE-HS-5.
SMALL_MODEL_LEN = 64
#: What each handshake fault of FE-HS-6 is, in words.
HANDSHAKE_FAULT_WORDS = {
    "hello-twice": "engine 1 said HELLO again after its INIT",
    "ready-first": "engine 1 said READY before HELLO",
    "unknown-status": "engine 1 sent a handshake message with the unknown status \"HOWDY\"",
}
#: The ready payloads' LoRA capability in FE-HS-8: (supports_lora, max_loras) of rank 0, of the others.
LORA_MISMATCH = ((True, 4), (False, 0))


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
        raise CaseFailure(f"the frontend exited after {what}: {exc}") from None
    except CaseTimeout as exc:
        if exc is m.startup_failure:
            raise
        raise CaseFailure(f"the frontend never became healthy after {what}: {exc}") from None


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
        # ECP-HTTP-8: lowering max_tokens to the room left (vLLM 0.33) and refusing with a 400 (ecp serve)
        # both keep to the minimum; nothing else does
        expect(reply.ok or reply.status_code == 400,
               f"engines reported max_model_len {lens}; a request whose prompt + max_tokens exceeds the minimum "
               f"was answered HTTP {reply.status_code}, neither 200 (max_tokens lowered) nor 400 (refused): "
               f"{reply.text[:200]}", "ECP-HTTP-8")
        # a prompt that alone fills the minimum leaves no room for one token: refused with a 400 (each
        # word is at least one token), and nothing of it reaches an engine
        before = sum(len(e.recorder.adds(include_notices=False)) for e in fe.engines)
        no_room = await fe.driver.complete(" ".join([unique("room")] * (2 * SMALL_MODEL_LEN)), 1)
        after = sum(len(e.recorder.adds(include_notices=False)) for e in fe.engines)
        expect(no_room.status_code == 400 and after == before,
               f"engines reported max_model_len {lens}; a prompt of at least {2 * SMALL_MODEL_LEN} tokens, longer "
               f"than the minimum, was answered HTTP {no_room.status_code} and reached an engine "
               f"{after - before} time(s); it is refused with a 400 and never sent: {no_room.text[:200]}",
               "ECP-HTTP-8")


async def no_ready_fails_clearly(m: FrontendManager) -> None:
    """FE-HS-4."""
    window = await m.refusal_window()
    async with m.fresh(engine_count=1, scripts=[EngineScript(send_ready=False)], wait_healthy=False) as fe:
        await expect_refused(fe, "engine 0 never sent READY", window)


async def _until(fe: FrontendUnderTest, predicate: Any, timeout: float) -> bool:
    """Wait until ``predicate()`` or the frontend's exit (False: neither within ``timeout``)."""
    try:
        await fe.until(lambda: predicate() or not fe.alive(), timeout, "the handshake to move on")
    except CaseTimeout:
        return False
    except PeerCrashed:
        return True
    return True


async def _refuses_handshake_fault(m: FrontendManager, fault: str, window: float) -> None:
    """Engine 0 does a correct handshake, engine 1 breaks the order with ``fault`` inside an otherwise
    correct one: the frontend must not serve (its handshake fails, ``ECP-HS-7``)."""
    what = HANDSHAKE_FAULT_WORDS[fault]
    scripts = [EngineScript(), EngineScript(handshake_fault=fault)]
    async with m.fresh(engine_count=2, scripts=scripts, wait_healthy=False, wait_registered=False) as fe:
        good, bad = fe.engines
        # the frontend reads its handshake socket once engine 0 got INIT; engine 1's message is queued
        # there by then (or the frontend already exited on it)
        if not await _until(fe, lambda: good.init is not None, m.cfg.startup_timeout_s):
            raise CaseTimeout(f"engine 0 got no INIT within {m.cfg.startup_timeout_s:.0f} s of the launch")
        await _until(fe, bad.registered.is_set, EXPECT_S)
        await expect_refused(fe, what, window)


async def handshake_order_errors(m: FrontendManager) -> None:
    """FE-HS-6: each fault in its own launch, the launches side by side."""
    window = await m.refusal_window()
    # every launch ends (and is closed) before the case does, whichever fails first
    results = await asyncio.gather(*(_refuses_handshake_fault(m, fault, window) for fault in HANDSHAKE_FAULTS),
                                   return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def unexpected_identity_rejected(m: FrontendManager) -> None:
    """FE-HS-7."""
    window = await m.refusal_window()
    n = m.cfg.engine_count
    scripts = [EngineScript(send_ready=r != 0) for r in range(n)]   # engine 0 holds the handshake open
    async with m.fresh(engine_count=n, scripts=scripts, wait_healthy=False, wait_registered=False) as fe:
        stranger = fe.stranger(n)   # rank n: the configured ranks are 0..n-1
        what = f"an engine with rank {n} (identity {n.to_bytes(2, 'little').hex()}), outside 0..{n - 1}, said HELLO"
        # the frontend has read the stranger's HELLO once it answered it, or exited, or the legitimate
        # engines are registered and EXPECT_S more passed (a frontend that ignores it answers nothing)
        registered = lambda: all(e.registered.is_set() for e in fe.engines)  # noqa: E731
        if not await _until(fe, lambda: stranger.init is not None or registered(), m.cfg.startup_timeout_s):
            raise CaseTimeout(f"the configured engines did not finish their handshake within "
                              f"{m.cfg.startup_timeout_s:.0f} s of the launch")
        await _until(fe, lambda: stranger.init is not None, EXPECT_S)
        expect(stranger.init is None, f"{what}; the frontend answered it with INIT instead of rejecting it")
        if not fe.alive():
            await expect_refused(fe, what, window)
            return
        await fe.engines[0].send_ready()
        try:
            await fe.serving(window)   # and the model it serves, which the request below names (ECP-HTTP-4)
        except (CaseTimeout, PeerCrashed):
            await expect_refused(fe, what, 0.0)   # it refused the whole deployment: that rejects it too
            return
        reply = await fe.driver.complete(unique("hs11"), SHORT_MAX_TOKENS)
        expect(reply.ok, f"{what} and was ignored; then a completion answered HTTP {reply.status_code}: "
                         f"{reply.text[:200]}")
        expect(stranger.init is None and not stranger.recorder.adds(),
               f"{what}; the frontend later accepted it (INIT or a request reached it)")


async def lora_disagreement_rejected(m: FrontendManager) -> None:
    """FE-HS-8."""
    m.release.require(field=("EngineCoreReadyResponse", "supports_lora"))  # no LoRA in the ready payload before 0.29
    window = await m.refusal_window()
    n = max(2, m.cfg.engine_count)
    scripts = []
    for rank in range(n):
        payload = default_ready_payload(rank, n)
        payload["supports_lora"], payload["max_loras"] = LORA_MISMATCH[0 if rank == 0 else 1]
        scripts.append(EngineScript(ready_payload=payload))
    async with m.fresh(engine_count=n, scripts=scripts, wait_healthy=False, wait_registered=False) as fe:
        if not await _until(fe, lambda: all(e.registered.is_set() for e in fe.engines), m.cfg.startup_timeout_s):
            raise CaseTimeout(f"the engines did not finish their handshake within {m.cfg.startup_timeout_s:.0f} s")
        await expect_refused(fe, f"the engines' ready payloads disagree on LoRA capability: rank 0 says "
                                 f"(supports_lora, max_loras) = {LORA_MISMATCH[0]}, the others {LORA_MISMATCH[1]}",
                             window)

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


@case("FE-HS-6")
def test_handshake_order_errors(frontends):
    frontends.run(handshake_order_errors)


@case("FE-HS-7")
def test_unexpected_identity_rejected(frontends):
    frontends.run(unexpected_identity_rejected)


@case("FE-HS-8")
def test_lora_disagreement_rejected(frontends):
    frontends.run(lora_disagreement_rejected)
