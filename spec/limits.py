"""Decode limits enforced *before* allocation (``ECP-FRAME-9``).

:func:`check_frame` walks the msgpack headers of one frame without building
any object: it sees every declared collection length and the nesting depth,
and rejects a frame that claims more than the limits allow (a 5-byte header
claiming 2^32 elements is rejected here, in constant memory). Only then does
msgspec decode the frame.

Cost: the walk touches each header once, in Python. It is skipped when the
frame cannot break a limit: a frame no longer than ``max_collection_len``
cannot declare a collection it can fill (msgspec itself refuses declared
lengths beyond the bytes that remain), and a frame with no more
map/array-marker bytes than ``max_depth`` cannot nest deeper. Typical ADD and
output frames take the fast path.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DecodeError, LimitExceeded


@dataclass(frozen=True)
class DecodeLimits:
    """Upper bounds a receiver applies to every incoming message."""

    max_frame_bytes: int = 256 * 1024 * 1024
    max_frames: int = 1024
    max_collection_len: int = 16 * 1024 * 1024
    max_depth: int = 64


DEFAULT_LIMITS = DecodeLimits()

# Fixed-size payload lengths of the msgpack scalar types that follow their marker byte.
_FIXED = {
    0xC0: 0, 0xC2: 0, 0xC3: 0,
    0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
    0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,
    0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17,  # fixext: type byte + data
}
# Markers followed by a big-endian length of N bytes, then that many data bytes (+1 for ext type).
_SIZED = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0),
          0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)}
# Container markers followed by a big-endian count of N bytes; maps hold 2 items per entry.
_CONTAINER = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


_CONTAINER_MARKERS = frozenset(range(0x80, 0xA0)) | {0xDC, 0xDD, 0xDE, 0xDF}
_NOT_CONTAINER_MARKERS = bytes(b for b in range(256) if b not in _CONTAINER_MARKERS)


def _container_marker_bound(buf: bytes | memoryview) -> int:
    """An upper bound of the nesting depth: the number of bytes that could open a
    map or array (string and float bytes included). Counted at C speed."""
    return len(bytes(buf).translate(None, _NOT_CONTAINER_MARKERS))


def check_frame(buf: bytes | memoryview, limits: DecodeLimits = DEFAULT_LIMITS,
                frame_index: int | None = None) -> None:
    """Raise :class:`LimitExceeded` if ``buf`` breaks ``limits``.

    Malformed headers (unknown marker 0xC1, truncation) raise
    :class:`DecodeError`; a well-formed frame passes silently.
    """
    n = len(buf)
    if n > limits.max_frame_bytes:
        raise LimitExceeded(
            f"frame of {n} bytes exceeds the {limits.max_frame_bytes}-byte limit",
            clause="ECP-FRAME-9", frame_index=frame_index,
            expected=f"<= {limits.max_frame_bytes} bytes", got=n,
        )
    if n <= limits.max_collection_len and (
            n <= limits.max_depth or _container_marker_bound(buf) <= limits.max_depth):
        return
    mv = memoryview(buf)
    max_len = limits.max_collection_len
    max_depth = limits.max_depth
    pos = 0
    # ``remaining[-1]`` counts the items still expected by the innermost open container.
    remaining = [1]
    while remaining:
        if remaining[-1] == 0:
            remaining.pop()
            continue
        remaining[-1] -= 1
        if pos >= n:
            raise DecodeError("frame truncated inside a msgpack value", clause="ECP-FRAME-9",
                              frame_index=frame_index, expected="more bytes", got=f"end at {pos}")
        b = mv[pos]
        pos += 1
        count = -1
        if b <= 0x7F or b >= 0xE0:
            continue
        if 0x80 <= b <= 0x8F:
            count = (b & 0x0F) * 2
        elif 0x90 <= b <= 0x9F:
            count = b & 0x0F
        elif 0xA0 <= b <= 0xBF:
            pos += b & 0x1F
            continue
        elif b in _FIXED:
            pos += _FIXED[b]
            continue
        elif b in _SIZED:
            width, extra = _SIZED[b]
            size = int.from_bytes(mv[pos:pos + width], "big")
            pos += width + extra + size
            continue
        elif b in _CONTAINER:
            width, per = _CONTAINER[b]
            declared = int.from_bytes(mv[pos:pos + width], "big")
            pos += width
            if declared > max_len:
                raise LimitExceeded(
                    f"collection declares {declared} elements, limit is {max_len}",
                    clause="ECP-FRAME-9", frame_index=frame_index,
                    expected=f"<= {max_len} elements", got=declared,
                )
            count = declared * per
        else:  # 0xC1 is never used
            raise DecodeError(f"invalid msgpack marker 0x{b:02x}", clause="ECP-FRAME-9",
                              frame_index=frame_index, got=f"0x{b:02x} at byte {pos - 1}")
        if count > 0:
            if len(remaining) > max_depth:
                raise LimitExceeded(
                    f"nesting deeper than {max_depth} levels", clause="ECP-FRAME-9",
                    frame_index=frame_index, expected=f"<= {max_depth} levels", got=">" + str(max_depth),
                )
            if count > n - pos:
                raise DecodeError(
                    f"collection declares {count} items but only {n - pos} bytes remain",
                    clause="ECP-FRAME-9", frame_index=frame_index,
                    expected=f"<= {n - pos} items", got=count,
                )
            remaining.append(count)
    if pos > n:
        raise DecodeError("frame truncated inside a msgpack value", clause="ECP-FRAME-9",
                          frame_index=frame_index, expected=f"{pos} bytes", got=f"{n} bytes")
