"""Pusher: a one-choice SSE response written from the client's output loop, in order, also when
the server's send has to wait for the transport (flow control)."""

from __future__ import annotations

import asyncio

from ecp.reference.frontend.generate import Pusher
from ecp.reference.frontend.serving import ChoiceRun, Frontend, FrontendConfig
from ecp.reference.tokenizer import ByteTokenizer
from ecp.spec import EngineCoreOutput, FinishReason

from .fakes import FakeClient
from .test_text import _choice


class SlowSend:
    """An ASGI send that waits on ``room`` before taking each body while ``paused`` is set."""

    def __init__(self) -> None:
        self.bodies: list[tuple[bytes, bool]] = []
        self.room = asyncio.Event()
        self.paused = False
        self.suspended = 0

    async def __call__(self, message):
        if self.paused:
            self.suspended += 1
            await self.room.wait()
        self.bodies.append((message["body"], message["more_body"]))


def test_writes_keep_their_order_while_the_transport_makes_a_write_wait():
    async def body():
        tok = ByteTokenizer()
        client = FakeClient()
        fe = Frontend(client, tok, FrontendConfig())
        choice = _choice("p", 0)
        from ecp.spec import EngineCoreRequest, SamplingParams

        stream = await client.add(EngineCoreRequest(choice.internal_id, [5], None, SamplingParams(max_tokens=1000),
                                                    None, 0.0, None, None, None))
        client.hold_after = 0  # (the fake engine produces nothing by itself from here)
        run = ChoiceRun(fe, choice, stream)
        send = SlowSend()
        pusher = Pusher(run, lambda batch: "".join(d.text for d in batch).encode(),
                        lambda exc: b"|end", send)
        task = asyncio.ensure_future(pusher.run())
        await asyncio.sleep(0)
        stream.items.clear()

        async def out(text: str, finish: FinishReason | None = None) -> None:
            stream.push(EngineCoreOutput(choice.internal_id, tok.encode(text), finish_reason=finish))
            for _ in range(3):  # the listener runs from the loop
                await asyncio.sleep(0)

        await out("a")
        send.paused = True
        await out("b")           # this write waits for the transport
        await out("c")           # queued behind it
        await out("d", FinishReason.LENGTH)  # the end, queued too
        assert [b for b, _ in send.bodies] == [b"a"] and send.suspended == 1 and not task.done()
        send.paused = False
        send.room.set()
        await asyncio.wait_for(task, 5)
        assert send.bodies == [(b"a", True), (b"b", True), (b"cd|end", False)]
        run.close()

    asyncio.run(asyncio.wait_for(body(), 10))


def test_an_engine_failure_ends_the_response_with_the_error_bytes():
    async def body():
        client = FakeClient()
        fe = Frontend(client, ByteTokenizer(), FrontendConfig())
        choice = _choice("p", 0)
        from ecp.spec import EngineCoreRequest, SamplingParams

        client.hold_after = 0
        stream = await client.add(EngineCoreRequest(choice.internal_id, [5], None, SamplingParams(max_tokens=9),
                                                    None, 0.0, None, None, None))
        run = ChoiceRun(fe, choice, stream)
        send = SlowSend()
        pusher = Pusher(run, lambda batch: b"x", lambda exc: b"error:" + type(exc).__name__.encode(), send)
        task = asyncio.ensure_future(pusher.run())
        await asyncio.sleep(0)
        client.die()
        await asyncio.wait_for(task, 5)
        assert send.bodies[-1] == (b"error:FakeEngineDead", False)
        pusher.stop()
        run.close()

    asyncio.run(asyncio.wait_for(body(), 10))
