"""The frontend role's scripted engine, driven by a raw handshake owner built on ecp.spec.

The test plays a frontend with plain pyzmq sockets (ROUTER handshake, ROUTER
input, PULL output) so that the engine is checked against the wire, not
against another component of the harness.
"""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from ecp.conformance.frontend.scripted_engines import ScriptedEngine
from ecp.conformance.frontend.script import EngineScript, UtilityFailure
from ecp.spec import (
    ENGINE_DEAD, EngineCoreRequest, EngineHandshakeMetadata, EngineZmqAddresses, FinishReason, Hello, Ready,
    SamplingParams, decode_outputs, encode_abort, encode_add,
    encode_utility, engine_identity,
)
from ecp.spec.peer import FrontendPeer

T = 5.0  # bound of every wait


def request(rid: str, max_tokens: int, prompt: list[int] | None = None, **kw) -> EngineCoreRequest:
    return EngineCoreRequest(rid, prompt or [5, 6, 7], None, SamplingParams(max_tokens=max_tokens), None,
                             1.7e9, None, None, None, **kw)


class RawFrontend:
    """A handshake owner with one client, written directly against ecp.spec."""

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.hs = ctx.socket(zmq.ROUTER)
        self.port = self.hs.bind_to_random_port("tcp://127.0.0.1")
        self.inp = ctx.socket(zmq.ROUTER)
        self.inp_port = self.inp.bind_to_random_port("tcp://127.0.0.1")
        self.out = ctx.socket(zmq.PULL)
        self.out_port = self.out.bind_to_random_port("tcp://127.0.0.1")
        for s in (self.hs, self.inp, self.out):
            s.setsockopt(zmq.LINGER, 0)

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    async def handshake(self) -> tuple[bytes, Hello, object, Ready]:
        """The frontend side of the handshake, through the frontend skeleton (strict: a step out of
        order or a malformed message fails the test)."""
        frames = await asyncio.wait_for(self.hs.recv_multipart(), T)
        rank = int.from_bytes(frames[0], "little")
        init = EngineHandshakeMetadata(EngineZmqAddresses([f"tcp://127.0.0.1:{self.inp_port}"],
                                                          [f"tcp://127.0.0.1:{self.out_port}"]), {})
        peer = FrontendPeer([rank], init)
        self.machine = peer.machine
        [hello] = peer.receive("handshake", frames)
        for send in peer.actions():  # INIT
            await self.hs.send_multipart(send.frames)
        [registration] = peer.receive("input[0]", await asyncio.wait_for(self.inp.recv_multipart(), T))
        [ready] = peer.receive("handshake", await asyncio.wait_for(self.hs.recv_multipart(), T))
        assert peer.done
        return frames[0], hello.hello, registration.response, ready.ready

    async def outputs(self):
        return decode_outputs(await asyncio.wait_for(self.out.recv_multipart(), T))

    def close(self) -> None:
        for s in (self.hs, self.inp, self.out):
            s.close(0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def with_engine(script: EngineScript, body, rank: int = 0):
    async def main():
        ctx = zmq.asyncio.Context()
        fe = RawFrontend(ctx)
        engine = ScriptedEngine(ctx, rank, 1, fe.address, script)
        engine.start(T)
        try:
            return await body(fe, engine)
        finally:
            await engine.stop()
            fe.close()
            ctx.term()
    return run(main())


def test_handshake_as_a_remote_headless_engine():
    async def body(fe, engine):
        ident, hello, payload, ready = await fe.handshake()
        await engine.wait_registered(T)
        return ident, hello, payload, ready, engine
    ident, hello, payload, ready, engine = with_engine(EngineScript(), body, rank=1)
    assert ident == engine_identity(1)
    assert (hello.local, hello.headless) == (False, True)
    assert (ready.local, ready.headless) == (False, True)
    assert payload.data_parallel_rank == 1 and payload.max_model_len > 0
    assert engine.init.addresses.inputs and engine.recorder.records[0].channel == "handshake"


def test_tokens_length_and_held_requests_and_abort():
    async def body(fe, engine):
        ident, *_ = await fe.handshake()
        await fe.inp.send_multipart([ident, *encode_add(request("short", 2, [9, 8]))])
        await fe.inp.send_multipart([ident, *encode_add(request("long", 50))])
        tokens: dict[str, list[int]] = {"short": [], "long": []}
        finish = {}
        while len(tokens["long"]) < 1 or "short" not in finish:
            outs = await fe.outputs()
            for o in outs.outputs:
                tokens[o.request_id] += o.new_token_ids
                if o.finish_reason is not None:
                    finish[o.request_id] = o.finish_reason
        await engine.recorder.wait_for(lambda: not engine.generation.runnable, T)
        held = dict(engine.generation.active)
        await fe.inp.send_multipart([ident, *encode_abort(["long", "unknown"])])
        await engine.recorder.wait_for(lambda: engine.recorder.aborts(), T)
        return tokens, finish, held, engine
    tokens, finish, held, engine = with_engine(EngineScript(hold_after=2), body)
    assert tokens["short"] == [9, 8] and finish == {"short": FinishReason.LENGTH}   # echo of the prompt
    assert list(held) == ["long"] and held["long"].emitted == 2                         # held after 2 tokens
    assert engine.generation.aborted_ids == {"long"} and engine.generation.finished_ids == {"short"}
    assert engine.recorder.aborted_ids() == ["long", "unknown"]


def test_utility_answers_failures_and_abort_immediately_and_death():
    answers = {"is_sleeping": True, "reset_prefix_cache": UtilityFailure("no cache")}

    async def body(fe, engine):
        ident, *_ = await fe.handshake()
        await fe.inp.send_multipart([ident, *encode_utility(0, 2**64 - 1, "is_sleeping")])
        first = await fe.outputs()
        await fe.inp.send_multipart([ident, *encode_utility(0, 7, "reset_prefix_cache", [False, False])])
        second = await fe.outputs()
        await fe.inp.send_multipart([ident, *encode_add(request("notice", 1, [0], abort_immediately=True))])
        await fe.inp.send_multipart([ident, b"\x07", b"junk"])        # undecodable: recorded, engine survives
        await fe.inp.send_multipart([ident, *encode_utility(0, 8, "no_such_method")])
        third = await fe.outputs()
        await engine.die()
        dead = await fe.outputs()
        return first, second, third, dead, engine
    first, second, third, dead, engine = with_engine(EngineScript(utility_answers=answers), body)
    assert first.utility_output.call_id == 2**64 - 1 and first.utility_output.result.value is True
    assert second.utility_output.failure_message == "no cache" and second.utility_output.result is None
    assert third.utility_output.call_id == 8 and third.utility_output.result.value is None
    assert dead is ENGINE_DEAD
    assert engine.generation.immediately_aborted_ids == ["notice"] and not engine.generation.finished_ids
    assert len(engine.recorder.decode_errors()) == 1
    assert engine.recorder.decode_errors()[0].error.clause == "ECP-FRAME-1"


def test_engine_reports_a_frontend_that_never_answers_hello():
    async def main():
        ctx = zmq.asyncio.Context()
        engine = ScriptedEngine(ctx, 0, 1, "tcp://127.0.0.1:9", EngineScript())   # nobody listens there
        engine.start(0.3)
        try:
            with pytest.raises(Exception, match="no INIT"):
                await engine.wait_registered(T)
        finally:
            await engine.stop()
            ctx.term()
    run(main())


def test_coordinator_gate_holds_ready_until_the_coordinator_publishes_ready():
    async def main():
        ctx = zmq.asyncio.Context()
        fe = RawFrontend(ctx)
        xpub = ctx.socket(zmq.XPUB)
        xpub_port = xpub.bind_to_random_port("tcp://127.0.0.1")
        pull = ctx.socket(zmq.PULL)
        pull_port = pull.bind_to_random_port("tcp://127.0.0.1")
        engine = ScriptedEngine(ctx, 0, 1, fe.address, EngineScript())
        engine.start(T)
        try:
            peer = FrontendPeer([0], EngineHandshakeMetadata(EngineZmqAddresses(
                [f"tcp://127.0.0.1:{fe.inp_port}"], [f"tcp://127.0.0.1:{fe.out_port}"],
                f"tcp://127.0.0.1:{xpub_port}", f"tcp://127.0.0.1:{pull_port}"), {}))
            peer.receive("handshake", await asyncio.wait_for(fe.hs.recv_multipart(), T))
            for send in peer.actions():                                    # INIT
                await fe.hs.send_multipart(send.frames)
            peer.receive("input[0]", await asyncio.wait_for(fe.inp.recv_multipart(), T))   # ready payload
            subscription = await asyncio.wait_for(xpub.recv(), T)          # engine subscribed
            peer.receive("coordinator_input", [subscription])
            early = await fe.hs.poll(0)                                    # READY must still be held
            assert peer.gate_due
            for send in peer.open_gate():
                await xpub.send_multipart(send.frames)
            [ready] = peer.receive("handshake", await asyncio.wait_for(fe.hs.recv_multipart(), T))
            await engine.wait_registered(T)
            assert peer.done and not peer.machine.violations
            return subscription, early, ready.ready
        finally:
            await engine.stop()
            fe.close()
            xpub.close(0)
            pull.close(0)
            ctx.term()
    subscription, early, ready = run(main())
    assert subscription == b"\x01" and early == 0 and isinstance(ready, Ready)
