"""The events of the protocol machines: one class per thing a peer can say.

Both roles use the same events (as h11 does): a frontend *sends* ``Init``,
``Add``, ``Abort``, ``UtilityCall``, ``StartWave`` and ``CoordinatorReady`` and
*receives* the others; an engine the reverse. Each event names the engine it
concerns (``rank``, its global DP rank) and, where the protocol has one
socket per client, the ``client`` (an index into INIT's ``inputs``/``outputs``;
``-1`` is the DP coordinator). Payloads are the typed messages of
:mod:`ecp.spec`; nothing here encodes or decodes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Union

from ..control import StartDPWave, UtilityRequest
from ..handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from ..outputs import EngineCoreOutputs
from ..request import EngineCoreRequest

#: ``client`` of an output that goes to the DP coordinator, not a frontend (``ECP-OUT-6``)
COORDINATOR = -1


@dataclass(frozen=True)
class EngineHello:
    """HELLO, engine → frontend, handshake socket (``ECP-HS-1``)."""

    rank: int
    hello: Hello


@dataclass(frozen=True)
class Init:
    """INIT, frontend → engine, handshake socket (``ECP-HS-2``)."""

    rank: int
    init: EngineHandshakeMetadata


@dataclass(frozen=True)
class Registration:
    """The ready payload, engine → frontend, as the first message on input ``client``
    (``ECP-HS-3``). ``response`` is ``None`` for an empty payload (``ECP-HS-12``)."""

    rank: int
    client: int
    response: EngineCoreReadyResponse | None


@dataclass(frozen=True)
class CoordinatorSubscribe:
    """The XSUB subscribe frame ``01``, engine → coordinator (``ECP-HS-6``).

    A frontend's XPUB cannot tell engines apart: there ``rank`` is ``-1``."""

    rank: int


@dataclass(frozen=True)
class CoordinatorReady:
    """The coordinator's single frame ``READY`` that opens the gate (``ECP-HS-6``).

    It is published to every engine at once: a frontend sends it with ``rank`` ``-1``."""

    rank: int = -1


@dataclass(frozen=True)
class EngineReady:
    """READY, engine → frontend, handshake socket (``ECP-HS-5``)."""

    rank: int
    ready: Ready


@dataclass(frozen=True)
class Add:
    """ADD on input ``client`` (default: the request's ``client_index``, ``ECP-REQ-6``)."""

    rank: int
    request: EngineCoreRequest
    client: int | None = None
    #: set by an engine's machine on receipt: the id is in flight at this engine, so the ADD
    #: leaves the running request alone and is answered with one ERROR output (``ECP-REQ-2``)
    duplicate: bool = False

    @property
    def on_client(self) -> int:
        return self.request.client_index if self.client is None else self.client


@dataclass(frozen=True)
class Abort:
    """ABORT of ``request_ids`` on input ``client`` (``ECP-ABORT-1``)."""

    rank: int
    request_ids: tuple[str, ...]
    client: int = 0

    def __init__(self, rank: int, request_ids, client: int = 0) -> None:
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "request_ids", tuple(request_ids))
        object.__setattr__(self, "client", client)


@dataclass(frozen=True)
class UtilityCall:
    """UTILITY on input ``input`` (default: the call's ``client_idx``, ``ECP-UTIL-1``)."""

    rank: int
    call: UtilityRequest
    input: int | None = None

    @property
    def client(self) -> int:
        return self.call.client_idx if self.input is None else self.input


@dataclass(frozen=True)
class StartWave:
    """START_DP_WAVE (``ECP-DP-4``), on input ``client`` or, with ``client`` ``-1``,
    published by the coordinator to every engine (then ``rank`` is ``-1`` at a frontend)."""

    rank: int
    wave: StartDPWave
    client: int = 0


@dataclass(frozen=True)
class Outputs:
    """One ``EngineCoreOutputs``, engine → output ``client`` (``-1``: the coordinator).

    At a frontend ``rank`` is the message's ``engine_index`` (``ECP-OUT-2``)."""

    rank: int
    client: int
    outputs: EngineCoreOutputs


@dataclass(frozen=True)
class EngineDead:
    """``ENGINE_CORE_DEAD`` (``ECP-OUT-8``). Sent on every output socket (``client``
    ``None`` when sending); received on one (``rank`` ``-1``: a PULL has no sender)."""

    rank: int
    client: int | None = None


Event = Union[EngineHello, Init, Registration, CoordinatorSubscribe, CoordinatorReady, EngineReady,
              Add, Abort, UtilityCall, StartWave, Outputs, EngineDead]

#: who may send each event
FRONTEND_EVENTS = (Init, Add, Abort, UtilityCall, StartWave, CoordinatorReady)
ENGINE_EVENTS = (EngineHello, Registration, CoordinatorSubscribe, EngineReady, Outputs, EngineDead)


@dataclass(frozen=True)
class Send:
    """What :meth:`send` returns: ``frames`` to put on ``socket``.

    Socket names are ``handshake``, ``input[i]``, ``output[i]``,
    ``coordinator_input`` and ``coordinator_output``; on a frontend's ROUTER
    sockets ``frames`` start with the engine's identity.
    """

    socket: str
    frames: list[bytes] = field(default_factory=list)

    def __iter__(self):  # ``for socket, frames in conn.send(...)``
        yield self.socket
        yield self.frames


def input_socket(client: int) -> str:
    return f"input[{client}]"


@functools.lru_cache(maxsize=256)
def output_socket(client: int) -> str:
    return "coordinator_output" if client == COORDINATOR else f"output[{client}]"


@functools.lru_cache(maxsize=256)
def parse_socket(name: str) -> tuple[str, int | None]:
    """``"input[2]"`` → ``("input", 2)``; ``"handshake"`` → ``("handshake", None)``."""
    if name.endswith("]") and "[" in name:
        kind, _, index = name[:-1].partition("[")
        return kind, int(index)
    return name, None
