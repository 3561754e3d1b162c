"""One message as the monitor saw it on the wire.

Directions are named after where the message goes: ``to_engine`` (frontend or
coordinator → engine) and ``to_frontend`` (engine → frontend or coordinator).
Sockets are named after the engine's side of the connection:

=====================  ==============================  =============================
socket                 to_engine                       to_frontend
=====================  ==============================  =============================
``handshake``          INIT                            HELLO, READY
``input``              ADD, ABORT, UTILITY             the ready payload
``output``             (none)                          EngineCoreOutputs, ENGINE_CORE_DEAD
``coordinator_input``  ``READY`` gate, START_DP_WAVE   XSUB (un)subscriptions
``coordinator_output`` (none)                          EngineCoreOutputs to the coordinator
=====================  ==============================  =============================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TO_ENGINE = "to_engine"
TO_FRONTEND = "to_frontend"
DIRECTIONS = (TO_ENGINE, TO_FRONTEND)

HANDSHAKE = "handshake"
INPUT = "input"
OUTPUT = "output"
COORDINATOR_INPUT = "coordinator_input"
COORDINATOR_OUTPUT = "coordinator_output"
SOCKETS = (HANDSHAKE, INPUT, OUTPUT, COORDINATOR_INPUT, COORDINATOR_OUTPUT)


@dataclass(frozen=True, slots=True)
class Observed:
    """One multipart message, identity frames already stripped.

    ``rank`` is the engine's DP rank (from its 2-byte identity), or ``None``
    when the identity is not 2 bytes; ``client`` is the index of the
    input/output pair (``inputs[i]``/``outputs[i]`` of INIT) for the input and
    output sockets, else ``None``. ``t`` is seconds since the monitor started.
    """

    seq: int
    t: float
    direction: str
    rank: int | None
    socket: str
    client: int | None
    frames: tuple[bytes, ...]

    @property
    def channel(self) -> str:
        """A short label: ``rank 1 input[0]``."""
        where = self.socket if self.client is None else f"{self.socket}[{self.client}]"
        who = "rank ?" if self.rank is None else f"rank {self.rank}"
        return f"{who} {where}"

    def meta(self) -> dict[str, Any]:
        return {"seq": self.seq, "t": round(self.t, 6), "dir": self.direction, "rank": self.rank,
                "socket": self.socket, "client": self.client}
