"""A first end-to-end pass over the public API against one scripted engine."""

import time

from ecp.spec import EngineCoreRequest, FinishReason, SamplingParams
from ecp_client_testkit import run, start_client, stop, token_output


def req(rid: str, rank=None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=4), None, time.time(), None, None,
                             rank)


def test_add_stream_abort_utility():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            assert client.engine_ranks == (0,)
            assert client.max_model_len == 256
            stream = await client.add(req("a"))
            got = await engine.recv()
            assert isinstance(got.message, EngineCoreRequest) and got.message.request_id == "a"
            await engine.send_outputs(token_output("a", [5]))
            await engine.send_outputs(token_output("a", [6], FinishReason.LENGTH))
            outs = [o async for o in stream]
            assert [o.new_token_ids for o in outs] == [[5], [6]]
            s2 = await client.add(req("b"))
            await engine.recv()
            assert await client.abort(["b", "zzz"]) == ["b"]
            got = await engine.recv()
            assert got.message == ["b"]  # an ABORT: the request ids
            outs = [o async for o in s2]
            assert outs[-1].finish_reason == FinishReason.ABORT
            import asyncio
            task = asyncio.ensure_future(client.is_sleeping())
            await engine.answer_utility(True)
            assert await task is True
        finally:
            await stop(client, [engine])

    run(main())
