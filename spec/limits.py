"""Decode limits enforced *before* allocation (``ECP-FRAME-9``).

Who enforces what, for a frame that msgspec decodes:

* frame count and frame size: the codec compares lengths (no walk);
* a declared length beyond the bytes that remain (a 5-byte header claiming
  2^32 elements, a str/bin/ext claiming more bytes than follow): msgspec
  itself refuses it before allocating (arrays and maps are pre-sized to at most
  16 items and grow only with items actually read), so memory stays bounded by
  the frame size;
* more elements than ``max_collection_len``: impossible in a frame of at most
  ``max_collection_len`` bytes (every element takes a byte); longer frames are
  walked by :func:`check_frame` before msgspec sees them;
* nesting: typed positions nest only as deep as their type allows, and msgspec
  bounds all recursion; values typed ``Any`` are bounded by
  :mod:`ecp.spec.untyped` against ``max_depth``. A frame of at most
  ``max_depth + 1`` bytes cannot nest deeper than ``max_depth``.

:func:`check_frame` walks the msgpack headers of one frame without building any
object and rejects the first declared length or nesting level that breaks the
limits. It runs before decoding only for frames longer than
``max_collection_len`` (or when ``max_depth`` is below what the message types
themselves nest), and on the error path, so that a refused frame is reported as
the limit it breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DecodeError, LimitExceeded

#: Typed positions of every ecp message nest at most this deep (checked by the
#: tests against the message types); a lower ``max_depth`` walks every frame.
TYPED_DEPTH_BOUND = 8


@dataclass(frozen=True)
class DecodeLimits:
    """Upper bounds a receiver applies to every incoming message."""

    max_frame_bytes: int = 256 * 1024 * 1024
    max_frames: int = 1024
    max_collection_len: int = 16 * 1024 * 1024
    max_depth: int = 64

    # Not fields (no annotation): derived in __post_init__, for the codec's hot path.
    _walk_free = -1
    _depth_free = -1

    def __post_init__(self) -> None:
        # Precomputed for the codec's hot path (not fields: equality and repr are unchanged).
        # Frames of at most ``_walk_free`` bytes need no header walk before decoding;
        # frames of at most ``_depth_free`` bytes need no depth check after it.
        walk_free = min(self.max_frame_bytes, self.max_collection_len)
        if self.max_depth < TYPED_DEPTH_BOUND:
            walk_free = -1
        if self.max_frames < 2:
            walk_free = -1  # the hot paths assume one- and two-frame messages are allowed
        object.__setattr__(self, "_walk_free", walk_free)
        object.__setattr__(self, "_depth_free", min(self.max_depth + 1, walk_free))


DEFAULT_LIMITS = DecodeLimits()

# The walk is table-driven because it is on every receiver's hot path: for each
# marker byte, ``_SKIP`` holds either the number of bytes that follow a scalar
# (>= 0: skip them) or a negative code for containers, sized values and 0xC1.
_FIXMAP, _FIXARR, _SIZED8, _SIZED16, _SIZED32, _EXT8, _EXT16, _EXT32 = -1, -2, -3, -4, -5, -6, -7, -8
_ARR16, _ARR32, _MAP16, _MAP32, _INVALID = -9, -10, -11, -12, -13
_SKIP = [0] * 256
for _b in range(0x80, 0x90):
    _SKIP[_b] = _FIXMAP
for _b in range(0x90, 0xA0):
    _SKIP[_b] = _FIXARR
for _b in range(0xA0, 0xC0):
    _SKIP[_b] = _b & 0x1F
_SKIP[0xC1] = _INVALID
for _b, _s in {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,
               0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17,
               0xC4: _SIZED8, 0xC5: _SIZED16, 0xC6: _SIZED32, 0xD9: _SIZED8, 0xDA: _SIZED16, 0xDB: _SIZED32,
               0xC7: _EXT8, 0xC8: _EXT16, 0xC9: _EXT32,
               0xDC: _ARR16, 0xDD: _ARR32, 0xDE: _MAP16, 0xDF: _MAP32}.items():
    _SKIP[_b] = _s
_WIDTH = {_SIZED8: (1, 0), _SIZED16: (2, 0), _SIZED32: (4, 0), _EXT8: (1, 1), _EXT16: (2, 1), _EXT32: (4, 1)}
_CONT = {_ARR16: (2, 1), _ARR32: (4, 1), _MAP16: (2, 2), _MAP32: (4, 2)}


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
    :class:`DecodeError`; a well-formed frame passes silently. The walk is
    skipped (a C-speed count decides) when the frame has too few map/array
    markers to nest past ``max_depth`` and is too short to hold more than
    ``max_collection_len`` elements: then msgspec keeps every limit itself, and
    a long frame of scalars costs no Python loop on the error path.
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
        return  # cannot break a limit that msgspec does not keep itself
    data = bytes(buf)
    max_len = limits.max_collection_len
    max_depth = limits.max_depth
    skip = _SKIP
    pos = 0
    rem = 1  # items still expected by the innermost open container
    outer: list[int] = []  # the same count for each enclosing container
    try:
        while True:
            if rem == 0:
                if not outer:
                    break
                rem = outer.pop()
                continue
            b = data[pos]
            s = skip[b]
            rem -= 1
            if s >= 0:
                pos += 1 + s
                continue
            pos += 1
            if s == _FIXARR:
                count = b & 0x0F
            elif s == _FIXMAP:
                count = (b & 0x0F) * 2
            elif s in _CONT:
                width, per = _CONT[s]
                declared = int.from_bytes(data[pos:pos + width], "big")
                pos += width
                if declared > max_len:
                    raise LimitExceeded(
                        f"collection declares {declared} elements, limit is {max_len}",
                        clause="ECP-FRAME-9", frame_index=frame_index,
                        expected=f"<= {max_len} elements", got=declared)
                count = declared * per
            elif s in _WIDTH:
                width, extra = _WIDTH[s]
                pos += width + extra + int.from_bytes(data[pos:pos + width], "big")
                continue
            else:
                raise DecodeError(f"invalid msgpack marker 0x{b:02x}", clause="ECP-FRAME-9",
                                  frame_index=frame_index, got=f"0x{b:02x} at byte {pos - 1}")
            if count:
                if len(outer) >= max_depth:
                    raise LimitExceeded(f"nesting deeper than {max_depth} levels", clause="ECP-FRAME-9",
                                        frame_index=frame_index, expected=f"<= {max_depth} levels",
                                        got=f"> {max_depth}")
                if count > n - pos:
                    raise DecodeError(f"collection declares {count} items but only {n - pos} bytes remain",
                                      clause="ECP-FRAME-9", frame_index=frame_index,
                                      expected=f"<= {n - pos} items", got=count)
                outer.append(rem)
                rem = count
    except IndexError:
        pos = n + 1
    if pos > n:
        raise DecodeError("frame truncated inside a msgpack value", clause="ECP-FRAME-9",
                          frame_index=frame_index, expected="more bytes", got=f"{n} bytes")
