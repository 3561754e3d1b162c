"""Frontend-role DP aggregation cases: utilities fan out and aggregate per method."""

from __future__ import annotations

from typing import Any

from ecp.conformance.frontend.cases._common import expect
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.registry import case


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
    calls = [("POST", "/sleep", {"level": 1}, "sleep"), ("POST", "/wake_up", None, "wake_up"),
             ("GET", "/is_sleeping", None, "is_sleeping"), ("POST", "/reset_prefix_cache", None,
                                                             "reset_prefix_cache")]
    for http_method, path, params, method in calls:
        reply = await fe.driver.request(http_method, path, params=params)
        expect(reply.ok, f"{http_method} {path} answered HTTP {reply.status_code}: {reply.text[:100]}")
        missed = [e.rank for e in fe.engines if not e.recorder.utilities(method)]
        expect(not missed, f"{http_method} {path}: utility {method!r} never reached engine(s) {missed}")

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
