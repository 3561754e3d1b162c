"""RequestStream.listen: outputs reach a listener from the output loop, batched per slice of frames."""

import asyncio
import time

from ecp.spec import EngineCoreRequest, FinishReason, SamplingParams
from ecp_client_testkit import run, start_client, stop, token_output, until


def req(rid: str) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=8), None, time.time(), None, None,
                             None)


async def _three_outputs_queued_unseen(client, engine) -> list[int]:
    """Request "a" listened to (its tokens land in the returned list), then tokens 1, 2, 3 for it
    queued at the client's output socket with no event-loop turn since: the output loop, parked
    on the empty socket, has not run, and the read that waited for them took the socket's signal."""
    import zmq

    from ecp.spec import EngineCoreOutputs, encode_outputs

    first = await client.add(req("a"))
    await engine.recv()
    taken: list[int] = []
    first.listen(lambda: taken.extend(o.new_token_ids[0] for o in first.take_nowait()))
    push = zmq.Socket.shadow(engine.push.underlying)
    for t in (1, 2, 3):
        push.send_multipart(encode_outputs(EngineCoreOutputs(outputs=[token_output("a", [t])])))
    assert zmq.Socket.shadow(client._output.underlying).poll(5000, zmq.POLLIN)
    return taken


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



def test_an_add_in_a_wave_takes_the_outputs_queued_behind_it_in_order():
    """A wave of ADDs runs in one event-loop turn (no add suspends); the outputs that arrive
    meanwhile reach their streams from the add once OUTPUT_SLICE_S has passed since the output
    loop last took any (dispatch.catch_up), not after the whole wave, and in order."""
    from ecp.reference.client.dispatch import OUTPUT_SLICE_S

    async def main():
        client, (engine,) = await start_client(1)
        try:
            taken = await _three_outputs_queued_unseen(client, engine)
            loop = asyncio.get_running_loop()
            # from here on nothing yields to the event loop until the wave is in
            wave = [await client.add(req(f"w{i}")) for i in range(3)]
            start = loop.time()
            while loop.time() - start < 2 * OUTPUT_SLICE_S:  # a longer wave (bounded: the loop's clock)
                pass
            wave.append(await client.add(req("w3")))
            assert taken == [1, 2, 3]  # taken by that add, before the wave yielded
            await engine.send_outputs(token_output("a", [4]))
            await until(lambda: taken == [1, 2, 3, 4])  # the output loop goes on behind them
            assert len(await engine.recv_n(4)) == 4
        finally:
            await stop(client, [engine])

    run(main())


def test_outputs_an_add_leaves_queued_are_still_read_by_the_output_loop(monkeypatch):
    """An ADD that takes some queued outputs (dispatch.catch_up) and leaves the rest for the
    output loop must not strand them. ZeroMQ signals a socket's descriptor once when outputs
    arrive, and a read that finds them consumes the signal: the output loop, parked waiting for
    one, was never woken for the outputs catch_up left behind, and every stream on the client
    stalled with its outputs queued at the socket (seen under vllm-rs bench serve at c=256, about
    one run in ten)."""
    from ecp.reference.client import dispatch

    monkeypatch.setattr(dispatch, "OUTPUT_SLICE_S", 0.0)  # catch_up takes one output, leaves the rest

    async def main():
        client, (engine,) = await start_client(1)
        try:
            taken = await _three_outputs_queued_unseen(client, engine)
            await client.add(req("w0"))
            assert taken == [1]  # the ADD took one and left two queued
            await until(lambda: taken == [1, 2, 3])  # the output loop must take the rest
        finally:
            await stop(client, [engine])

    run(main())
