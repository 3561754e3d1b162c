"""RequestStream.listen: outputs reach a listener from the output loop, batched per slice of frames."""

import asyncio
import time

from ecp.spec import EngineCoreRequest, FinishReason, SamplingParams
from ecp_client_testkit import run, start_client, stop, token_output, until


def req(rid: str) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=8), None, time.time(), None, None,
                             None)


def test_a_listener_takes_every_output_in_order_then_the_end():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            stream = await client.add(req("a"))
            await engine.recv()
            calls, taken, done = [], [], asyncio.Event()

            def on_ready():
                outs = stream.take_nowait()
                calls.append(len(outs))
                taken.extend(o.new_token_ids[0] for o in outs)
                if stream.finished and not stream.take_nowait():
                    done.set()

            await engine.send_outputs(token_output("a", [5]))  # before listening: delivered at listen()
            await asyncio.wait_for(stream.wait(), 5)  # queued, not taken
            stream.listen(on_ready)
            for t in (6, 7, 8):
                await engine.send_outputs(token_output("a", [t]))
            await engine.send_outputs(token_output("a", [9], FinishReason.LENGTH))
            await asyncio.wait_for(done.wait(), 5)
            assert taken == [5, 6, 7, 8, 9]
            assert len(calls) <= 5 and all(calls[:-1])  # never called for nothing but at the end
        finally:
            await stop(client, [engine])

    run(main())


def test_a_listener_sees_the_client_fail_and_take_nowait_raises_it():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            stream = await client.add(req("b"))
            await engine.recv()
            errors, done = [], asyncio.Event()

            def on_ready():
                try:
                    stream.take_nowait()
                except Exception as exc:  # the client's failure, after the outputs
                    errors.append(exc)
                    done.set()

            stream.listen(on_ready)
            await engine.send_raw([b"\x99\x99 not msgpack"])  # an unreadable output fails the client closed
            await asyncio.wait_for(done.wait(), 5)
            assert errors and stream.finished
        finally:
            await stop(client, [engine])

    run(main())



def test_a_wave_of_adds_goes_out_before_the_outputs_queued_meanwhile_which_then_arrive_in_order():
    """A wave of ADDs runs in one event-loop turn (no add suspends). The outputs that queue
    meanwhile are not taken by the adds: the whole wave reaches the engine first, then the
    output loop takes those outputs, in order, and goes on behind them."""
    import zmq

    from ecp.spec import EngineCoreOutputs, encode_outputs

    async def main():
        client, (engine,) = await start_client(1)
        try:
            first = await client.add(req("a"))
            await engine.recv()
            taken: list[int] = []
            first.listen(lambda: taken.extend(o.new_token_ids[0] for o in first.take_nowait()))
            loop = asyncio.get_running_loop()
            # from here on nothing yields to the event loop until the wave is in
            push = zmq.Socket.shadow(engine.push.underlying)
            for t in (1, 2, 3):
                push.send_multipart(encode_outputs(EngineCoreOutputs(outputs=[token_output("a", [t])])))
            wave = [await client.add(req(f"w{i}")) for i in range(3)]
            start = loop.time()
            while loop.time() - start < 0.05:  # a longer wave; ZeroMQ's threads queue the outputs meanwhile
                pass
            wave.append(await client.add(req("w3")))
            assert taken == []  # admission first: no add took an output
            assert len(await engine.recv_n(4)) == 4
            await until(lambda: taken == [1, 2, 3])
            await engine.send_outputs(token_output("a", [4]))
            await until(lambda: taken == [1, 2, 3, 4])
        finally:
            await stop(client, [engine])

    run(main())
