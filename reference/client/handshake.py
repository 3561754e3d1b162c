"""The handshake owner: the client's side of startup (``ECP-HS-*``), sans-IO.

The steps are the frontend skeleton's (:class:`ecp.spec.peer.FrontendPeer`,
over the frontend protocol machine); this owner feeds it what the client's
sockets receive, returns what to send, turns the machine's errors into the
client's typed ones and adds the client's policy:

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

from typing import Any, Sequence

from ecp.spec import DEFAULT_LIMITS, DecodeLimits, EngineHandshakeMetadata, HandshakeError
from ecp.spec.machine import Registration, Send
from ecp.spec.peer import FrontendPeer, HandshakeResult, Stage
from ecp.spec.peer.zmq_io import FrontendHooks

from .errors import InconsistentEngines, UnexpectedEngineIdentity

#: Stage names, in order, as :class:`~ecp.spec.HandshakeTimeout` reports them.
STAGE_HELLO = Stage.HELLO.value
STAGE_REGISTRATION = Stage.REGISTRATION.value
STAGE_READY = Stage.READY.value

__all__ = ["ClientHooks", "HandshakeOwner", "HandshakeResult", "STAGE_HELLO", "STAGE_REGISTRATION", "STAGE_READY"]


class HandshakeOwner(FrontendPeer):
    """The client's handshake with N engines: the frontend skeleton (strict) and the client's policy."""

    def __init__(self, ranks: Sequence[int], init: EngineHandshakeMetadata | None,
                 *, bootstrapped: bool = False, limits: DecodeLimits = DEFAULT_LIMITS, codec: Any = None) -> None:
        """``codec``: the release the engines speak (:func:`ecp.spec.profile.wire_codec`; 0.33's by default)."""
        super().__init__(ranks, init, clients=1, bootstrapped=bootstrapped, limits=limits, codec=codec)
        self._lora: tuple[int, tuple[bool, int]] | None = None

    def _check_identity(self, identity: bytes, where: str) -> None:
        # the machine rejects it too (ECP-HS-11); this gives the client's richer error type
        if len(identity) != 2 or int.from_bytes(identity, "little") not in self.machine.engines:
            raise UnexpectedEngineIdentity(identity, self.ranks, where)

    def on_handshake_frames(self, frames: Sequence[bytes]) -> list[list[bytes]]:
        """Handle ``[identity, payload]`` from the handshake ROUTER; return frames to send."""
        if self.bootstrapped:
            raise HandshakeError("bootstrapped mode has no handshake socket", clause="ECP-HS-7")
        self._check_identity(bytes(frames[0]) if frames else b"", "handshake message")
        self.receive("handshake", frames)
        return [send.frames for send in self.actions()]

    def on_registration(self, frames: Sequence[bytes]) -> int:
        """Handle ``[identity, ready payload]`` from the input ROUTER; return the rank."""
        self._check_identity(bytes(frames[0]) if frames else b"", "input registration")
        [event] = self.receive("input[0]", frames)
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
        self.receive("coordinator_input", frames)

    @property
    def stage(self) -> str | None:  # type: ignore[override]
        """The earliest stage some engine has not reached (its name); ``None`` when done."""
        stage = super().stage
        return None if stage is None else stage.value

    def result(self) -> HandshakeResult:
        if not self.done:
            raise HandshakeError(f"handshake incomplete at stage {self.stage}", clause="ECP-HS-8")
        return super().result()


class ClientHooks(FrontendHooks):
    """The client's part in the one frontend handshake loop (:class:`ecp.spec.peer.zmq_io.AsyncFrontendSockets`):
    every message goes through the owner's handlers -- the client's typed errors and policy, and
    the fault layer's wrapper where one is configured -- instead of the skeleton's plain receive."""

    def receive(self, peer: Any, socket: str, frames: list) -> list[Send]:
        if socket == "handshake":
            return [Send("handshake", reply) for reply in peer.on_handshake_frames(frames)]
        if socket == "coordinator_input":
            peer.on_coordinator_subscription(frames)
        else:
            peer.on_registration(frames)
        return []
