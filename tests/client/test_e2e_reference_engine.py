"""End to end: the client against 2 reference engines (routing, pinning, abort, utilities)."""

import asyncio
import time

from ecp.spec import EngineCoreRequest, FinishReason, SamplingParams
from ecp.reference.client import ClientConfig, EngineCoreClient
from ecp.reference.engine import launch
from ecp_client_testkit import run


def req(rid: str, max_tokens: int, rank=None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3, 4], None, SamplingParams(max_tokens=max_tokens, temperature=0.0),
                             None, time.time(), None, None, rank)


async def tokens_and_finish(stream):
    tokens, finish = [], None
    async for out in stream:
        tokens += out.new_token_ids
        finish = out.finish_reason
    return tokens, finish


def test_client_against_two_reference_engines():
    async def main():
        client = EngineCoreClient(ClientConfig(engine_count=2, handshake_timeout_s=30, ready_timeout_s=30,
                                               utility_timeout_s=20))
        await client.bind()
        handle = launch(client.handshake_address, 2, mode="thread", max_model_len=300, num_gpu_blocks=256,
                        step_time_ms=1, handshake_timeout_s=30)
        try:
            await client.wait_ready()
            assert client.engine_ranks == (0, 1) and client.max_model_len == 300
            assert "generate" in await client.get_supported_tasks()
            await client.reset_mm_cache()

            # routing: least loaded alternates; pinning goes where asked
            streams = [await client.add(req(f"r{i}", 5)) for i in range(4)]
            assert [s.engine_rank for s in streams] == [0, 1, 0, 1]
            pinned = await client.add(req("pinned", 3, rank=1))
            assert pinned.engine_rank == 1
            for s in streams:
                tokens, finish = await tokens_and_finish(s)
                assert len(tokens) == 5 and finish == FinishReason.LENGTH
            tokens, finish = await tokens_and_finish(pinned)
            assert len(tokens) == 3 and finish == FinishReason.LENGTH
            assert client.in_flight() == {0: 0, 1: 0}

            # explicit abort of a long request, and an auto-abort of another
            long1 = await client.add(req("long-1", 250, rank=0))
            long2 = await client.add(req("long-2", 250, rank=1))
            first = await long1.__anext__()
            assert first.request_id == "long-1"
            await long2.__anext__()
            assert await client.abort(["long-1"]) == ["long-1"]
            rest = [o async for o in long1]
            assert rest[-1].finish_reason == FinishReason.ABORT
            await long2.aclose()
            # sleep(mode="wait") answers only once nothing runs: both engines dropped their request
            await asyncio.wait_for(client.sleep(1, "wait"), 10)
            assert await client.is_sleeping() is True
            assert await client.wake_up() is True
            assert await client.is_sleeping() is False
            assert client.stats.abort_messages == 2 and client.stats.aborts_sent == 2

            # other utilities, aggregated over both engines
            assert await client.reset_prefix_cache() is True
            assert await client.is_scheduler_paused() is False
            await client.pause_generation("keep", False)
            assert await client.is_scheduler_paused() is True
            await client.resume_scheduler()
            assert await client.is_scheduler_paused() is False

            # the rejection notice never runs and registers nothing; the client stays healthy
            rank = await client.notify_kv_transfer_request_rejected(
                "cmpl-rejected-1", {"do_remote_prefill": True, "remote_engine_id": "p0"}, 0)
            assert rank == 0
            after = await client.add(req("after", 2, rank=0))
            assert (await tokens_and_finish(after))[1] == FinishReason.LENGTH
            assert client.healthy and client.in_flight() == {0: 0, 1: 0}
        finally:
            await client.shutdown()
            handle.stop(timeout=10)

    run(main(), timeout=90)


def test_client_coordinator_gates_reference_engines_and_follows_waves():
    async def main():
        from ecp_client_testkit import until

        client = EngineCoreClient(ClientConfig(engine_count=2, coordinator=True, handshake_timeout_s=30,
                                               ready_timeout_s=30, utility_timeout_s=20))
        await client.bind()
        handle = launch(client.handshake_address, 2, mode="thread", max_model_len=300, num_gpu_blocks=256,
                        step_time_ms=1, handshake_timeout_s=30)
        try:
            await client.wait_ready()  # passes only through the coordinator's READY gate
            assert client.current_wave == 0
            streams = [await client.add(req(f"w{i}", 3)) for i in range(4)]
            for s in streams:
                assert (await tokens_and_finish(s))[1] == FinishReason.LENGTH
            # idle engines report wave_complete to the coordinator (never to the client: ECP-OUT-6)
            await until(lambda: client.current_wave >= 1, timeout=10)
            s = await client.add(req("next-wave", 3))
            assert (await tokens_and_finish(s))[1] == FinishReason.LENGTH
            assert client.healthy
        finally:
            await client.shutdown()
            handle.stop(timeout=10)

    run(main(), timeout=90)


def test_killing_a_reference_engine_process_fails_the_client_closed():
    import signal

    from ecp.reference.client import EngineDisconnected

    async def main():
        client = EngineCoreClient(ClientConfig(engine_count=2, handshake_timeout_s=60, ready_timeout_s=60))
        await client.bind()
        handle = launch(client.handshake_address, 2, mode="process", max_model_len=300, num_gpu_blocks=256,
                        step_time_ms=2, handshake_timeout_s=60)
        try:
            await client.wait_ready()
            streams = [await client.add(req(f"k{i}", 280, rank=i % 2)) for i in range(4)]
            for s in streams:
                await s.__anext__()  # every request is running
            consumers = [asyncio.ensure_future(tokens_and_finish(s)) for s in streams]
            t0 = time.monotonic()
            handle._procs[1].send_signal(signal.SIGKILL)
            results = await asyncio.wait_for(asyncio.gather(*consumers, return_exceptions=True), 10)
            elapsed = time.monotonic() - t0
            assert all(isinstance(r, EngineDisconnected) and r is client.error for r in results), results
            assert elapsed < 1.5, elapsed  # the loss is noticed promptly (grace 0.1 s), not by a timeout
            assert not client.healthy
        finally:
            await client.shutdown()
            handle.stop(timeout=10)

    run(main(), timeout=120)
