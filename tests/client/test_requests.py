"""ADD path: duplicate ids, pinning, least-loaded routing, stamping, rejection notice bytes."""

import asyncio
import time

import pytest

from ecp.spec import (
    EngineCoreOutputs, EngineCoreRequest, FinishReason, SamplingParams, SchedulerStats,
)
from ecp.reference.client import DuplicateRequestId, InvalidDataParallelRank
from ecp_client_testkit import ScriptedEngine, run, start_client, stop, token_output

VLLM_REJECTION_NOTICE = bytes.fromhex(  # encoder-dump.txt section 3a (298 bytes)
    "dc0016af636d706c2d72656a65637465642d319100c0de0007ac77617465726d61726b696e67c2a473746f7090ae73746f705f"
    "746f6b656e5f69647390aa6d61785f746f6b656e7301aa65787472615f6172677381b26b765f7472616e736665725f706172616d"
    "7386b1646f5f72656d6f74655f70726566696c6cc3b0646f5f72656d6f74655f6465636f6465c2b072656d6f74655f656e6769"
    "6e655f6964b070726566696c6c2d656e67696e652d30b072656d6f74655f626c6f636b5f69647393010203ab72656d6f74655f"
    "686f7374a93132372e302e302e31ab72656d6f74655f706f7274cd15e0a96261645f776f72647390b9736b69705f7265616469"
    "6e675f7072656669785f6361636865c2c0cb41d954fc40200000c0c0c0c0c0000000c0c2c0c0c0c3c0c0")
KV_PARAMS = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "prefill-engine-0",
             "remote_block_ids": [1, 2, 3], "remote_host": "127.0.0.1", "remote_port": 5600}


def req(rid: str, rank=None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=4), None, time.time(), None, None,
                             rank)


def test_duplicate_id_rejected_before_any_add():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            s = await client.add(req("dup"))
            await engine.recv()
            with pytest.raises(DuplicateRequestId) as info:
                await client.add(req("dup"))
            assert info.value.clause == "ECP-REQ-8"
            await engine.expect_silence(0.1)
            await engine.send_outputs(token_output("dup", [1], FinishReason.STOP))
            assert len([o async for o in s]) == 1
            await client.add(req("dup"))  # finished: the id may be reused
            assert (await engine.recv()).message.request_id == "dup"
        finally:
            await stop(client, [engine])

    run(main())


def test_pinning_routing_and_stats_refinement():
    async def main():
        client, engines = await start_client(2, engine_start_index=3)
        try:
            assert client.engine_ranks == (3, 4)
            with pytest.raises(InvalidDataParallelRank) as info:
                await client.add(req("x", rank=0))
            assert info.value.rank == 0 and info.value.connected_ranks == [3, 4]
            s = await client.add(req("pinned", rank=4))
            assert s.engine_rank == 4
            got = await engines[1].recv()
            assert got.message.data_parallel_rank == 4
            # least loaded: engine 3 has 0 in flight, engine 4 has 1
            unpinned = [await client.add(req(f"u{i}")) for i in range(3)]
            assert [u.engine_rank for u in unpinned] == [3, 3, 4]  # 0/1 → 3, 1/1 → tie → 3, 2/1 → 4
            await engines[0].recv_n(2)
            await engines[1].recv()
            # engine 3 reports a deep queue: routing refines by scheduler_stats
            await engines[0].send(EngineCoreOutputs(engine_index=3, outputs=[token_output("u0", [1])],
                                                    scheduler_stats=SchedulerStats(num_running_reqs=10,
                                                                                   num_waiting_reqs=5)))
            assert (await unpinned[0].__anext__()).new_token_ids == [1]  # the stats message was processed
            # engine 3 score: max(2 in flight, 15 running + waiting) = 15 vs engine 4: 2, 3, ...
            ranks = [(await client.add(req(f"v{i}"))).engine_rank for i in range(5)]
            assert ranks == [4] * 5
        finally:
            await stop(client, engines)

    run(main())


def test_client_index_and_wave_are_stamped_in_bootstrapped_mode():
    async def main():
        from ecp.reference.client import ClientConfig, EngineCoreClient

        client = EngineCoreClient(ClientConfig(engine_count=1, engine_start_index=2, bootstrapped=True,
                                               client_index=3, ready_timeout_s=10))
        await client.bind()
        engine = ScriptedEngine(2)
        try:
            await asyncio.gather(client.wait_ready(), engine.bootstrap(client.input_address, client.output_address))
            r = req("stamped")
            await client.add(r)
            got = await engine.recv()
            assert got.message.client_index == 3 and got.message.current_wave == 0
            assert r.client_index == 0  # the caller's object is not mutated
        finally:
            await stop(client, [engine])

    run(main())


def test_rejection_notification_bytes_match_vllm():
    async def main():
        client, engines = await start_client(2)
        try:
            before = time.time()
            rank = await client.notify_kv_transfer_request_rejected("cmpl-rejected-1", KV_PARAMS, 1)
            assert rank == 1
            got = await engines[1].recv()
            assert got.frames[0] == b"\x00"
            payload = got.frames[1]
            assert len(payload) == len(VLLM_REJECTION_NOTICE) == 298
            # identical to vLLM's bytes except data_parallel_rank (1 here, nil in the dump) and arrival_time
            sent = got.message
            assert sent.abort_immediately and sent.prompt_token_ids == [0] and sent.data_parallel_rank == 1
            assert before <= sent.arrival_time <= time.time()
            t = VLLM_REJECTION_NOTICE.index(bytes.fromhex("cb41d954fc40200000"))
            assert payload[:t] == VLLM_REJECTION_NOTICE[:t]
            # after arrival_time: lora_request nil, cache_salt nil, then data_parallel_rank
            assert payload[t] == 0xCB and payload[t + 9:t + 11] == b"\xc0\xc0" and payload[t + 11] == 0x01
            assert payload[t + 12:] == VLLM_REJECTION_NOTICE[t + 12:]
            # without a pin it goes to the least-loaded engine and matches byte for byte but the time
            busy = await client.add(req("busy", rank=0))  # keep it referenced: a dropped stream aborts
            await engines[0].recv()
            assert await client.notify_kv_transfer_request_rejected("cmpl-rejected-1", KV_PARAMS) == 1
            payload = (await engines[1].recv()).frames[1]
            assert payload[:t] == VLLM_REJECTION_NOTICE[:t] and payload[t + 9:] == VLLM_REJECTION_NOTICE[t + 9:]
            assert client.in_flight() == {0: 1, 1: 0} and not busy.finished  # the notice registers no stream
        finally:
            await stop(client, engines)

    run(main())
