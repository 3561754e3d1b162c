"""Startup handshake messages (``ECP-HS-*``).

HELLO and READY travel on the handshake socket and are told apart by their
``status`` key (msgspec tagged union: the tag is written first, as vLLM's dict
literal does). INIT is ``EngineHandshakeMetadata``; the ready payload is
``EngineCoreReadyResponse`` (a dataclass in vLLM: every key is emitted). All of them are the newest
release's generated ones (:mod:`ecp.spec.wiretypes.current`); INIT's ``ECP-HS-2`` check is
:class:`ecp.spec.behaviour.EngineZmqAddresses`.
"""

from __future__ import annotations

from typing import Union

import msgspec

from .wiretypes.current import (  # noqa: F401 -- re-exported
    EngineCoreReadyResponse, EngineHandshakeMetadata, EngineZmqAddresses, Hello, Ready,
)

HandshakeMessage = Union[Hello, Ready]


REQUIRED_READY_KEYS: tuple[str, ...] = tuple(
    f.encode_name for f in msgspec.structs.fields(EngineCoreReadyResponse) if f.required
)

#: Coordinator → engine startup gate frame (``ECP-HS-6``) and the XSUB subscribe frame.
COORDINATOR_READY = b"READY"
XSUB_SUBSCRIBE = b"\x01"


def engine_identity(rank: int) -> bytes:
    """The 2-byte little-endian identity of a global DP rank (``ECP-SOCK-2``)."""
    if not 0 <= rank <= 0xFFFF:
        from .errors import LocalProtocolError

        raise LocalProtocolError(
            f"DP rank {rank} does not fit the 2-byte identity",
            clause="ECP-SOCK-2", expected="0..65535", got=rank,
        )
    return rank.to_bytes(2, "little")


def rank_of_identity(identity: bytes) -> int:
    """Inverse of :func:`engine_identity`; raises ``HandshakeError`` on a bad length."""
    if len(identity) != 2:
        from .errors import HandshakeError

        raise HandshakeError(
            f"engine identity must be 2 bytes, got {len(identity)}",
            clause="ECP-SOCK-2", expected="2 bytes", got=identity.hex(),
        )
    return int.from_bytes(identity, "little")
