"""What can still be read from an ADD that failed to decode (``ECP-ROB-2``).

An engine that rejects an undecodable ADD should answer it with an ERROR
output when the request id is recoverable. :func:`recover_add` reads only the
outer array of the payload (each element kept as undecoded
:class:`msgspec.Raw` bytes), then decodes element 0 as the request id and
element 11 as ``client_index``; a bad element elsewhere (a pickle ext, a wrong
type) does not hide them, and nothing else is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import msgspec

from .errors import ProtocolError
from .limits import DEFAULT_LIMITS, DecodeLimits, check_frame

#: the position of ``client_index`` in the ``EngineCoreRequest`` array (``ECP-REQ-6``)
CLIENT_INDEX_FIELD = 11
#: ids longer than this are not worth answering: the frame is garbage
MAX_RECOVERED_ID = 4096

_OUTER = msgspec.msgpack.Decoder(list[msgspec.Raw])
_STR = msgspec.msgpack.Decoder(str)
_INT = msgspec.msgpack.Decoder(int)


@dataclass(frozen=True)
class RecoveredAdd:
    """The parts of an undecodable ADD payload that could be read."""

    request_id: str
    #: ``None`` when field 11 is missing or not an int: answer on the socket it came in on
    client_index: int | None


def recover_add(payload: bytes | bytearray | memoryview,
                limits: DecodeLimits = DEFAULT_LIMITS) -> RecoveredAdd | None:
    """Recover the request id (and ``client_index``) of an ADD payload that failed to decode.

    Returns ``None`` when the payload is not an array whose first element is a
    string (then nothing can be answered). Never raises.
    """
    try:
        check_frame(payload, limits)
        elements = _OUTER.decode(payload)
    except (ProtocolError, msgspec.DecodeError, RecursionError, ValueError):
        return None
    if not elements:
        return None
    try:
        rid = _STR.decode(elements[0])
    except (msgspec.DecodeError, ValueError):
        return None
    if len(rid) > MAX_RECOVERED_ID:
        return None
    client: int | None = None
    if len(elements) > CLIENT_INDEX_FIELD:
        try:
            client = _INT.decode(elements[CLIENT_INDEX_FIELD])
        except (msgspec.DecodeError, ValueError):
            client = None
    return RecoveredAdd(rid, client)


def recover_add_frames(frames: Sequence[bytes | bytearray | memoryview],
                       limits: DecodeLimits = DEFAULT_LIMITS) -> RecoveredAdd | None:
    """:func:`recover_add` for a whole input message ``[0x00, payload, *aux]``;
    ``None`` unless its type frame is ADD."""
    if len(frames) < 2 or bytes(frames[0]) != b"\x00":
        return None
    return recover_add(frames[1], limits)
