"""Frontend-role DP aggregation cases: utilities fan out and aggregate per method."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ecp.conformance.frontend.cases._common import EXPECT_S, expect
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.outcomes import PeerCrashed, CaseFailure
from ecp.conformance.registry import case
from ecp.spec.http import IsSleepingAnswer, ResetPrefixCacheAnswer, SleepAnswer, WakeUpAnswer

#: A u64 call id no frontend issues: not uuid1-derived (the Python frontend's ids are the top 64 bits of
#: a uuid1, whose bits 12-15 hold the version, 1; here they are F), far above vllm-rs's sequential ids
#: and above the reference client's 63-bit ones.
UNKNOWN_CALL_ID = 0xFFFF_FFFF_FFFF_FFFE
#: The method FE-UTIL-6 calls through POST /collective_rpc (the scripted engines answer any method).
RPC_METHOD = "ecp_conformance_echo"


def _answers(fe: FrontendUnderTest, method: str, values: list[Any]) -> None:
    for engine, value in zip(fe.engines, values):
        engine.script.utility_answers[method] = value


async def is_sleeping_disagreement_is_error(m: FrontendManager) -> None:
    """FE-UTIL-1."""
    fe = await m.shared()
    fe.require_dev_endpoints()
    fe.require_engines(2)
    for first in (True, False):
        values = [first] + [not first] * (fe.engine_count - 1)
        _answers(fe, "is_sleeping", values)
        reply = await fe.driver.request("GET", "/is_sleeping")
        expect(not reply.ok, f"engines answered is_sleeping {values} and GET /is_sleeping returned "
                             f"HTTP {reply.status_code} {reply.text[:100]}: one engine's answer, not an error")


async def is_sleeping_agreement(m: FrontendManager) -> None:
    """FE-UTIL-2."""
    fe = await m.shared()
    fe.require_dev_endpoints()
    for value in (True, False):
        _answers(fe, "is_sleeping", [value] * fe.engine_count)
        reply = await fe.driver.request("GET", "/is_sleeping")
        expect(reply.ok and isinstance(reply.body, dict) and reply.body.get("is_sleeping") is value,
               f"every engine answered is_sleeping {value}; GET /is_sleeping returned HTTP "
               f"{reply.status_code} {reply.text[:100]}")


async def reset_prefix_cache_and(m: FrontendManager) -> None:
    """FE-UTIL-3."""
    fe = await m.shared()
    fe.require_dev_endpoints()
    _answers(fe, "reset_prefix_cache", [True] * fe.engine_count)
    reply = await fe.driver.request("POST", "/reset_prefix_cache")
    expect(reply.ok and isinstance(reply.body, dict) and reply.body.get("success") is True,
           f"every engine reset its prefix cache; POST /reset_prefix_cache returned HTTP {reply.status_code} "
           f"{reply.text[:100]}")
    if fe.engine_count < 2:
        return
    for failing in range(fe.engine_count):
        values = [i != failing for i in range(fe.engine_count)]
        _answers(fe, "reset_prefix_cache", values)
        reply = await fe.driver.request("POST", "/reset_prefix_cache")
        said_true = reply.ok and isinstance(reply.body, dict) and reply.body.get("success") is True
        expect(not said_true, f"engines answered reset_prefix_cache {values}; the frontend reported success")


async def utility_reaches_every_engine(m: FrontendManager) -> None:
    """FE-UTIL-4."""
    fe = await m.shared()
    fe.require_dev_endpoints()
    # every engine answers as the scripts do by default (wake_up and reset_prefix_cache true): each route
    # answers 200 with the body spec/PROTOCOL.md section 14 gives it (ECP-HTTP-9, ECP-HTTP-10)
    calls = [("POST", "/sleep", {"level": 1}, "sleep", SleepAnswer, {"status": "sleeping", "level": 1}),
             ("POST", "/wake_up", None, "wake_up", WakeUpAnswer, {"status": "awake"}),
             ("GET", "/is_sleeping", None, "is_sleeping", IsSleepingAnswer, {}),
             ("POST", "/reset_prefix_cache", None, "reset_prefix_cache", ResetPrefixCacheAnswer, {"success": True})]
    for http_method, path, params, method, shape, values in calls:
        reply = await fe.driver.request(http_method, path, params=params)
        expect(reply.ok, f"{http_method} {path} answered HTTP {reply.status_code}: {reply.text[:100]}")
        missed = [e.rank for e in fe.engines if not e.recorder.utilities(method)]
        expect(not missed, f"{http_method} {path}: utility {method!r} never reached engine(s) {missed}")
        try:
            answer = msgspec.to_builtins(msgspec.convert(reply.body, shape))
        except msgspec.ValidationError as exc:
            raise CaseFailure(f"{http_method} {path} answered HTTP {reply.status_code} with {reply.text[:100]!r}, not "
                            f"the body of {shape.__name__} ({exc})", "ECP-HTTP-9") from None
        wrong = {k: answer.get(k) for k, v in values.items() if answer.get(k) != v}
        expect(not wrong, f"every engine answered {method}; {http_method} {path} answered {reply.text[:100]!r}, "
                          f"not {values}", "ECP-HTTP-10" if method == "reset_prefix_cache" else "ECP-HTTP-9")

async def reserved_call_ids_dropped(m: FrontendManager) -> None:
    """FE-UTIL-5."""
    fe = await m.shared()
    fe.require_dev_endpoints()
    for engine in fe.engines:
        engine.script.notice_call_ids = (-1, -2)
    reply = await fe.driver.request("GET", "/is_sleeping")
    expect(reply.ok and isinstance(reply.body, dict) and reply.body.get("is_sleeping") is False,
           f"each engine sent utility replies with call ids -1 and -2 before its answer; GET /is_sleeping "
           f"returned HTTP {reply.status_code} {reply.text[:100]}")
    for engine in fe.engines:
        engine.script.notice_call_ids = ()
    status = await fe.driver.health()
    expect(status == 200, f"after utility replies with reserved call ids, GET /health answered {status}")


async def collective_rpc_flattened(m: FrontendManager) -> None:
    """FE-UTIL-6."""
    fe = await m.shared()
    fe.require_collective_rpc()
    fe.require_engines(2)
    lists = [[f"ecp-rank{e.rank}-{i}" for i in range(e.rank % 2 + 1)] for e in fe.engines]   # 1 or 2 each
    _answers(fe, "collective_rpc", lists)
    reply = await fe.driver.request("POST", "/collective_rpc", json_body={"method": RPC_METHOD, "args": []})
    expect(reply.ok, f"POST /collective_rpc answered HTTP {reply.status_code}: {reply.text[:200]}")
    flat = [x for answer in lists for x in answer]
    got = reply.body.get("results") if isinstance(reply.body, dict) else None
    expect(got == flat, f"engines answered collective_rpc with {lists} (in rank order); POST /collective_rpc "
                        f"returned {got}, not their concatenation {flat}")


async def unknown_call_id_dropped(m: FrontendManager) -> None:
    """FE-UTIL-7: in a launch of its own, since a frontend that fails on the reply may end; the engines
    send the stray replies only once the frontend serves (not to its startup calls)."""
    async with m.fresh() as fe:
        fe.require_dev_endpoints()
        for engine in fe.engines:
            engine.script.notice_call_ids = (UNKNOWN_CALL_ID,)
        what = f"each engine sent a utility reply with call id {UNKNOWN_CALL_ID}, which the frontend never issued"
        try:
            reply = await asyncio.wait_for(fe.driver.request("GET", "/is_sleeping"), EXPECT_S)
            status = await fe.driver.health()
        except (asyncio.TimeoutError, TimeoutError):
            raise CaseFailure(f"{what}, before its answer to is_sleeping; GET /is_sleeping got no answer within "
                            f"{EXPECT_S:g} s") from None
        except PeerCrashed as exc:
            raise CaseFailure(f"{what}; the frontend exited instead of dropping it ({exc})") from None
        expect(reply.ok and isinstance(reply.body, dict) and reply.body.get("is_sleeping") is False,
               f"{what} before its answer; GET /is_sleeping returned HTTP {reply.status_code} {reply.text[:100]}")
        expect(status == 200, f"{what}; GET /health then answered {status}")


@case("FE-UTIL-1")
def test_is_sleeping_disagreement_is_error(frontends):
    frontends.run(is_sleeping_disagreement_is_error)


@case("FE-UTIL-2")
def test_is_sleeping_agreement(frontends):
    frontends.run(is_sleeping_agreement)


@case("FE-UTIL-3")
def test_reset_prefix_cache_and(frontends):
    frontends.run(reset_prefix_cache_and)


@case("FE-UTIL-4")
def test_utility_reaches_every_engine(frontends):
    frontends.run(utility_reaches_every_engine)


@case("FE-UTIL-5")
def test_reserved_call_ids_dropped(frontends):
    frontends.run(reserved_call_ids_dropped)


@case("FE-UTIL-6")
def test_collective_rpc_flattened(frontends):
    frontends.run(collective_rpc_flattened)


@case("FE-UTIL-7")
def test_unknown_call_id_dropped(frontends):
    frontends.run(unknown_call_id_dropped)
