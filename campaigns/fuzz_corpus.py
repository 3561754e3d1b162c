"""Malformed ZeroMQ messages for the reliability fuzzers, seeded and reproducible.

:class:`Mutator` turns real vLLM 0.33 messages (the golden vectors under
``spec/vectors/``, extracted from the captures of a real vLLM 0.33) into the
garbage a broken or hostile peer could send: random bytes, bit flips,
truncation, inflated msgpack length fields, swapped type bytes, wrong frame
counts, ext types (pickle included: the bytes are a pickle opcode stream that
no receiver may ever unpickle), deep nesting, huge declared lengths and unknown
utility methods. Every generated message carries the name of the strategy that
made it, so a failure can be reproduced from ``(seed, index)`` alone.

Messages that still decode to a valid message are not garbage: the caller
checks them with the spec's decoder and skips them (see ``is_valid``), because a
valid ADD with a mutated ``max_tokens`` is load, not a malformed frame.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Callable, Sequence

import msgspec

from ecp.spec import (
    ProtocolError, decode_handshake, decode_init, decode_input, decode_outputs, encode_utility,
)
from ecp.spec.golden import load_vectors

#: a pickle protocol-0 stream (``os.system`` global lookup): only ever carried as ext data, never loaded
PICKLE_BYTES = b"cos\nsystem\n(S'true'\ntR."

#: msgpack headers declaring far more than any frame holds (array32, map32, str32, bin32, ext32)
HUGE_HEADERS = (b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff",
                b"\xc6\xff\xff\xff\xff", b"\xc9\xff\xff\xff\xff\x01", b"\xdc\xff\xff", b"\xde\xff\xff")

#: which real messages feed each kind of socket
DIRECTION_KINDS = {
    "input": ("add", "abort", "utility", "start_dp_wave"),
    "output": ("outputs", "engine_dead"),
    "handshake": ("hello", "ready"),
    "init": ("init",),
}


@dataclass(frozen=True)
class Fuzzed:
    strategy: str
    frames: list[bytes]


def real_messages(direction: str) -> list[list[bytes]]:
    """The golden vectors' frames for one socket direction (``input``, ``output``, ``handshake``)."""
    kinds = DIRECTION_KINDS[direction]
    out = [list(v.frames) for v in load_vectors() if v.kind in kinds]
    if not out:
        raise RuntimeError(f"no golden vectors of kinds {kinds}")
    return out


def is_valid(direction: str, frames: Sequence[bytes]) -> bool:
    """Whether ``frames`` decode as a valid message for ``direction`` (then they are not garbage)."""
    try:
        if direction == "input":
            decode_input(frames)
        elif direction == "output":
            decode_outputs(frames)
        elif direction == "init":
            if len(frames) != 1:
                return False
            decode_init(frames[0])
        else:
            if len(frames) != 1:
                return False
            decode_handshake(frames[0])
    except ProtocolError:
        return False
    return True


class Mutator:
    """Seeded garbage for one socket direction; :meth:`next` returns one :class:`Fuzzed` message."""

    def __init__(self, direction: str, seed: int) -> None:
        self.direction = direction
        self.rng = random.Random(seed)
        self.corpus = real_messages(direction)
        self.strategies: list[tuple[str, Callable[[], list[bytes]]]] = [
            ("random-bytes", self._random_bytes),
            ("bit-flip", self._bit_flip),
            ("truncate", self._truncate),
            ("inflate-length", self._inflate_length),
            ("swap-type-byte", self._swap_type_byte),
            ("wrong-frame-count", self._wrong_frame_count),
            ("ext-type", self._ext_type),
            ("deep-nesting", self._deep_nesting),
            ("huge-declared-length", self._huge_declared_length),
            ("splice", self._splice),
        ]
        if direction == "input":
            self.strategies.append(("unknown-utility", self._unknown_utility))

    # ------------------------------------------------------------------ helpers
    def _real(self) -> list[bytes]:
        return [bytes(f) for f in self.rng.choice(self.corpus)]

    def _payload_index(self, frames: list[bytes]) -> int:
        # input messages carry the type byte in frame 0 and the msgpack payload in frame 1
        return 1 if self.direction == "input" and len(frames) > 1 else 0

    def _wrap(self, payload: bytes) -> list[bytes]:
        if self.direction == "input":
            return [self.rng.choice((b"\x00", b"\x01", b"\x03", b"\x07")), payload]
        return [payload]

    # ------------------------------------------------------------------ strategies
    def _random_bytes(self) -> list[bytes]:
        r = self.rng
        return [r.randbytes(r.choice((0, 1, 2, 8, 64, 512))) for _ in range(r.randint(1, 3))]

    def _bit_flip(self) -> list[bytes]:
        frames = self._real()
        i = self._payload_index(frames)
        b = bytearray(frames[i])
        if b:
            for _ in range(self.rng.randint(1, 8)):
                b[self.rng.randrange(len(b))] ^= 1 << self.rng.randrange(8)
        frames[i] = bytes(b)
        return frames

    def _truncate(self) -> list[bytes]:
        frames = self._real()
        i = self._payload_index(frames)
        frames[i] = frames[i][: self.rng.randrange(max(1, len(frames[i])))]
        return frames

    def _inflate_length(self) -> list[bytes]:
        # replace one msgpack header of the real payload by a 32-bit one declaring 2**32-1 items/bytes
        frames = self._real()
        i = self._payload_index(frames)
        b = frames[i]
        heads = [k for k, c in enumerate(b) if 0x90 <= c <= 0x9F or 0x80 <= c <= 0x8F or 0xA0 <= c <= 0xBF
                 or c in (0xDC, 0xDE, 0xD9, 0xC4)]
        if not heads:
            return self._huge_declared_length()
        k = self.rng.choice(heads)
        c = b[k]
        big = b"\xdd" if (0x90 <= c <= 0x9F or c == 0xDC) else b"\xdf" if (0x80 <= c <= 0x8F or c == 0xDE) \
            else b"\xdb"
        frames[i] = b[:k] + big + struct.pack(">I", self.rng.choice((0xFFFFFFFF, 0x7FFFFFFF, 1 << 20))) + b[k + 1:]
        return frames

    def _swap_type_byte(self) -> list[bytes]:
        frames = self._real()
        if self.direction == "input":
            frames[0] = self.rng.choice((b"\x00", b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x09",
                                         b"\xff", b"", b"\x00\x00"))
        else:  # the outer msgpack type of the single payload
            b = frames[0]
            frames[0] = bytes([self.rng.randrange(256)]) + b[1:] if b else b"\xc1"
        return frames

    def _wrong_frame_count(self) -> list[bytes]:
        frames = self._real()
        r = self.rng.random()
        if r < 0.4 and len(frames) > 1:
            return frames[: self.rng.randrange(1, len(frames))]
        if r < 0.6:
            return [b""]  # a ZeroMQ message has at least one frame
        extra = [self.rng.randbytes(self.rng.choice((0, 4, 64))) for _ in range(self.rng.randint(1, 4))]
        return frames + extra

    def _ext_type(self) -> list[bytes]:
        code = self.rng.choice((1, 1, 2, 0, 4, 99, 127, -1, -128))
        data = PICKLE_BYTES if code in (1, 2) else self.rng.randbytes(self.rng.choice((0, 1, 8, 40)))
        ext = msgspec.msgpack.Ext(code, data)
        where = self.rng.randrange(4)
        if self.direction == "input":
            if where == 0:
                obj = ext
            elif where == 1:  # an ADD whose sampling params are the ext
                obj = [f"x{self.rng.randrange(10**6)}", [1, 2], None, ext, None, 0.0, None, None, None]
            elif where == 2:  # an ext inside an untyped map (extra_args)
                obj = [f"x{self.rng.randrange(10**6)}", [1, 2], None,
                       {"max_tokens": 2, "extra_args": {"x": ext}}, None, 0.0, None, None, None]
            else:  # utility args
                return [b"\x03", msgspec.msgpack.encode([0, 7, "is_sleeping", [ext]])]
            return self._wrap(msgspec.msgpack.encode(obj))
        if self.direction == "output":
            obj = [0, [[f"x{self.rng.randrange(10**6)}", [1], ext, None, None, None, None, None]]] if where \
                else ext
            return [msgspec.msgpack.encode(obj)]
        return [msgspec.msgpack.encode({"status": "HELLO", "local": ext} if where else ext)]

    def _deep_nesting(self) -> list[bytes]:
        depth = self.rng.choice((64, 1000, 10_000, 100_000))
        opener = self.rng.choice((b"\x91", b"\x81\xa1k", b"\xdc\x00\x01"))
        return self._wrap(opener * depth + b"\xc0")

    def _huge_declared_length(self) -> list[bytes]:
        head = self.rng.choice(HUGE_HEADERS)
        return self._wrap(head + self.rng.randbytes(self.rng.choice((0, 3, 16))))

    def _splice(self) -> list[bytes]:
        # the head of one real message glued to the tail of another
        a, b = self._real(), self._real()
        i, j = self._payload_index(a), self._payload_index(b)
        pa, pb = a[i], b[j]
        a[i] = pa[: self.rng.randrange(len(pa) + 1)] + pb[self.rng.randrange(len(pb) + 1):]
        return a

    def _unknown_utility(self) -> list[bytes]:
        name = self.rng.choice(("__init__", "__class__", "shutdown_now", "", "x" * 300, "exec",
                                f"m{self.rng.randrange(10**6)}"))
        return encode_utility(0, self.rng.randrange(1 << 32), name, [self.rng.randrange(100)])

    # ------------------------------------------------------------------ API
    def next(self) -> Fuzzed:
        name, make = self.rng.choice(self.strategies)
        return Fuzzed(name, make())
