"""A frontend machine and N engine machines wired back to back, no sockets: what one sends the
other receives (ROUTER identities added and stripped as ZeroMQ would)."""

from __future__ import annotations

from typing import Sequence

from ecp.spec import (
    EngineCoreOutput, EngineCoreOutputs, EngineCoreReadyResponse, EngineCoreRequest, EngineHandshakeMetadata,
    EngineZmqAddresses, FinishReason, Hello, Ready, RequestError, SamplingParams, UtilityOutput, UtilityResult,
)
from ecp.spec.control import UtilityRequest
from ecp.spec.machine import (
    Add, CoordinatorReady, CoordinatorSubscribe, EngineConnection, EngineHello, EngineReady, FrontendConnection,
    Init, Outputs, Registration, Send, UtilityCall,
)


def ready_response(rank: int) -> EngineCoreReadyResponse:
    return EngineCoreReadyResponse(
        max_model_len=256, num_gpu_blocks=64, block_size=16, dp_stats_address=None, dtype="float32",
        vllm_version="0.33.0", world_size=1, data_parallel_size=1, tensor_parallel_size=1,
        pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=rank, max_num_seqs=8,
        max_num_batched_tokens=512, instance_id=f"e{rank}", supports_lora=False, max_loras=0)


def request(rid: str, client: int = 0, abort_immediately: bool = False, wave: int = 0) -> EngineCoreRequest:
    return EngineCoreRequest(
        request_id=rid, prompt_token_ids=[1, 2, 3], mm_features=None,
        sampling_params=SamplingParams(max_tokens=4), pooling_params=None, arrival_time=0.0, lora_request=None,
        cache_salt=None, data_parallel_rank=None, client_index=client, current_wave=wave,
        abort_immediately=abort_immediately)


def out(rank: int, rid: str, finish: FinishReason | None = None, error: bool = False) -> EngineCoreOutputs:
    return EngineCoreOutputs(engine_index=rank, outputs=[EngineCoreOutput(
        rid, [7] if finish is None else [], finish_reason=finish,
        error=RequestError("bad", "bad") if error else None)])


def reply(rank: int, call_id: int, value=None, failure: str | None = None) -> EngineCoreOutputs:
    return EngineCoreOutputs(engine_index=rank, utility_output=UtilityOutput(
        call_id, failure, None if failure is not None else UtilityResult(None, value)))


class Pair:
    """Frontend machine + engine machines; :meth:`f` and :meth:`e` send and deliver."""

    def __init__(self, ranks: Sequence[int] = (0,), clients: int = 1, coordinator: bool = False,
                 frontend_mode: str = "strict", engine_mode: str = "strict", codec=None) -> None:
        self.fe = FrontendConnection(ranks, mode=frontend_mode, codec=codec)
        self.engines = {r: EngineConnection(r, mode=engine_mode, codec=codec) for r in ranks}
        self.clients = clients
        self.coordinator = coordinator

    def deliver_to_engine(self, rank: int, sends: list[Send]) -> list:
        events = []
        for s in sends:
            if s.socket == "coordinator_input":
                for r in self.engines:
                    events += self.engines[r].receive(s.socket, s.frames)
            else:
                events += self.engines[rank].receive(s.socket, s.frames[1:])  # the ROUTER strips the identity
        return events

    def deliver_to_frontend(self, rank: int, sends: list[Send]) -> list:
        events = []
        ident = rank.to_bytes(2, "little")
        for s in sends:
            if s.socket == "handshake" or s.socket.startswith("input["):
                events += self.fe.receive(s.socket, [ident, *s.frames])
            else:
                events += self.fe.receive(s.socket, s.frames)
        return events

    def f(self, event) -> list:
        """The frontend sends ``event``; the engine(s) receive it."""
        return self.deliver_to_engine(event.rank, self.fe.send(event))

    def e(self, event) -> list:
        """Engine ``event.rank`` sends ``event``; the frontend receives it."""
        return self.deliver_to_frontend(event.rank, self.engines[event.rank].send(event))

    def init(self) -> EngineHandshakeMetadata:
        coord = ("ipc://ci", "ipc://co") if self.coordinator else (None, None)
        return EngineHandshakeMetadata(EngineZmqAddresses(
            inputs=[f"ipc://in{i}" for i in range(self.clients)],
            outputs=[f"ipc://out{i}" for i in range(self.clients)],
            coordinator_input=coord[0], coordinator_output=coord[1]), parallel_config={})

    def handshake(self) -> None:
        for r in self.engines:
            self.e(EngineHello(r, Hello(local=True, headless=False)))
            self.f(Init(r, self.init()))
            for c in range(self.clients):
                self.e(Registration(r, c, ready_response(r)))
        if self.coordinator:
            for r in self.engines:
                self.e(CoordinatorSubscribe(r))
            self.f(CoordinatorReady())
        for r in self.engines:
            self.e(EngineReady(r, Ready(local=True, headless=False)))

    def add(self, rank: int, rid: str, **kw) -> None:
        self.f(Add(rank, request(rid, **kw)))

    def call(self, rank: int, call_id: int, method: str, args=()) -> None:
        self.f(UtilityCall(rank, UtilityRequest(0, call_id, method, list(args))))

    def output(self, rank: int, msg: EngineCoreOutputs, client: int = 0) -> list:
        return self.e(Outputs(rank, client, msg))
