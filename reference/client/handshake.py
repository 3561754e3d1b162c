"""The handshake owner: the frontend side of startup (``ECP-HS-*``), sans-IO.

Feed it what the sockets receive; it returns what to send and raises typed
errors on anything the protocol forbids:

* handshake ROUTER ``[identity, HELLO]`` → reply ``[identity, INIT]`` (``ECP-HS-1``/``-2``);
* input ROUTER ``[identity, ready payload]`` → registration (``ECP-HS-3``/``-4``);
* handshake ROUTER ``[identity, READY]`` → engine ready (``ECP-HS-5``).

The ready payload and READY travel on different sockets, so the owner accepts
them in either order once INIT went out. In bootstrapped mode there is no
handshake socket: engines with ranks ``start..start+count-1`` register
directly. Any identity outside those ranks is an error (``ECP-HS-11``); a
duplicate HELLO, registration or READY, or READY before HELLO, is an error
(``ECP-HS-7``). Engines must agree on LoRA capability (``ECP-HS-10``);
``max_model_len`` is the minimum over engines (``ECP-HS-9``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ecp.spec import (
    EngineCoreReadyResponse, EngineHandshakeMetadata, HandshakeError, Hello, Ready, decode_handshake,
    decode_ready_response, encode_handshake, rank_of_identity,
)

from .errors import InconsistentEngines, UnexpectedEngineIdentity

#: Stage names, in order, as :class:`~ecp.reference.client.errors.HandshakeTimeout` reports them.
STAGE_HELLO = "HELLO"
STAGE_REGISTRATION = "registration"
STAGE_READY = "READY"


@dataclass
class EngineState:
    """What the owner knows about one engine."""

    rank: int
    hello: Hello | None = None
    registered: bool = False
    ready_response: EngineCoreReadyResponse | None = None
    ready: Ready | None = None


@dataclass(frozen=True)
class HandshakeResult:
    """The outcome of a completed handshake."""

    ranks: tuple[int, ...]
    #: rank → ready payload (``None`` for an empty payload, ``ECP-HS-12``)
    ready_responses: dict[int, EngineCoreReadyResponse | None]
    #: minimum over engines (``ECP-HS-9``); ``None`` if every payload was empty
    max_model_len: int | None
    #: sum over engines
    num_gpu_blocks: int
    hellos: dict[int, Hello] = field(default_factory=dict)


class HandshakeOwner:
    """State machine of a frontend's startup handshake with N engines."""

    def __init__(self, ranks: Sequence[int], init: EngineHandshakeMetadata | None,
                 *, bootstrapped: bool = False) -> None:
        if not bootstrapped and init is None:
            raise ValueError("a handshake-owning client needs the INIT to send")
        self.ranks = tuple(ranks)
        self.bootstrapped = bootstrapped
        self._init_frame = None if init is None else encode_handshake(init)
        self.engines = {r: EngineState(r) for r in self.ranks}
        self._lora: tuple[int, tuple[bool, int]] | None = None

    # ------------------------------------------------------------------ inputs
    def _engine(self, identity: bytes, where: str) -> EngineState:
        try:
            rank = rank_of_identity(identity)
        except HandshakeError:
            raise UnexpectedEngineIdentity(identity, self.ranks, where) from None
        engine = self.engines.get(rank)
        if engine is None:
            raise UnexpectedEngineIdentity(identity, self.ranks, where)
        return engine

    def on_handshake_frames(self, frames: Sequence[bytes]) -> list[list[bytes]]:
        """Handle ``[identity, payload]`` from the handshake ROUTER; return frames to send."""
        if self.bootstrapped:
            raise HandshakeError("bootstrapped mode has no handshake socket", clause="ECP-HS-7")
        if len(frames) != 2:
            raise HandshakeError(f"a handshake message is exactly 1 frame after the identity, got "
                                 f"{len(frames) - 1}", clause="ECP-HS-7", expected="2 frames at the ROUTER",
                                 got=len(frames))
        identity, payload = bytes(frames[0]), frames[1]
        engine = self._engine(identity, "handshake message")
        msg = decode_handshake(payload)
        if isinstance(msg, Hello):
            if engine.hello is not None:
                raise HandshakeError(f"duplicate HELLO from rank {engine.rank}", clause="ECP-HS-7",
                                     got="HELLO")
            engine.hello = msg
            assert self._init_frame is not None
            return [[identity, self._init_frame]]
        if engine.hello is None:
            raise HandshakeError(f"READY before HELLO from rank {engine.rank}", clause="ECP-HS-7",
                                 expected="HELLO", got="READY")
        if engine.ready is not None:
            raise HandshakeError(f"duplicate READY from rank {engine.rank}", clause="ECP-HS-7", got="READY")
        engine.ready = msg
        return []

    def on_registration(self, frames: Sequence[bytes]) -> int:
        """Handle ``[identity, ready payload]`` from the input ROUTER; return the rank."""
        if len(frames) != 2:
            raise HandshakeError(f"a registration is exactly 1 frame after the identity, got "
                                 f"{len(frames) - 1}", clause="ECP-HS-3", got=len(frames))
        identity, payload = bytes(frames[0]), frames[1]
        engine = self._engine(identity, "input registration")
        if not self.bootstrapped and engine.hello is None:
            raise HandshakeError(f"registration from rank {engine.rank} before its HELLO",
                                 clause="ECP-HS-7", expected="HELLO first", got="registration")
        if engine.registered:
            raise HandshakeError(f"duplicate registration from rank {engine.rank}", clause="ECP-HS-7",
                                 got="registration")
        response = decode_ready_response(payload)
        if response is not None:
            lora = (response.supports_lora, response.max_loras)
            if self._lora is None:
                self._lora = (engine.rank, lora)
            elif self._lora[1] != lora:
                raise InconsistentEngines("LoRA capability (supports_lora, max_loras)",
                                          {self._lora[0]: self._lora[1], engine.rank: lora})
        engine.registered = True
        engine.ready_response = response
        return engine.rank

    # ------------------------------------------------------------------ progress
    def missing(self, stage: str) -> list[int]:
        """Ranks that have not yet reached ``stage``."""
        if stage == STAGE_HELLO:
            return [] if self.bootstrapped else [e.rank for e in self.engines.values() if e.hello is None]
        if stage == STAGE_REGISTRATION:
            return [e.rank for e in self.engines.values() if not e.registered]
        if stage == STAGE_READY:
            return [] if self.bootstrapped else [e.rank for e in self.engines.values() if e.ready is None]
        raise ValueError(stage)

    @property
    def stage(self) -> str | None:
        """The earliest stage some engine has not reached; ``None`` when done."""
        for stage in (STAGE_HELLO, STAGE_REGISTRATION, STAGE_READY):
            if self.missing(stage):
                return stage
        return None

    @property
    def done(self) -> bool:
        return self.stage is None

    def result(self) -> HandshakeResult:
        if not self.done:
            raise HandshakeError(f"handshake incomplete at stage {self.stage}", clause="ECP-HS-8")
        responses = {r: self.engines[r].ready_response for r in self.ranks}
        lens = [p.max_model_len for p in responses.values() if p is not None]
        return HandshakeResult(
            ranks=self.ranks,
            ready_responses=responses,
            max_model_len=min(lens) if lens else None,
            num_gpu_blocks=sum(p.num_gpu_blocks for p in responses.values() if p is not None),
            hellos={r: e.hello for r, e in self.engines.items() if e.hello is not None},
        )
