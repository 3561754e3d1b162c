"""What a peer skeleton asks its caller to do: the actions and the steps.

A skeleton (:class:`~.engine.EnginePeer`, :class:`~.frontend.FrontendPeer`)
never touches a socket. It hands its caller *actions* -- :class:`Connect` a
socket, :class:`~ecp.spec.machine.Send` frames on one -- and says what it
:class:`Wait`\\ s for next; the caller moves the bytes and feeds back what
arrived. The handshake *steps* (:class:`Step`) are named so that a peer that
misbehaves on purpose (a conformance self-proof's faulty engine) can replace
one with a :class:`Deviation` instead of writing the handshake again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, Union

from ..machine.events import Send

#: the ZeroMQ socket types of the protocol (``ECP-SOCK-1``..``-3``)
SocketKind = Literal["DEALER", "ROUTER", "PUSH", "PULL", "XSUB", "XPUB"]


@dataclass(frozen=True)
class Connect:
    """Connect a ``kind`` socket named ``socket`` to ``address``; a DEALER or XSUB of an
    engine carries ``identity`` (its 2-byte rank, ``ECP-SOCK-2``)."""

    socket: str
    kind: SocketKind
    address: str
    identity: bytes | None = None


Action = Union[Connect, Send]


class Stage(str, enum.Enum):
    """What a skeleton waits for (the stages ``ECP-HS-8`` bounds)."""

    INIT = "INIT"
    GATE = "the coordinator's READY"
    HELLO = "HELLO"
    REGISTRATION = "registration"
    READY = "READY"


@dataclass(frozen=True)
class Wait:
    """The caller should receive on ``socket`` until ``stage`` is reached (or its budget ends)."""

    socket: str
    stage: Stage


class Step(str, enum.Enum):
    """The engine's handshake messages, in order (spec/PROTOCOL.md section 2)."""

    HELLO = "HELLO"
    REGISTRATION = "registration"
    SUBSCRIBE = "coordinator subscription"
    READY = "READY"


@dataclass(frozen=True)
class Deviation:
    """What a deliberately faulty peer does instead of one :class:`Step` (test peers only).

    ``repeat``: how many times the step's correct message goes out (0: withheld, 2: sent twice).
    ``raw``: one message sent instead of the correct one; the machine follows what it says.
    ``before``: messages put on the wire before the step and hidden from the machine (an order
    error whose effect the peer's own view must not follow).
    ``force``: the correct message goes out even where the rules forbid it now (READY before
    every input registered); the machine follows it.
    """

    repeat: int = 1
    raw: tuple[bytes, ...] | None = None
    before: tuple[Send, ...] = ()
    force: bool = False


#: the common deviations
WITHHOLD = Deviation(repeat=0)
TWICE = Deviation(repeat=2)
FORCE = Deviation(force=True)
