"""Enumerations that travel on the wire as integers or single bytes (vLLM 0.33).

``FinishReason``, ``EngineCoreEventType`` and ``RequestOutputKind`` are the generated ones of the
release (:mod:`ecp.spec.wiretypes.current`); the others are no layout's.
"""

from __future__ import annotations

import enum

from .wiretypes.current import EngineCoreEventType, FinishReason, RequestOutputKind  # noqa: F401 -- re-exported


class RequestType(bytes, enum.Enum):
    """The one-byte type frame of an input message (``ECP-FRAME-1``)."""

    ADD = b"\x00"
    ABORT = b"\x01"
    START_DP_WAVE = b"\x02"
    UTILITY = b"\x03"
    # Engine-internal queue markers in vLLM 0.33: reserved, never sent on the wire.
    EXECUTOR_FAILED = b"\x04"
    WAKEUP = b"\x05"

    @property
    def on_wire(self) -> bool:
        """Whether a peer may send this type over a socket."""
        return self not in (RequestType.EXECUTOR_FAILED, RequestType.WAKEUP)


WIRE_REQUEST_TYPES = frozenset(t for t in RequestType if t.on_wire)


class EngineStatusType(enum.IntEnum):
    """Present in vLLM 0.33; its wire use is not characterised."""

    HEALTHY = 0
    DEAD = 1
    UNHEALTHY = 2


#: The raw frame an engine sends before dying (``ECP-OUT-8``); not msgpack.
ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"

#: Reserved negative utility call ids (engine-initiated notices in vLLM 0.33).
EEP_NOTIFICATION_CALL_ID = -1
FT_STATUS_CALL_ID = -2

#: Tensor buffers at or above this size travel in aux frames (``ECP-FRAME-8``).
AUX_FRAME_THRESHOLD = 256

#: msgpack ext type codes.
EXT_PICKLE = 1
EXT_CLOUDPICKLE = 2
EXT_RAW_VIEW = 3
