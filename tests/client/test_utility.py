"""Utility fan-out and per-method aggregation (ECP-UTIL-*) against two scripted engines."""

import asyncio

import pytest

from ecp.reference.client import (
    InconsistentUtilityResults, UtilityCallFailed, UtilityResultDecode,
)
from ecp_client_testkit import run, start_client, stop


async def call(client, engines, coro, answers, failures=None, envelope=True):
    """Run ``coro`` while each engine answers its one call with ``answers[rank]``."""
    task = asyncio.ensure_future(coro)
    calls = await asyncio.gather(*(
        e.answer_utility(answers[e.rank], (failures or {}).get(e.rank), envelope) for e in engines))
    try:
        return await task, calls
    except BaseException as exc:
        return exc, calls


def test_consensus_and_and_rules():
    async def main():
        client, engines = await start_client(2)
        try:
            value, calls = await call(client, engines, client.is_sleeping(), {0: True, 1: True})
            assert value is True
            assert all(c.method_name == "is_sleeping" and c.args == [] for c in calls)
            assert calls[0].call_id != calls[1].call_id  # one u64 call id per engine
            exc, _ = await call(client, engines, client.is_sleeping(), {0: True, 1: False})
            assert isinstance(exc, InconsistentUtilityResults)
            assert exc.method == "is_sleeping" and exc.values == {0: True, 1: False} and exc.clause == "ECP-UTIL-4"
            value, _ = await call(client, engines, client.is_scheduler_paused(), {0: False, 1: False})
            assert value is False
            value, calls = await call(client, engines, client.reset_prefix_cache(), {0: True, 1: False})
            assert value is False and calls[0].args == [False, False]
            value, calls = await call(client, engines, client.reset_prefix_cache(True, True), {0: True, 1: True})
            assert value is True and calls[1].args == [True, True]
            value, calls = await call(client, engines, client.wake_up(["weights"]), {0: True, 1: False})
            assert value is False and calls[0].args == [["weights"]]
            value, calls = await call(client, engines, client.collective_rpc("f", None, [1], None),
                                      {0: ["a", "b"], 1: "c"})
            assert value == ["a", "b", "c"] and calls[0].args == ["f", None, [1], None]
            value, calls = await call(client, engines, client.sleep(1, "abort"), {0: None, 1: None})
            assert value is None and calls[0].args == [1, "abort"]
            value, _ = await call(client, engines, client.get_supported_tasks(),
                                  {0: ["generate", "embed"], 1: ["generate"]})
            assert value == ("generate",)
            value, _ = await call(client, engines, client.call_utility("no_rule_method", 3), {0: 1, 1: 2})
            assert value == {0: 1, 1: 2}
        finally:
            await stop(client, engines)

    run(main())


def test_failures_decode_errors_and_unknown_call_ids():
    async def main():
        client, engines = await start_client(2)
        try:
            exc, _ = await call(client, engines, client.reset_prefix_cache(), {0: True, 1: None},
                                failures={1: "Call to reset_prefix_cache method failed: boom"})
            assert isinstance(exc, UtilityCallFailed)
            assert exc.failures == {1: "Call to reset_prefix_cache method failed: boom"}
            assert exc.results == {0: True}  # the engine that applied it, for compensation (ECP-UTIL-7)
            exc, _ = await call(client, engines, client.is_sleeping(), {0: "yes", 1: True})
            assert isinstance(exc, UtilityResultDecode) and exc.engine_rank == 0 and exc.clause == "ECP-UTIL-9"
            exc, _ = await call(client, engines, client.is_sleeping(), {0: True, 1: True}, envelope=False)
            assert isinstance(exc, UtilityResultDecode)
            # a reply with an unknown call id is dropped with a warning; the client stays healthy
            from ecp.spec import EngineCoreOutputs, UtilityOutput, UtilityResult
            await engines[0].send(EngineCoreOutputs(engine_index=0, utility_output=UtilityOutput(
                2**64 - 1, None, UtilityResult(None, True))))
            await engines[1].send(EngineCoreOutputs(engine_index=1, utility_output=UtilityOutput(
                -1, None, UtilityResult(None, {"notice": "elastic ep"}))))  # reserved id (ECP-UTIL-12)
            value, _ = await call(client, engines, client.is_sleeping(), {0: False, 1: False})
            assert value is False
            assert client.stats.unknown_utility_replies == 2 and client.healthy
        finally:
            await stop(client, engines)

    run(main())


def test_utility_waits_for_every_engine():
    async def main():
        client, engines = await start_client(2)
        try:
            task = asyncio.ensure_future(client.sleep(2, "wait"))
            await engines[0].answer_utility(None)
            got = await engines[1].recv()
            await asyncio.sleep(0.05)  # proving an absence: the call must still be waiting on engine 1
            assert not task.done()
            from ecp.spec import EngineCoreOutputs, UtilityOutput, UtilityResult
            await engines[1].send(EngineCoreOutputs(engine_index=1, utility_output=UtilityOutput(
                got.message.call_id, None, UtilityResult(None, None))))
            assert await task is None
        finally:
            await stop(client, engines)

    run(main())


def test_utility_wire_bytes_match_vllm():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            task = asyncio.ensure_future(client.sleep(1, "abort"))
            got = await engine.answer_utility(None)
            await task
            payload = engine.received[-1].frames[1]
            call_id = got.call_id
            assert engine.received[-1].frames[0] == b"\x03"
            # [0, call_id (u64), "sleep", [1, "abort"]] as vLLM's encoder writes it
            assert 2**32 <= call_id < 2**64  # a uuid-derived u64, written cf + 8 bytes as Python does
            assert payload == (bytes.fromhex("9400cf") + call_id.to_bytes(8, "big")
                               + bytes.fromhex("a5736c6565709201a561626f7274"))
        finally:
            await stop(client, [engine])

    run(main())


@pytest.mark.parametrize("bug", ["first-engine-is-sleeping", "reset-prefix-cache-any"])
def test_bug_knobs(bug):
    async def main():
        client, engines = await start_client(2, bugs=frozenset({bug}))
        try:
            if bug == "first-engine-is-sleeping":
                task = asyncio.ensure_future(client.is_sleeping())
                await engines[0].answer_utility(True)
                assert await task is True
                await engines[1].expect_silence(0.1)
            else:
                value, _ = await call(client, engines, client.reset_prefix_cache(), {0: True, 1: False})
                assert value is True
        finally:
            await stop(client, engines)

    run(main())


def test_typed_wrappers_take_and_send_the_spec_tables_arguments():
    """Each typed wrapper has its method's parameters (names, order, defaults: the spec's method
    table) and sends every argument, in order; with only the required ones given, the defaults."""
    import inspect

    from ecp.reference.client import EngineCoreClient
    from ecp.reference.client import utilities as module
    from ecp.spec.utility_methods import UTILITY_METHODS

    wrappers = {name for name, fn in vars(module.UtilityMethods).items()
                if inspect.iscoroutinefunction(fn) and not name.startswith("_") and name != "call_utility"}
    assert len(wrappers) >= 14 and wrappers <= set(UTILITY_METHODS), wrappers - set(UTILITY_METHODS)
    sent: list[tuple[str, list]] = []

    async def call_utility(method, *args):
        sent.append((method, [list(a) if isinstance(a, tuple) else a for a in args]))
        return {0: ["generate"]} if method == "get_supported_tasks" else None

    client = object.__new__(EngineCoreClient)  # nothing but the wrappers runs: no sockets
    client.call_utility = call_utility
    for name in sorted(wrappers):
        method = UTILITY_METHODS[name]
        method.check_signature(getattr(EngineCoreClient, name), skip=1)
        # a distinct value per argument (a list where the argument is an array, which wrappers copy)
        given = [[p.name] if p.type.startswith("array") else f"{p.name}-value" for p in method.params]
        required = given[:sum(p.required for p in method.params)]
        defaults = [list(p.default) if isinstance(p.default, tuple) else p.default
                    for p in method.params if not p.required]
        sent.clear()
        asyncio.run(getattr(client, name)(*given))
        asyncio.run(getattr(client, name)(*required))
        assert sent == [(name, given), (name, required + defaults)], name
