"""Scripted raw-frame engines for the client tests, built on ``ecp.spec`` + pyzmq only.

A :class:`ScriptedEngine` does exactly what a test tells it: the handshake
(HELLO, INIT, ready payload, READY), then receiving input messages (every
frame recorded with its arrival time) and sending outputs or raw frames. It
shares nothing with the client under test.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import msgspec
import zmq
import zmq.asyncio

from ecp.spec import (
    EngineCoreOutput, EngineCoreOutputs, EngineCoreReadyResponse, FinishReason, Hello, Ready,
    UtilityOutput, UtilityRequest, UtilityResult, decode_input, encode_outputs, engine_identity,
)
from ecp.spec.machine import (
    CoordinatorReady, CoordinatorSubscribe, EngineConnection, EngineHello, EngineReady, Registration,
)

RECV_TIMEOUT_S = 10.0


def ready_response(rank: int = 0, **overrides: Any) -> EngineCoreReadyResponse:
    fields = dict(
        max_model_len=256, num_gpu_blocks=8192, block_size=16, dp_stats_address=None, dtype="float32",
        vllm_version="0.33.0", world_size=1, data_parallel_size=1, tensor_parallel_size=1,
        pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=rank,
        max_num_seqs=128, max_num_batched_tokens=2048, instance_id=f"scripted-{rank}",
        supports_lora=False, max_loras=0,
    )
    fields.update(overrides)
    return EngineCoreReadyResponse(**fields)


def token_output(request_id: str, tokens: list[int], finish: FinishReason | None = None) -> EngineCoreOutput:
    return EngineCoreOutput(request_id=request_id, new_token_ids=tokens, finish_reason=finish)


class Received:
    """One input message as the engine DEALER saw it."""

    def __init__(self, frames: list[bytes], at: float) -> None:
        self.frames = frames
        self.at = at  # time.monotonic() on arrival
        self.message = decode_input(frames)

    @property
    def type(self) -> bytes:
        return self.frames[0]


class ScriptedEngine:
    def __init__(self, rank: int = 0, *, ready: EngineCoreReadyResponse | None | bytes = None,
                 local: bool = True, headless: bool = False) -> None:
        self.rank = rank
        self.identity = engine_identity(rank)
        self.ready = ready_response(rank) if ready is None else ready
        self.local = local
        self.headless = headless
        self.ctx = zmq.asyncio.Context()
        self.handshake_sock: zmq.asyncio.Socket | None = None
        self.dealer: zmq.asyncio.Socket | None = None
        self.push: zmq.asyncio.Socket | None = None
        self.init = None
        self.received: list[Received] = []
        #: the engine side of the protocol; a ``bytes`` ready payload goes around it (send_raw)
        self.machine = EngineConnection(rank)

    # ------------------------------------------------------------------ handshake
    async def send_hello(self, handshake_address: str) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.identity)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(handshake_address)
        self.handshake_sock = sock
        [hello] = self.machine.send(EngineHello(self.rank, Hello(local=self.local, headless=self.headless)))
        await sock.send_multipart(hello.frames)

    async def hello(self, handshake_address: str) -> None:
        """Send HELLO and wait for INIT."""
        await self.send_hello(handshake_address)
        assert self.handshake_sock is not None
        frames = await asyncio.wait_for(self.handshake_sock.recv_multipart(), RECV_TIMEOUT_S)
        [init] = self.machine.receive("handshake", frames)
        self.init = init.init

    def connect_io(self, input_address: str, output_address: str) -> None:
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.IDENTITY, self.identity)
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.connect(input_address)
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(output_address)

    async def register(self) -> None:
        assert self.dealer is not None
        if isinstance(self.ready, bytes):
            send = self.machine.send_raw("input[0]", [self.ready])
        else:
            [send] = self.machine.send(Registration(self.rank, 0, self.ready))
        await self.dealer.send_multipart(send.frames)

    async def join_coordinator(self, timeout: float = RECV_TIMEOUT_S) -> None:
        """Subscribe to INIT's coordinator and wait for its READY (``ECP-HS-6``)."""
        a = self.init.addresses
        self.xsub = self.ctx.socket(zmq.XSUB)
        self.xsub.setsockopt(zmq.LINGER, 0)
        self.xsub.connect(a.coordinator_input)
        [subscribe] = self.machine.send(CoordinatorSubscribe(self.rank))
        await self.xsub.send_multipart(subscribe.frames)
        gate = False
        while not gate:
            frames = await asyncio.wait_for(self.xsub.recv_multipart(), timeout)
            gate = any(isinstance(e, CoordinatorReady) for e in self.machine.receive("coordinator_input", frames))

    async def send_ready(self) -> None:
        assert self.handshake_sock is not None
        [ready] = self.machine.send(EngineReady(self.rank, Ready(local=self.local, headless=self.headless)))
        await self.handshake_sock.send_multipart(ready.frames)

    async def handshake(self, handshake_address: str) -> None:
        """The whole engine side of the handshake."""
        await self.hello(handshake_address)
        a = self.init.addresses
        self.connect_io(a.inputs[0], a.outputs[0])
        await self.register()
        await self.send_ready()

    async def bootstrap(self, input_address: str, output_address: str) -> None:
        self.machine = EngineConnection(self.rank, bootstrapped=True, clients=1)
        self.connect_io(input_address, output_address)
        await self.register()

    # ------------------------------------------------------------------ traffic
    async def recv(self, timeout: float = RECV_TIMEOUT_S) -> Received:
        assert self.dealer is not None
        frames = await asyncio.wait_for(self.dealer.recv_multipart(), timeout)
        got = Received(frames, time.monotonic())
        self.received.append(got)
        return got

    async def recv_n(self, n: int, timeout: float = RECV_TIMEOUT_S) -> list[Received]:
        deadline = time.monotonic() + timeout
        return [await self.recv(max(0.001, deadline - time.monotonic())) for _ in range(n)]

    async def expect_silence(self, seconds: float) -> None:
        """Assert nothing arrives within ``seconds`` (used only to prove an absence)."""
        assert self.dealer is not None
        assert await self.dealer.poll(int(seconds * 1000)) == 0, "unexpected input message"

    async def send(self, outputs: EngineCoreOutputs) -> None:
        assert self.push is not None
        await self.push.send_multipart(encode_outputs(outputs))

    async def send_outputs(self, *outputs: EngineCoreOutput, **fields: Any) -> None:
        await self.send(EngineCoreOutputs(engine_index=self.rank, outputs=list(outputs), **fields))

    async def send_raw(self, frames: list[bytes]) -> None:
        assert self.push is not None
        await self.push.send_multipart(frames)

    async def answer_utility(self, value: Any = None, failure: str | None = None,
                             envelope: bool = True) -> UtilityRequest:
        """Receive one UTILITY call and answer it."""
        got = await self.recv()
        assert isinstance(got.message, UtilityRequest), got.message
        call = got.message
        result = UtilityResult(None, value) if envelope and failure is None else None
        await self.send(EngineCoreOutputs(engine_index=self.rank,
                                          utility_output=UtilityOutput(call.call_id, failure, result)))
        return got.message

    async def serve_utilities(self, answer: Callable[[str, list[Any]], Any], count: int) -> list[str]:
        methods = []
        for _ in range(count):
            got = await self.recv()
            call = got.message
            methods.append(call.method_name)
            await self.send(EngineCoreOutputs(
                engine_index=self.rank,
                utility_output=UtilityOutput(call.call_id, None, UtilityResult(None, answer(call.method_name,
                                                                                            call.args)))))
        return methods

    def close(self) -> None:
        for sock in (self.handshake_sock, self.dealer, self.push):
            if sock is not None:
                sock.close(linger=0)
        self.ctx.term()


def plain(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


# ---------------------------------------------------------------------- client fixtures
def run(coro: Any, timeout: float = 60.0) -> Any:
    """Run one test coroutine with an overall bound."""
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def start_client(n: int = 1, engines: list[ScriptedEngine] | None = None, **config: Any):
    """Bind a client, handshake ``n`` scripted engines, return ``(client, engines)``."""
    from ecp.reference.client import ClientConfig, EngineCoreClient

    config.setdefault("handshake_timeout_s", 10.0)
    config.setdefault("ready_timeout_s", 10.0)
    config.setdefault("utility_timeout_s", 10.0)
    start = config.get("engine_start_index", 0)
    client = EngineCoreClient(ClientConfig(engine_count=n, **config))
    await client.bind()
    engines = engines or [ScriptedEngine(start + i) for i in range(n)]
    try:
        await asyncio.gather(client.wait_ready(), *(e.handshake(client.handshake_address) for e in engines))
    except BaseException:
        await client.shutdown()
        for e in engines:
            e.close()
        raise
    return client, engines


async def stop(client: Any, engines: list[ScriptedEngine]) -> None:
    await client.shutdown()
    for e in engines:
        e.close()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait (bounded) for a condition that no message signals, e.g. a counter in another loop."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)
