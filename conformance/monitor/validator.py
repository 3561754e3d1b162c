"""What the monitor checks each message with.

:class:`Validator` is the narrow interface the relay and the replay use: feed
it every observed message in order and it returns a :class:`Verdict` (the
message kind and the decoded message, for the counters; and the
protocol violations found, each a :class:`Finding` naming its clause).

:class:`CodecValidator` checks what ``ecp.spec``'s codec checks: every frame
list decodes as the message its socket and direction carry (frame counts,
request-type byte, field types, limits, refused pickle/ext payloads). It never
decodes a code-carrying payload. Lifecycle rules (one terminal output per
request, call ids, handshake order) are the protocol machines' business:
:class:`~ecp.conformance.monitor.machines.MachineValidator`, the default, runs
them behind the same interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from ecp.spec import COORDINATOR_READY, DEFAULT_LIMITS, CLAUSES, DecodeLimits, ProtocolError
from ecp.spec.frames import decode_frames

from .observed import (
    COORDINATOR_INPUT, COORDINATOR_OUTPUT, HANDSHAKE, INPUT, OUTPUT, TO_ENGINE, TO_FRONTEND, Observed,
)

#: (socket, direction) -> the ``ecp.spec.frames`` direction its messages decode as
SPEC_DIRECTION: dict[tuple[str, str], str] = {
    (HANDSHAKE, TO_FRONTEND): "handshake",
    (HANDSHAKE, TO_ENGINE): "init",
    (INPUT, TO_ENGINE): "input",
    (INPUT, TO_FRONTEND): "ready",
    (OUTPUT, TO_FRONTEND): "output",
    (COORDINATOR_OUTPUT, TO_FRONTEND): "output",
    (COORDINATOR_INPUT, TO_ENGINE): "input",  # START_DP_WAVE; the READY gate frame is told apart first
}

#: Kinds that are ZeroMQ or gate control frames rather than protocol messages ``ecp decode`` reads.
CONTROL_KINDS = frozenset({"subscription", "coordinator_ready", "xsub_message"})
UNDECODABLE = "undecodable"


def clause_level(clause: str) -> str:
    c = CLAUSES.get(clause)
    return c.level if c is not None else "MUST"


@dataclass(frozen=True)
class Finding:
    """One violation: the clause broken, its level, what happened, and the request
    it concerns where known. ``detail`` holds the error's structured fields."""

    clause: str
    level: str
    message: str
    request_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_error(cls, exc: ProtocolError) -> "Finding":
        return cls(exc.clause, clause_level(exc.clause), str(exc), getattr(exc, "request_id", None),
                   exc.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"clause": self.clause, "level": self.level, "message": self.message,
                "request_id": self.request_id, "detail": self.detail}


@dataclass(frozen=True)
class Verdict:
    """What a validator made of one message."""

    kind: str
    findings: tuple[Finding, ...] = ()
    #: the decoded message as the codec returns it (an ``EngineCoreRequest`` for an ADD, the id
    #: list of an ABORT, ``EngineCoreOutputs``, ...), for the counters; ``None`` when there is none
    message: Any = None


class Validator(Protocol):
    """Checks a stream of observed messages; never raises on bad traffic."""

    #: a short name for reports (``codec``, ``machines``)
    name: str

    def feed(self, msg: Observed) -> Verdict:
        """Check one message, in the order the monitor relayed them."""

    def peer_gone(self, rank: int | None) -> list[Finding]:
        """The engine of ``rank`` disconnected; return what that leaves broken."""

    def finish(self) -> list[Finding]:
        """The capture or session ended; return what is left broken."""


class CodecValidator:
    """Decodes every message with ``ecp.spec`` (see the module docstring), or with the
    ``decode`` given: one release's profile codec."""

    name = "codec"

    def __init__(self, limits: DecodeLimits = DEFAULT_LIMITS,
                 decode: Callable[[Sequence[bytes], str, DecodeLimits], Any] = decode_frames) -> None:
        self.limits = limits
        #: ``ecp.spec.frames.decode_frames``, or a release profile's ``codec.decode_frames``
        self.decode = decode

    def feed(self, msg: Observed) -> Verdict:
        frames = msg.frames
        if msg.socket == COORDINATOR_INPUT:
            if msg.direction == TO_FRONTEND:
                # XSUB -> XPUB traffic: ZeroMQ (un)subscriptions, first byte 1 or 0
                is_sub = len(frames) == 1 and frames[0][:1] in (b"\x00", b"\x01")
                return Verdict("subscription" if is_sub else "xsub_message")
            if len(frames) == 1 and frames[0] == COORDINATOR_READY:
                return Verdict("coordinator_ready")
        direction = SPEC_DIRECTION.get((msg.socket, msg.direction))
        if direction is None:  # a socket type that cannot carry this direction: nothing to decode
            return Verdict("unexpected")
        try:
            decoded = self.decode(frames, direction, self.limits)
        except ProtocolError as exc:
            return Verdict(UNDECODABLE, (Finding.from_error(exc),))
        return Verdict(decoded.kind, (), decoded.message)

    def peer_gone(self, rank: int | None) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        return []


VALIDATORS = ("machines", "codec")


def make_validator(name: str = "machines", profile: Any = None) -> Validator:
    """``machines``: the protocol machines in recording mode (every rule; the default);
    ``codec``: decoding only (faster, catches malformed frames and refused payloads only).
    ``profile``: the release both sides speak (:mod:`ecp.spec`'s when ``None``)."""
    if name == "codec":
        return CodecValidator() if profile is None else CodecValidator(decode=profile.codec.decode_frames)
    if name == "machines":
        from .machines import MachineValidator

        return MachineValidator(profile)
    raise ValueError(f"unknown validator {name!r}; one of {', '.join(VALIDATORS)}")
