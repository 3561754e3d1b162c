"""Auto-abort coalescing (ECP-ABORT-5/6/7) and explicit abort (ECP-ABORT-8) against scripted engines."""

import asyncio
import gc
import math
import statistics
import time

import pytest
import zmq

from ecp.spec import EngineCoreRequest, FinishReason, SamplingParams
from ecp_client_testkit import run, start_client, stop, token_output, until


def req(rid: str, rank=None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=4), None, time.time(), None, None,
                             rank)


async def collect_aborts(engines, expected: set[str], timeout: float = 20.0):
    """Receive ABORTs at every engine until their id union covers ``expected``; return per-engine lists."""
    per_engine = {e.rank: [] for e in engines}
    seen: set[str] = set()
    deadline = time.monotonic() + timeout

    async def drain(engine):
        while seen != expected and time.monotonic() < deadline:
            try:
                got = await engine.recv(timeout=0.05)
            except asyncio.TimeoutError:
                continue
            assert isinstance(got.message, list), got.message  # an ABORT: the request ids
            per_engine[engine.rank].append(got.message)
            seen.update(got.message)

    await asyncio.gather(*(drain(e) for e in engines))
    return per_engine


@pytest.mark.parametrize("n", [3, 100, 5000])
def test_dropping_many_live_streams_coalesces_per_engine(n):
    async def main():
        client, engines = await start_client(2)
        try:
            streams = [await client.add(req(f"r{i}")) for i in range(n)]
            await asyncio.gather(*(e.recv_n(sum(1 for s in streams if s.engine_rank == e.rank)) for e in engines))
            # finish a few first: they must never be aborted (ECP-ABORT-6)
            finished = [s for s in streams[: max(1, n // 10)]]
            for e in engines:
                outs = [token_output(s.request_id, [7], FinishReason.STOP) for s in finished if s.engine_rank == e.rank]
                if outs:
                    await e.send_outputs(*outs)
            for s in finished:
                assert [o.finish_reason async for o in s][-1] == FinishReason.STOP
            # drop every stream at once (finished ones included)
            for s in streams:
                await s.aclose()
            live = {s.request_id for s in streams} - {s.request_id for s in finished}
            per_engine = await collect_aborts(engines, live)
            for e in engines:
                await e.expect_silence(0.2)
            union = [i for msgs in per_engine.values() for ids in msgs for i in ids]
            assert sorted(union) == sorted(live) and len(union) == len(live)
            for e in engines:
                mine = [s.request_id for s in streams if s.engine_rank == e.rank and s.request_id in live]
                msgs = per_engine[e.rank]
                assert len(msgs) <= math.ceil(len(live) / 1024)  # one ABORT per engine per drain
                assert [i for ids in msgs for i in ids] == mine  # drop order kept per engine
            assert client.stats.aborts_sent == len(live)
            assert client.in_flight() == {0: 0, 1: 0}
        finally:
            await stop(client, engines)

    run(main())


def test_single_drop_is_forwarded_promptly():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            latencies = []
            for i in range(5):
                stream = await client.add(req(f"r{i}"))
                await engine.recv()
                t0 = time.monotonic()
                await stream.aclose()
                got = await engine.recv(timeout=2.0)
                assert isinstance(got.message, list) and got.message == [f"r{i}"]
                latencies.append(got.at - t0)
            # ECP-ABORT-7: measured from the drop to arrival at the engine
            assert statistics.median(latencies) < 0.050, latencies
        finally:
            await stop(client, [engine])

    run(main())


def test_gc_cancel_and_stop_string_auto_abort_and_late_outputs_are_dropped():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            s = await client.add(req("gc"))
            await engine.recv()
            del s
            gc.collect()
            got = await engine.recv(timeout=2.0)
            assert got.message == ["gc"]

            s = await client.add(req("cancel"))
            await engine.recv()
            task = asyncio.ensure_future(s.__anext__())
            await asyncio.sleep(0)  # let the task start waiting (not synchronisation with the engine)
            task.cancel()
            got = await engine.recv(timeout=2.0)
            assert got.message == ["cancel"]

            s = await client.add(req("stop"))
            await engine.recv()
            await s.aclose(cause="stop_string_matched")
            got = await engine.recv(timeout=2.0)
            assert got.message == ["stop"]
            # an output for the aborted id arrives late: dropped, the client stays healthy
            live = await client.add(req("live"))
            await engine.recv()
            dropped_before = client.stats.outputs_dropped
            await engine.send_outputs(token_output("stop", [1]), token_output("live", [2], FinishReason.LENGTH))
            assert [o.new_token_ids async for o in live] == [[2]]
            assert client.stats.outputs_dropped == dropped_before + 1
            assert client.healthy
            assert [o async for o in s] == []
            # a stray message on the input socket after the handshake is dropped, not fatal
            await engine.dealer.send(b"late registration")
            await until(lambda: client.stats.unexpected_input_messages == 1)
            probe = await client.add(req("probe"))
            await engine.recv()
            await engine.send_outputs(token_output("probe", [3], FinishReason.STOP))
            assert [o.new_token_ids async for o in probe] == [[3]] and client.healthy
        finally:
            await stop(client, [engine])

    run(main())


def test_bug_abort_one_per_request_sends_one_message_per_id():
    async def main():
        client, (engine,) = await start_client(1, bugs=frozenset({"abort-one-per-request"}))
        try:
            streams = [await client.add(req(f"r{i}")) for i in range(5)]
            await engine.recv_n(5)
            for s in streams:
                await s.aclose()
            got = await engine.recv_n(5)
            assert [g.message for g in got] == [[f"r{i}"] for i in range(5)]
        finally:
            await stop(client, [engine])

    run(main())


def test_explicit_abort_finalises_locally_then_one_abort_per_engine():
    async def main():
        client, engines = await start_client(2)
        try:
            streams = [await client.add(req(f"r{i}")) for i in range(6)]
            await asyncio.gather(*(e.recv_n(3) for e in engines))
            finished = streams[0]
            await engines[finished.engine_rank].send_outputs(token_output(finished.request_id, [1], FinishReason.STOP))
            assert [o.finish_reason async for o in finished] == [FinishReason.STOP]
            ids = [s.request_id for s in streams] + ["unknown"]
            aborted = await client.abort(ids)
            assert aborted == [s.request_id for s in streams[1:]]
            for s in streams[1:]:  # local ABORT terminal output first (ECP-ABORT-8)
                outs = [o async for o in s]
                assert len(outs) == 1 and outs[0].finish_reason == FinishReason.ABORT and outs[0].new_token_ids == []
            for e in engines:
                got = await e.recv()
                assert got.message == [s.request_id for s in streams[1:] if s.engine_rank == e.rank]
                await e.expect_silence(0.1)
            # abort_all with nothing in flight sends nothing
            assert await client.abort_all() == []
            more = [await client.add(req(f"m{i}")) for i in range(4)]
            await asyncio.gather(*(e.recv_n(2) for e in engines))
            assert sorted(await client.abort_all()) == sorted(s.request_id for s in more)
            for e in engines:
                got = await e.recv()
                assert isinstance(got.message, list) and len(got.message) == 2
        finally:
            await stop(client, engines)

    run(main())


def test_explicit_abort_survives_a_send_failure_to_one_engine():
    async def main():
        client, engines = await start_client(2)
        try:
            s0 = await client.add(req("a", rank=0))
            s1 = await client.add(req("b", rank=1))
            await engines[0].recv()
            await engines[1].recv()
            real_send = client._put

            async def send(rank, frames, *event):  # engine 0's socket path fails (as EHOSTUNREACH would)
                if rank == 0:
                    raise zmq.ZMQError(zmq.EHOSTUNREACH)
                await real_send(rank, frames, *event)

            client._put = send
            assert await client.abort(["a", "b"]) == ["a", "b"]
            got = await engines[1].recv()
            assert got.message == ["b"]
            assert client.stats.abort_send_errors == 1
            assert [o.finish_reason async for o in s0] == [FinishReason.ABORT]
            assert [o.finish_reason async for o in s1] == [FinishReason.ABORT]
            await engines[0].expect_silence(0.1)
        finally:
            await stop(client, engines)

    run(main())
