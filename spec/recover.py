"""What can still be read from an ADD that failed to decode (``ECP-ROB-2``).

Two degrees, as ``spec/PROTOCOL.md`` defines them:

* **recoverable** -- the payload's outer array is well formed (every element a
  complete msgpack value, whatever its type) and element 0 is a string of at
  most :data:`MAX_RECOVERED_ID` bytes. An engine SHOULD answer such an ADD
  with an ERROR output. :func:`recover_add` reads only the outer array (each
  element kept as undecoded :class:`msgspec.Raw` bytes), then element 0 as the
  request id and element 11 as ``client_index``; a bad element elsewhere (a
  pickle ext, a wrong type) does not hide them, and nothing else is decoded.
* **readable id** -- the payload is cut short (or broken) after an array header
  and a complete string element 0: the id is readable, nothing else is. An
  engine MAY answer it with ERROR (on the socket it came in on) or drop it;
  both conform. :attr:`RecoveredAdd.complete` is false.

A UTILITY that failed to decode has a **recoverable call id** when its outer
array is well formed, element 0 (``client_index``) is an int and element 1 a
call id in the u64 range (``ECP-ROB-1``): an engine MAY answer it with
``failure_message`` or drop it (:func:`recover_utility`).
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
    #: the outer array was well formed (recoverable: an ERROR answer SHOULD follow); false: only
    #: the id could be read (an ERROR answer MAY follow)
    complete: bool = True


def recover_add(payload: bytes | bytearray | memoryview,
                limits: DecodeLimits = DEFAULT_LIMITS) -> RecoveredAdd | None:
    """Recover the request id (and ``client_index``) of an ADD payload that failed to decode.

    Returns ``None`` when no id can be read (then nothing can be answered); a
    :class:`RecoveredAdd` with ``complete`` false when only the leading id can.
    Never raises.
    """
    try:
        check_frame(payload, limits)
    except ProtocolError:
        return None
    try:
        elements = _OUTER.decode(payload)
    except (msgspec.DecodeError, RecursionError, ValueError):
        rid = _leading_id(bytes(payload))
        return None if rid is None else RecoveredAdd(rid, None, complete=False)
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


def _leading_id(payload: bytes) -> str | None:
    """The request id at the head of a payload whose array cannot be read whole: an array header
    (``9x``, ``dc``, ``dd``) followed by a complete string (``ax``/``bx``, ``d9``, ``da``, ``db``)."""
    if not payload:
        return None
    head = payload[0]
    if 0x90 <= head <= 0x9F:
        at, count = 1, head & 0x0F
    elif head == 0xDC and len(payload) >= 3:
        at, count = 3, int.from_bytes(payload[1:3], "big")
    elif head == 0xDD and len(payload) >= 5:
        at, count = 5, int.from_bytes(payload[1:5], "big")
    else:
        return None
    if count == 0 or at >= len(payload):
        return None
    tag = payload[at]
    if 0xA0 <= tag <= 0xBF:
        start, size = at + 1, tag & 0x1F
    elif tag in (0xD9, 0xDA, 0xDB):
        width = {0xD9: 1, 0xDA: 2, 0xDB: 4}[tag]
        start = at + 1 + width
        if start > len(payload):
            return None
        size = int.from_bytes(payload[at + 1:start], "big")
    else:
        return None
    if size > MAX_RECOVERED_ID or start + size > len(payload):
        return None
    try:
        return payload[start:start + size].decode("utf-8")
    except UnicodeDecodeError:
        return None


def recover_add_frames(frames: Sequence[bytes | bytearray | memoryview],
                       limits: DecodeLimits = DEFAULT_LIMITS) -> RecoveredAdd | None:
    """:func:`recover_add` for a whole input message ``[0x00, payload, *aux]``;
    ``None`` unless its type frame is ADD."""
    if len(frames) < 2 or bytes(frames[0]) != b"\x00":
        return None
    return recover_add(frames[1], limits)


@dataclass(frozen=True)
class RecoveredCall:
    """The call id (and ``client_index``) of a UTILITY payload that failed to decode."""

    call_id: int
    client_index: int


def recover_utility(payload: bytes | bytearray | memoryview,
                    limits: DecodeLimits = DEFAULT_LIMITS) -> RecoveredCall | None:
    """Recover the call id of a UTILITY payload that failed to decode (``ECP-ROB-1``).

    ``None`` unless the outer array is well formed, element 0 an int and element 1 an int in
    ``[0, 2**64)`` (the ids -1 and -2 an engine's own notices carry are not u64s). Never raises.
    """
    try:
        check_frame(payload, limits)
        elements = _OUTER.decode(payload)
        if len(elements) < 2:
            return None
        client, call_id = _INT.decode(elements[0]), _INT.decode(elements[1])
    except (ProtocolError, msgspec.DecodeError, RecursionError, ValueError):
        return None
    if isinstance(client, bool) or isinstance(call_id, bool) or not 0 <= call_id < 2**64:
        return None
    return RecoveredCall(call_id, client)


def recover_utility_frames(frames: Sequence[bytes | bytearray | memoryview],
                           limits: DecodeLimits = DEFAULT_LIMITS) -> RecoveredCall | None:
    """:func:`recover_utility` for a whole input message ``[0x03, payload, *aux]``;
    ``None`` unless its type frame is UTILITY."""
    if len(frames) < 2 or bytes(frames[0]) != b"\x03":
        return None
    return recover_utility(frames[1], limits)
