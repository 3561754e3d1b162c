"""The handshake owner: the client's side of startup (``ECP-HS-*``), sans-IO.

The rules are those of the frontend protocol machine
(:class:`ecp.spec.machine.FrontendConnection`); this owner feeds it what the
sockets receive, returns what to send and turns the machine's errors into the
client's typed ones:

* handshake ROUTER ``[identity, HELLO]`` → reply ``[identity, INIT]`` (``ECP-HS-1``/``-2``);
* input ROUTER ``[identity, ready payload]`` → registration (``ECP-HS-3``/``-4``);
* handshake ROUTER ``[identity, READY]`` → engine ready (``ECP-HS-5``).

The ready payload and READY travel on different sockets, so READY is accepted
before the registration once INIT went out. In bootstrapped mode there is no
handshake socket: engines with ranks ``start..start+count-1`` register
directly. Any identity outside those ranks is :class:`UnexpectedEngineIdentity`
(``ECP-HS-11``); a duplicate HELLO, registration or READY, or READY before HELLO,
is a :class:`~ecp.spec.HandshakeError` (``ECP-HS-7``). On top of the machine the
client requires engines to agree on LoRA capability (``ECP-HS-10``) and serves
the minimum ``max_model_len`` (``ECP-HS-9``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ecp.spec import (
    DEFAULT_LIMITS, DecodeLimits, EngineCoreReadyResponse, EngineHandshakeMetadata, HandshakeError, Hello,
)
from ecp.spec.machine import CoordinatorReady, EngineHello, FrontendConnection, Init, Registration

from .errors import InconsistentEngines, UnexpectedEngineIdentity

#: Stage names, in order, as :class:`~ecp.reference.client.errors.HandshakeTimeout` reports them.
STAGE_HELLO = "HELLO"
STAGE_REGISTRATION = "registration"
STAGE_READY = "READY"


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
    """The startup handshake of a client with N engines, over the frontend protocol machine."""

    def __init__(self, ranks: Sequence[int], init: EngineHandshakeMetadata | None,
                 *, bootstrapped: bool = False, limits: DecodeLimits = DEFAULT_LIMITS) -> None:
        if not bootstrapped and init is None:
            raise ValueError("a handshake-owning client needs the INIT to send")
        self.ranks = tuple(ranks)
        self.bootstrapped = bootstrapped
        self._init = init
        #: the protocol machine (one input socket: this client's); the client keeps serving over it
        self.machine = FrontendConnection(self.ranks, clients=1, bootstrapped=bootstrapped, limits=limits)
        self._lora: tuple[int, tuple[bool, int]] | None = None

    # ------------------------------------------------------------------ inputs
    def _check_identity(self, identity: bytes, where: str) -> None:
        # the machine rejects it too (ECP-HS-11); this gives the client's richer error type
        if len(identity) != 2 or int.from_bytes(identity, "little") not in self.machine.engines:
            raise UnexpectedEngineIdentity(identity, self.ranks, where)

    def on_handshake_frames(self, frames: Sequence[bytes]) -> list[list[bytes]]:
        """Handle ``[identity, payload]`` from the handshake ROUTER; return frames to send."""
        if self.bootstrapped:
            raise HandshakeError("bootstrapped mode has no handshake socket", clause="ECP-HS-7")
        self._check_identity(bytes(frames[0]) if frames else b"", "handshake message")
        replies: list[list[bytes]] = []
        for event in self.machine.receive("handshake", frames):
            if isinstance(event, EngineHello):
                assert self._init is not None
                replies += [send.frames for send in self.machine.send(Init(event.rank, self._init))]
        return replies

    def on_registration(self, frames: Sequence[bytes]) -> int:
        """Handle ``[identity, ready payload]`` from the input ROUTER; return the rank."""
        self._check_identity(bytes(frames[0]) if frames else b"", "input registration")
        [event] = self.machine.receive("input[0]", frames)
        assert isinstance(event, Registration)
        response = event.response
        if response is not None:
            lora = (response.supports_lora, response.max_loras)
            if self._lora is None:
                self._lora = (event.rank, lora)
            elif self._lora[1] != lora:
                raise InconsistentEngines("LoRA capability (supports_lora, max_loras)",
                                          {self._lora[0]: self._lora[1], event.rank: lora})
        return event.rank

    def on_coordinator_subscription(self, frames: Sequence[bytes]) -> None:
        """A frame the coordinator's XPUB received (the engines' ``01`` subscriptions)."""
        self.machine.receive("coordinator_input", frames)

    def coordinator_gate_opened(self) -> None:
        """The coordinator published ``READY`` (``ECP-HS-6``): engines may now send READY.

        The coordinator puts the frame on its own socket; the machine only checks the
        gate opened after every subscription and records it."""
        self.machine.send(CoordinatorReady())

    # ------------------------------------------------------------------ progress
    def missing(self, stage: str) -> list[int]:
        """Ranks that have not yet reached ``stage``."""
        return self.machine.missing(stage)

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
        engines = self.machine.engines
        responses = {r: engines[r].responses.get(0) for r in self.ranks}
        lens = [p.max_model_len for p in responses.values() if p is not None]
        return HandshakeResult(
            ranks=self.ranks,
            ready_responses=responses,
            max_model_len=min(lens) if lens else None,
            num_gpu_blocks=sum(p.num_gpu_blocks for p in responses.values() if p is not None),
            hellos={r: v.hello for r, v in engines.items() if v.hello is not None},
        )
