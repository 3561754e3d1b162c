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


class RecordingSend:
    """An ASGI send that records every message."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def __call__(self, message):
        self.messages.append(message)


def _pushed_choice(client: FakeClient, max_tokens: int):
    async def make():
        fe = Frontend(client, ByteTokenizer(), FrontendConfig())
        choice = _choice("p", 0)
        from ecp.spec import EngineCoreRequest, SamplingParams

        client.hold_after = 0
        stream = await client.add(EngineCoreRequest(choice.internal_id, [5], None,
                                                    SamplingParams(max_tokens=max_tokens), None, 0.0, None, None, None))
        stream.items.clear()
        return ChoiceRun(fe, choice, stream), choice, stream
    return make()


def test_the_first_batch_leaves_after_the_response_start_from_the_output_loop_with_the_head():
    async def body():
        tok = ByteTokenizer()
        client = FakeClient()
        run, choice, stream = await _pushed_choice(client, 1000)
        send = RecordingSend()
        start = {"type": "http.response.start", "status": 200, "headers": []}
        pusher = Pusher(run, lambda batch: "".join(d.text for d in batch).encode(), lambda exc: b"|end", send,
                        start, b"role|")
        task = asyncio.ensure_future(pusher.run())
        for _ in range(3):
            await asyncio.sleep(0)
        assert send.messages == []  # nothing before the first token
        stream.push(EngineCoreOutput(choice.internal_id, tok.encode("a")))
        stream.push(EngineCoreOutput(choice.internal_id, tok.encode("b"), finish_reason=FinishReason.LENGTH))
        await asyncio.wait_for(task, 5)
        assert send.messages == [start, {"type": "http.response.body", "body": b"role|ab|end", "more_body": False}]
        pusher.stop()
        run.close()

    asyncio.run(asyncio.wait_for(body(), 10))


def test_a_failure_before_the_first_token_sends_nothing_and_leaves_the_answer_to_the_handler():
    from ecp.reference.frontend.generate import FailedBeforeStart

    async def body():
        client = FakeClient()
        run, _, _ = await _pushed_choice(client, 9)
        send = RecordingSend()
        pusher = Pusher(run, lambda batch: b"x", lambda exc: b"error", send,
                        {"type": "http.response.start", "status": 200, "headers": []})
        task = asyncio.ensure_future(pusher.run())
        await asyncio.sleep(0)
        client.die()
        try:
            await asyncio.wait_for(task, 5)
        except FailedBeforeStart as failed:
            assert type(failed.__cause__).__name__ == "FakeEngineDead"
        else:
            raise AssertionError("the pusher ended without the failure")
        assert send.messages == []  # the handler answers with an HTTP error instead
        pusher.stop()
        run.close()

    asyncio.run(asyncio.wait_for(body(), 10))


def test_a_token_and_the_error_behind_it_taken_at_once_end_the_response_with_the_error():
    """The client calls a listener once per slice of frames: a token and the ERROR output behind
    it can come in one call, with the stream already ended. The delta is shown, then the error
    ends the response; no further call comes, so the pusher must not wait for one."""
    from ecp.spec import RequestError

    async def body(first: bool):
        tok = ByteTokenizer()
        client = FakeClient()
        run, choice, stream = await _pushed_choice(client, 9)
        send = RecordingSend()
        pusher = Pusher(run, lambda batch: "".join(d.text for d in batch).encode(),
                        lambda exc: b"|error" if exc is not None else b"|done", send,
                        {"type": "http.response.start", "status": 200, "headers": []})
        task = asyncio.ensure_future(pusher.run())
        await asyncio.sleep(0)
        if not first:  # a token written before the pair arrives
            stream.push(EngineCoreOutput(choice.internal_id, tok.encode("a")))
            for _ in range(3):
                await asyncio.sleep(0)
        error = RequestError("engine_error", "failed", False)
        stream.items.extend([EngineCoreOutput(choice.internal_id, tok.encode("b")),
                             EngineCoreOutput(choice.internal_id, [], finish_reason=FinishReason.ERROR, error=error)])
        stream.ended = True
        stream.wake()  # one notification for both
        await asyncio.wait_for(task, 5)
        bodies = [m["body"] for m in send.messages if m["type"] == "http.response.body"]
        assert bodies == ([b"b", b"|error"] if first else [b"a", b"b", b"|error"])
        assert send.messages[-1]["more_body"] is False
        pusher.stop()
        run.close()

    for first in (True, False):
        asyncio.run(asyncio.wait_for(body(first), 10))
