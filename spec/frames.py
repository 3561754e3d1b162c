"""Decode a frame list when you know (or want to guess) where it was captured.

The codec has one decoder per socket direction. This module puts them behind
one name, :func:`decode_frames`, so that tools (``ecp decode``, the golden
vectors, conformance reports) can say "these frames came from an engine's
input DEALER" -- or "I don't know, guess" -- and get back a :class:`Decoded`
naming the message kind, the typed value and its JSON view.

Kinds (also the ``kind`` of a golden vector):

=================  ==========================  ==========================================
kind               direction                   frames
=================  ==========================  ==========================================
``add``            input                       ``[0x00, EngineCoreRequest, *aux]``
``abort``          input                       ``[0x01, [id, …]]``
``start_dp_wave``  input                       ``[0x02, [wave, exclude]]``
``utility``        input                       ``[0x03, [client, call_id, method, args]]``
``outputs``        output                      ``[EngineCoreOutputs, *aux]``
``engine_dead``    output                      ``[b"ENGINE_CORE_DEAD"]``
``hello``          handshake                   ``[HELLO map]``
``ready``          handshake                   ``[READY map]``
``init``           init                        ``[EngineHandshakeMetadata map]``
``ready_response`` ready                       ``[EngineCoreReadyResponse map]`` (may be empty)
``coordinator_publication``  coordinator       ``[(counts, wave, running)]`` (coordinator XPUB)
=================  ==========================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import msgspec

from .codec import (
    ENGINE_DEAD, EngineDeadSentinel, Frame, request_type_of,
    decode_coordinator_publication, decode_handshake, decode_init, decode_input, decode_outputs, decode_ready_response, encode_handshake,
    encode_input, encode_outputs, to_builtins,
)
from .enums import ENGINE_CORE_DEAD, RequestType
from .errors import DecodeError, ProtocolError
from .handshake import Hello
from .limits import DEFAULT_LIMITS, DecodeLimits

DIRECTIONS = ("input", "output", "handshake", "init", "ready", "coordinator", "auto")

INPUT_KINDS = {RequestType.ADD: "add", RequestType.ABORT: "abort", RequestType.START_DP_WAVE: "start_dp_wave",
               RequestType.UTILITY: "utility"}
KIND_DIRECTION = {"add": "input", "abort": "input", "start_dp_wave": "input", "utility": "input",
                  "outputs": "output", "engine_dead": "output", "hello": "handshake",
                  "ready": "handshake", "init": "init", "ready_response": "ready",
                  "coordinator_publication": "coordinator"}


@dataclass(frozen=True)
class Decoded:
    """One decoded multipart message.

    ``message`` is what the codec returned (an ``EngineCoreRequest`` for an
    ADD, the id list of an ABORT, an ``EngineCoreOutputs``, a ``Hello``,
    ``ENGINE_DEAD``, ``None`` for an empty ready payload, …); ``body`` is the
    same value with ``ENGINE_DEAD`` as ``None``, and ``value`` its JSON view
    (:func:`~ecp.spec.codec.to_builtins`).
    """

    kind: str
    direction: str
    message: Any
    frames: tuple[bytes, ...]

    @property
    def body(self) -> Any:
        m = self.message
        return None if isinstance(m, EngineDeadSentinel) else m

    @property
    def value(self) -> Any:
        return to_builtins(self.body)

    @property
    def named_value(self) -> Any:
        """Like :attr:`value`, but array-like structs become maps keyed by field name
        (easier to read; not the wire layout)."""
        return named_view(self.body)

    def to_dict(self, named: bool = False) -> dict[str, Any]:
        return {"kind": self.kind, "direction": self.direction, "frames": len(self.frames),
                "value": self.named_value if named else self.value}


def named_view(obj: Any) -> Any:
    """A JSON-friendly view with every struct as a map in field order (tensors as
    ``[dtype, shape, base64]``, sets as lists)."""
    if isinstance(obj, msgspec.Struct):
        out: dict[str, Any] = {}
        cfg = obj.__struct_config__
        if cfg.tag_field is not None:
            out[cfg.tag_field] = cfg.tag
        for name in obj.__struct_fields__:
            out[name] = named_view(getattr(obj, name))
        return out
    if isinstance(obj, dict):
        return {k: named_view(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [named_view(v) for v in obj]
    return to_builtins(obj)


def _single(frames: Sequence[Frame], what: str) -> Frame:
    if len(frames) != 1:
        from .errors import FrameCountError

        clause = {"ready payload": "ECP-HS-4", "coordinator publication": "ECP-DP-5"}.get(what, "ECP-HS-7")
        raise FrameCountError(f"a {what} is exactly one frame, got {len(frames)}", clause=clause,
                              expected="1 frame", got=len(frames))
    return frames[0]


def _kind_of(direction: str, message: Any) -> str:
    if direction == "input":
        return INPUT_KINDS[request_type_of(message)]
    if direction == "output":
        return "engine_dead" if message is ENGINE_DEAD else "outputs"
    if direction == "handshake":
        return "hello" if isinstance(message, Hello) else "ready"
    return {"init": "init", "ready": "ready_response", "coordinator": "coordinator_publication"}[direction]


def _decode_direction(frames: Sequence[Frame], direction: str, limits: DecodeLimits) -> Any:
    if direction == "input":
        return decode_input(frames, limits)
    if direction == "output":
        return decode_outputs(frames, limits)
    if direction == "handshake":
        return decode_handshake(_single(frames, "handshake message"), limits)
    if direction == "init":
        return decode_init(_single(frames, "INIT message"), limits)
    if direction == "ready":
        return decode_ready_response(_single(frames, "ready payload"), limits)
    if direction == "coordinator":
        return decode_coordinator_publication(_single(frames, "coordinator publication"), limits)
    raise ValueError(f"unknown direction {direction!r}; one of {', '.join(DIRECTIONS)}")


def guess_directions(frames: Sequence[Frame]) -> list[str]:
    """Directions worth trying for ``frames``, most plausible first.

    Looks only at frame count and leading bytes: a 1-byte first frame of a
    multipart message is a request type; a msgpack map is a handshake
    message; an array is an output payload.
    """
    if not frames:
        return ["input", "output"]
    first = bytes(frames[0][:1])
    if len(frames) >= 2 and len(frames[0]) == 1:
        return ["input", "output"]
    if len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD:
        return ["output"]
    if len(frames) == 1 and first and (0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF)):
        return ["handshake", "init", "ready"]
    if len(frames) == 1 and not first:
        return ["ready"]
    if len(frames) == 1:
        return ["output", "coordinator", "input"]
    return ["output", "input"]


def decode_frames(frames: Sequence[Frame], direction: str = "auto",
                  limits: DecodeLimits = DEFAULT_LIMITS) -> Decoded:
    """Decode ``frames`` as captured in ``direction`` (see :data:`DIRECTIONS`).

    ``auto`` tries the plausible directions in turn; when none decodes it
    raises the error of the most plausible one. A lone payload frame that
    is an ADD/ABORT/UTILITY payload (no type frame) is also recognised in
    ``auto`` mode. Raises only :class:`~ecp.spec.errors.ProtocolError`.
    """
    frames = tuple(bytes(f) for f in frames)
    if direction != "auto":
        msg = _decode_direction(frames, direction, limits)
        return Decoded(_kind_of(direction, msg), direction, msg, frames)
    first_error: ProtocolError | None = None
    for d in guess_directions(frames):
        try:
            msg = _decode_direction(frames, d, limits)
        except ProtocolError as exc:
            first_error = first_error or exc
            continue
        return Decoded(_kind_of(d, msg), d, msg, frames)
    if len(frames) == 1:  # a bare input payload, captured without its type frame
        for rtype in (RequestType.ADD, RequestType.UTILITY, RequestType.ABORT, RequestType.START_DP_WAVE):
            try:
                msg = decode_input((rtype.value, frames[0]), limits)
            except ProtocolError:
                continue
            return Decoded(INPUT_KINDS[request_type_of(msg)], "input", msg, (rtype.value, frames[0]))
    assert first_error is not None
    raise first_error


def encode_decoded(decoded: Decoded) -> list[bytes]:
    """Re-encode a decoded message to frames (the inverse of :func:`decode_frames`)."""
    m = decoded.message
    if decoded.direction == "input":
        return encode_input(m)
    if decoded.kind == "engine_dead":
        return [ENGINE_CORE_DEAD]
    if decoded.kind == "outputs":
        return encode_outputs(m)
    if m is None:  # empty ready payload
        return [b""]
    return [encode_handshake(m)]


def parse_hex_frames(text: str) -> list[bytes]:
    """Frames from hex text: frames separated by whitespace, commas or ``|``;
    ``0x`` prefixes and ``:`` byte separators are allowed. Raises
    :class:`DecodeError` on anything that is not hex."""
    frames = []
    for token in text.replace(",", " ").replace("|", " ").split():
        t = token.strip()
        if t.lower().startswith("0x"):
            t = t[2:]
        t = t.replace(":", "")
        try:
            frames.append(bytes.fromhex(t))
        except ValueError:
            raise DecodeError(f"not a hex frame: {token[:40]!r}", clause="ECP-FRAME-9",
                              expected="hex digits", got=token[:40]) from None
    return frames
