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
    UtilityOutput, UtilityRequest, UtilityResult, decode_input, encode_outputs,
)
from ecp.spec.peer import WITHHOLD, Deviation, EnginePeer, Step
from ecp.spec.peer.zmq_io import AsyncEngineSockets

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


#: the handshake steps in order: ``handshake(until=STEP)`` withholds that step and every later one
STEP_ORDER = (Step.HELLO, Step.REGISTRATION, Step.SUBSCRIBE, Step.READY)


class ScriptedEngine:
    """One engine of rank ``rank`` on the engine skeleton; a ``bytes`` ready payload goes out as written."""

    def __init__(self, rank: int = 0, *, ready: EngineCoreReadyResponse | None | bytes = None,
                 local: bool = True, headless: bool = False) -> None:
        self.rank = rank
        self.ready = ready_response(rank) if ready is None else ready
        self.local = local
        self.headless = headless
        self.ctx = zmq.asyncio.Context()
        self.received: list[Received] = []
        self._until: Step | None = None
        self.peer = EnginePeer(rank, hello=Hello(local=local, headless=headless),
                               ready=Ready(local=local, headless=headless), payload=self.ready,
                               deviate=self._withhold)
        self.io = AsyncEngineSockets(self.ctx, self.peer, linger_ms={"handshake": 0, "output": 0,
                                                                     "coordinator_output": 0})

    def _withhold(self, step: Step, index: int | None) -> Deviation | None:
        if self._until is not None and STEP_ORDER.index(step) >= STEP_ORDER.index(self._until):
            return WITHHOLD
        return None

    # ------------------------------------------------------------------ handshake
    async def send_hello(self, handshake_address: str) -> None:
        """Only say HELLO (an engine the frontend must refuse never gets further)."""
        await self.io.send_actions(self.peer.start(handshake_address))

    async def handshake(self, handshake_address: str, until: Step | None = None) -> None:
        """The engine side of the handshake; ``until``: withhold that step and every later one."""
        self._until = until
        await self.io.handshake(handshake_address, RECV_TIMEOUT_S)

    async def send_ready(self) -> None:
        """READY now (``handshake(until=Step.READY)`` withheld it)."""
        self._until = None
        await self.io.send(self.peer.say_ready())

    async def bootstrap(self, input_address: str, output_address: str) -> None:
        await self.io.handshake(None, RECV_TIMEOUT_S, bootstrap=([input_address], [output_address]))

    @property
    def init(self) -> Any:
        return self.peer.init

    @property
    def dealer(self) -> zmq.asyncio.Socket | None:
        return self.io.sockets.get("input[0]")

    @property
    def push(self) -> zmq.asyncio.Socket | None:
        return self.io.sockets.get("output[0]")

    @property
    def xsub(self) -> zmq.asyncio.Socket | None:
        return self.io.sockets.get("coordinator_input")

    @property
    def coord_push(self) -> zmq.asyncio.Socket | None:
        return self.io.sockets.get("coordinator_output")

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
        self.io.close(0)
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
