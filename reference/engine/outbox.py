"""What the engine core hands its IO layer: one :class:`Outbound` per message, in sending order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Outbound"]


@dataclass
class Outbound:
    """One message to send: ``payload`` is an ``EngineCoreOutputs`` (or, from a
    fault of :mod:`.faults`, a raw list) for ``outputs[client_index]`` or the coordinator
    (:data:`ecp.spec.machine.COORDINATOR`). The IO layer sends them in the order given."""

    client_index: int
    payload: Any
