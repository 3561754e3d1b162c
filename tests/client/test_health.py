"""Fail closed (ECP-ROB-3): sentinel, garbage, DP control, engine kill, shutdown."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecp.spec import DecodeError, EngineCoreOutputs, EngineCoreRequest, FinishReason, SamplingParams
from ecp.reference.client import (
    ClientClosed, ClientConfig, EngineCoreClient, EngineDeadError, EngineDisconnected, UnexpectedDPControl,
)
from ecp_client_testkit import run, start_client, stop, token_output


def req(rid: str, rank=None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=4), None, time.time(), None, None,
                             rank)


async def consume(stream):
    """Iterate to the end; return (outputs, exception, monotonic time it ended)."""
    outs = []
    try:
        async for out in stream:
            outs.append(out)
    except Exception as exc:
        return outs, exc, time.monotonic()
    return outs, None, time.monotonic()


async def assert_everything_fails(client, streams, failure, expected_type):
    """Run ``failure()`` with streams and a utility waiter active; all must fail with the first error in 1 s."""
    consumers = [asyncio.ensure_future(consume(s)) for s in streams]
    waiter = asyncio.ensure_future(client.is_sleeping())
    # let the consumers and the utility call start waiting: a turn queues the call, a later one sends
    # it (a send still queued at the failure can find the engine gone, and fails on its own: a
    # UtilityCallFailed naming ECP-ROB-3, not the client's first error)
    for _ in range(3):
        await asyncio.sleep(0)
    t0 = time.monotonic()
    await failure()
    results = await asyncio.wait_for(asyncio.gather(*consumers), 5)
    error = client.error
    assert isinstance(error, expected_type) and not client.healthy
    for outs, exc, ended in results:
        assert exc is error
        assert ended - t0 < 1.0
    with pytest.raises(expected_type) as info:
        await asyncio.wait_for(waiter, 5)
    assert info.value is error
    with pytest.raises(expected_type):
        await client.add(req("later"))
    with pytest.raises(expected_type):
        await client.abort(["r0"])
    return error


@pytest.mark.parametrize("kind", ["sentinel", "garbage", "dp-control"])
def test_bad_output_fails_every_stream_with_the_first_error(kind):
    async def main():
        client, engines = await start_client(2)
        try:
            streams = [await client.add(req(f"r{i}")) for i in range(4)]
            await asyncio.gather(*(e.recv_n(2) for e in engines))
            await engines[0].send_outputs(token_output("r0", [9]))  # delivered before the failure

            async def failure():
                if kind == "sentinel":
                    await engines[1].send_raw([b"ENGINE_CORE_DEAD"])
                elif kind == "garbage":
                    await engines[1].send_raw([b"\xc1not msgpack"])
                else:
                    await engines[1].send(EngineCoreOutputs(engine_index=1, wave_complete=4))
                # a later, different failure (same connection, so surely later) must not replace the first
                await engines[1].send_raw([b"ENGINE_CORE_DEAD" if kind != "sentinel" else b"\xc1"])

            expected = {"sentinel": EngineDeadError, "garbage": DecodeError, "dp-control": UnexpectedDPControl}[kind]
            error = await assert_everything_fails(client, streams, failure, expected)
            assert error.clause in {"ECP-OUT-8", "ECP-FRAME-9", "ECP-FRAME-2", "ECP-OUT-6"}
        finally:
            await stop(client, engines)

    run(main())


def test_bug_ignore_engine_dead_keeps_serving():
    async def main():
        client, (engine,) = await start_client(1, bugs=frozenset({"ignore-engine-dead"}))
        try:
            s = await client.add(req("a"))
            await engine.recv()
            await engine.send_raw([b"ENGINE_CORE_DEAD"])
            await engine.send_outputs(token_output("a", [1], FinishReason.STOP))
            assert [o.new_token_ids async for o in s] == [[1]]
            assert client.healthy
        finally:
            await stop(client, [engine])

    run(main())


def test_engine_kill_fails_every_stream_promptly():
    here = Path(__file__).resolve().parent

    async def main():
        client = EngineCoreClient(ClientConfig(engine_count=1, handshake_timeout_s=20, ready_timeout_s=20))
        await client.bind()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.Popen([sys.executable, str(here / "scripted_engine_main.py"), client.handshake_address,
                                 "0"], env=env, stdout=subprocess.DEVNULL)
        try:
            await client.wait_ready()
            streams = [await client.add(req(f"r{i}")) for i in range(3)]

            async def failure():
                proc.send_signal(signal.SIGKILL)

            error = await assert_everything_fails(client, streams, failure, EngineDisconnected)
            assert error.clause == "ECP-ROB-3"
        finally:
            proc.kill()
            proc.wait(timeout=10)
            await client.shutdown()

    run(main())


def test_shutdown_ends_everything_with_client_closed():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            s = await client.add(req("a"))
            await engine.recv()
            consumer = asyncio.ensure_future(consume(s))
            waiter = asyncio.ensure_future(client.is_sleeping())
            await engine.recv()  # the utility call is out
            await client.shutdown()
            outs, exc, _ = await asyncio.wait_for(consumer, 5)
            assert isinstance(exc, ClientClosed)
            with pytest.raises(ClientClosed):
                await asyncio.wait_for(waiter, 5)
            with pytest.raises(ClientClosed):
                await client.add(req("b"))
            with pytest.raises(ClientClosed):
                await client.call_utility("is_sleeping")
            await client.shutdown()  # idempotent
        finally:
            await stop(client, [engine])

    run(main())


def test_a_crashed_background_loop_fails_closed():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            s = await client.add(req("a"))
            await engine.recv()

            def broken(frames):
                raise RuntimeError("dispatcher bug")

            client._dispatch.on_frames = broken
            consumer = asyncio.ensure_future(consume(s))
            await engine.send_outputs(token_output("a", [1]))
            outs, exc, _ = await asyncio.wait_for(consumer, 5)
            assert isinstance(exc, RuntimeError) and exc is client.error and not client.healthy
        finally:
            await stop(client, [engine])

    run(main())


def test_add_to_a_vanished_engine_in_the_grace_period_is_a_typed_error():
    async def main():
        # a long grace period: the client is still healthy while the ROUTER already knows the peer is gone
        client, engines = await start_client(2, peer_loss_grace_s=2.0)
        try:
            engines[1].close()
            error = None
            for i in range(400):  # bounded: until the ROUTER has dropped the peer (~ms)
                try:
                    await client.add(req(f"x{i}", rank=1))
                except EngineDisconnected as exc:
                    error = exc
                    break
                await asyncio.sleep(0.005)
            assert error is not None and error.clause == "ECP-ROB-3"
            assert "engine 1 is not connected" in str(error)
            assert f"x{i}" not in client._registry  # nothing left in flight for the failed ADD
            # engine 0 still serves until the grace period ends
            assert (await client.add(req("ok", rank=0))).engine_rank == 0
        finally:
            await stop(client, engines[:1])

    run(main())
