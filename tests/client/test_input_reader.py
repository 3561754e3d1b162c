"""The client reads, counts and drops what an engine sends on its input ROUTER after the handshake
(``unexpected_input_messages``, docs/client.md), also when the client's own sends on that socket
took the socket's wake-up.

A ZeroMQ socket signals its descriptor once when something arrives; any call into the socket,
a send included, can take that signal. The client's ADDs go out with plain non-blocking sends,
so a message that arrived just before a batch of them must still be read."""

from __future__ import annotations

import select
import time

import zmq

from ecp.reference.client.outbox import SEND_BATCH
from ecp.spec import EngineCoreRequest, SamplingParams
from ecp_client_testkit import run, start_client, stop, until


def req(rid: str) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3], None, SamplingParams(max_tokens=4), None, time.time(), None, None, None)


def test_a_stray_message_that_arrives_just_before_a_batch_of_adds_is_read():
    async def main():
        client, (engine,) = await start_client(1)
        try:
            sock = client._input  # (white-box: the descriptor the event loop watches)
            fd = sock.getsockopt(zmq.FD)
            await engine.dealer.send(b"late registration")
            # Block the event loop until the message has reached the client's socket (its
            # descriptor says so), so that the loop has not seen it yet ...
            readable, _, _ = select.select([fd], [], [], 5.0)
            assert readable, "the stray message never reached the client's input socket"
            assert client.stats.unexpected_input_messages == 0  # the loop has not read it yet
            # ... and send a full batch of ADDs within the same turn: the batch goes out at once,
            # with plain sends that take the socket's signal.
            for i in range(SEND_BATCH):
                await client.add(req(f"r{i}"))
            await until(lambda: client.stats.unexpected_input_messages == 1, timeout=3.0)
            assert len(await engine.recv_n(SEND_BATCH)) == SEND_BATCH
            assert client.healthy
        finally:
            await stop(client, [engine])

    run(main())
