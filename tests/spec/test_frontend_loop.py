"""The one frontend handshake loop (ecp.spec.peer.zmq_io.FrontendSockets) over real inproc sockets:
its hooks see every frame both ways, other sockets' messages go to ``other``, ``finished`` ends it,
and each budget names the stage that ran out."""

from __future__ import annotations

import asyncio
import threading

import pytest
import zmq
import zmq.asyncio

from ecp.spec import (
    EngineCoreReadyResponse, EngineHandshakeMetadata, EngineZmqAddresses, HandshakeTimeout, Hello, Ready,
    encode_handshake, engine_identity,
)
from ecp.spec.peer import EnginePeer, FrontendPeer, Stage
from ecp.spec.peer.zmq_io import AsyncFrontendSockets, EngineSockets, FrontendHooks, FrontendSockets

PAYLOAD = EngineCoreReadyResponse(
    max_model_len=64, num_gpu_blocks=8, block_size=16, dp_stats_address=None, dtype="float32",
    vllm_version="0.33.0", world_size=1, data_parallel_size=1, tensor_parallel_size=1, pipeline_parallel_size=1,
    decode_context_parallel_size=1, data_parallel_rank=0, max_num_seqs=8, max_num_batched_tokens=64,
    instance_id="t", supports_lora=False, max_loras=0)


class Bound:
    """A frontend's bound sockets (handshake ROUTER, input ROUTER, output PULL) on one context."""

    def __init__(self, ctx: zmq.Context, tag: str) -> None:
        self.sockets = {}
        for name, kind in (("handshake", zmq.ROUTER), ("input[0]", zmq.ROUTER), ("output[0]", zmq.PULL)):
            sock = ctx.socket(kind)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(f"inproc://loop-{tag}-{name}")
            self.sockets[name] = sock
        self.init = EngineHandshakeMetadata(EngineZmqAddresses(
            [f"inproc://loop-{tag}-input[0]"], [f"inproc://loop-{tag}-output[0]"]), {})
        self.address = f"inproc://loop-{tag}-handshake"

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(0)


def engine(**kw) -> EnginePeer:
    return EnginePeer(0, hello=Hello(local=False, headless=True), ready=Ready(local=False, headless=True),
                      payload=PAYLOAD, **kw)


class Seen(FrontendHooks):
    def __init__(self) -> None:
        self.frames: list[tuple[str, str]] = []
        self.others: list[tuple[str, list]] = []

    def receive(self, peer, socket, frames):
        self.frames.append(("in", socket))
        return super().receive(peer, socket, frames)

    def sent(self, socket, frames):
        self.frames.append(("out", socket))

    def other(self, socket, frames):
        self.others.append((socket, frames))


def test_the_loop_shows_its_hooks_every_frame_and_hands_other_sockets_to_them():
    ctx = zmq.Context()
    bound = Bound(ctx, "hooks")
    io = EngineSockets(ctx, engine(), linger_ms={"output": 0})
    try:
        thread = threading.Thread(target=io.handshake, args=(bound.address, 5.0))
        thread.start()
        hooks = Seen()
        result = FrontendSockets(FrontendPeer([0], bound.init), bound.sockets, hooks).handshake(5.0)
        thread.join(5)
        assert result is not None and result.max_model_len == 64
        # HELLO, its INIT, then the registration and READY (in either order: they come on two sockets)
        assert hooks.frames[:2] == [("in", "handshake"), ("out", "handshake")]
        assert sorted(hooks.frames[2:]) == [("in", "handshake"), ("in", "input[0]")]
        # a socket outside the handshake is polled too: what it gets goes to ``other``
        io.sockets["output[0]"].send_multipart([b"early"])
        peer = FrontendPeer([0], bound.init)

        class UntilOther(Seen):
            def finished(self, peer, now):
                return bool(self.others)

        until = UntilOther()
        assert FrontendSockets(peer, bound.sockets, until).handshake(5.0) is None  # ended by its hook
        assert until.others == [("output[0]", [b"early"])] and until.frames == []
    finally:
        io.close(0)
        bound.close()
        ctx.term()


def test_each_budget_names_its_stage_and_the_missing_ranks():
    ctx = zmq.Context()
    bound = Bound(ctx, "budget")
    try:
        with pytest.raises(HandshakeTimeout) as nobody:
            FrontendSockets(FrontendPeer([0], bound.init), bound.sockets).handshake(0.05)
        assert (nobody.value.stage, nobody.value.missing_ranks, nobody.value.timeout_s) == ("HELLO", [0], 0.05)
        # HELLO came: the rest gets ready_timeout_s from then on, and the timeout names what is missing
        dealer = ctx.socket(zmq.DEALER)  # an engine that says HELLO and nothing more
        dealer.setsockopt(zmq.IDENTITY, engine_identity(0))
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(bound.address)
        dealer.send(encode_handshake(Hello(local=False, headless=True)))
        with pytest.raises(HandshakeTimeout) as unregistered:
            FrontendSockets(FrontendPeer([0], bound.init), bound.sockets).handshake(5.0, ready_timeout_s=0.1)
        assert (unregistered.value.stage, unregistered.value.timeout_s) == (Stage.REGISTRATION.value, 0.1)
        dealer.close(0)
    finally:
        bound.close()
        ctx.term()


def test_the_asyncio_driver_runs_the_same_loop():
    async def main() -> None:
        actx = zmq.asyncio.Context()
        bound = Bound(actx, "async")
        ctx = zmq.Context.shadow(actx.underlying)
        io = EngineSockets(ctx, engine(), linger_ms={"output": 0})
        thread = threading.Thread(target=io.handshake, args=(bound.address, 5.0))
        thread.start()
        hooks = Seen()
        try:
            result = await AsyncFrontendSockets(FrontendPeer([0], bound.init), bound.sockets, hooks).handshake(5.0)
            assert result is not None and result.ranks == (0,)
            assert ("out", "handshake") in hooks.frames
        finally:
            await asyncio.to_thread(thread.join, 5)
            io.close(0)
            bound.close()
            actx.term()

    asyncio.run(main())
