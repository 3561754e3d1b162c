"""Frames in, a release's messages out, and back: :mod:`ecp.spec.codec` over a profile.

A :class:`ProfileCodec` has the functions of :mod:`ecp.spec.codec` with the
same contracts (typed :class:`~ecp.spec.errors.RemoteProtocolError`\\ s naming
their clause, limits checked before allocation, ext types 1/2 refused,
``ENGINE_CORE_DEAD`` recognised), but its decoders are built on the
generated classes of one release. Its fast paths are compiled from the
codec's own templates over the profile's decoders, so a message costs what
it costs through :mod:`ecp.spec.codec` (``benchmarks/bench_codec.py``, one row per
profile).

Input messages are the payloads themselves, as in :mod:`ecp.spec.codec`: the
class of a generated message picks its type byte (an ABORT is its list of
request ids).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Sequence, Union

import msgspec

from .. import codec as base
from ..codec import ENGINE_DEAD, Frame
from ..errors import FrameCountError, LocalProtocolError, ProtocolError
from ..frames import Decoded, guess_directions
from ..layout.model import LayoutError
from ..limits import DEFAULT_LIMITS, DecodeLimits

if TYPE_CHECKING:
    from .model import Profile

#: frame label of each input request type (ABORT's payload is a list of request ids, no message)
_INPUT_FRAMES = ("ADD", "UTILITY", "START_DP_WAVE")
#: the clause each input type's decoder cites, as :mod:`ecp.spec.codec`'s
_INPUT_CLAUSES = {name: clause for _, clause, name in base._INPUT_TABLE.values()}


class ProfileCodec:
    """The codec of one release (``profile.codec``). Decoders are attributes, bound
    to compiled functions: ``codec.decode_input(frames)`` costs no method lookup."""

    def __init__(self, profile: "Profile") -> None:
        self.profile = profile
        missing = [f for f in ("ADD", "UTILITY", "outputs") if f not in profile.frames]
        if missing:
            raise LayoutError(f"{profile.layout.name}: no message for frame(s) {', '.join(missing)}")
        decoders: dict[str, msgspec.msgpack.Decoder] = {}
        table: base.InputTable = {}
        #: generated class -> its type frame
        self._type_of: dict[type, bytes] = {list: profile.request_types.get("ABORT", b"\x01")}
        self._type_of[tuple] = self._type_of[list]
        for name, byte in profile.request_types.items():
            if name == "ABORT":
                dec = base._DEC_ABORT
            elif name in _INPUT_FRAMES and name in profile.frames:
                cls = profile.frame_message(name)
                dec = base._decoder(cls)
                self._type_of[cls] = byte
            else:
                continue  # a type byte whose payload no layout describes: refused as unknown
            decoders[name] = dec
            table[byte] = (dec, _INPUT_CLAUSES.get(name, "ECP-FRAME-1"), name)
        self.input_table = table
        dec_outputs = base._decoder(profile.frame_message("outputs"))
        hello_ready = [profile.frame_message(f) for f in ("HELLO", "READY") if f in profile.frames]
        dec_handshake = base._decoder(Union[tuple(hello_ready)]) if hello_ready else None  # type: ignore
        dec_init = base._decoder(profile.frame_message("INIT")) if "INIT" in profile.frames else None
        dec_ready = (base._decoder(profile.frame_message("ready payload"))
                     if "ready payload" in profile.frames else None)

        # Two-frame fast path: every input type whose untyped values the template checks, or
        # that has none (others take the careful path, which checks every limit).
        fast = {byte: dec.decode for byte, (dec, _, name) in table.items()
                if name in ("ADD", "UTILITY") or base._checker(dec) is None}
        request, utility = decoders["ADD"], decoders["UTILITY"]
        ns = {**vars(base), "_INPUT_FAST": fast, "_DEC_REQUEST": request, "_DEC_UTILITY": utility,
              "_DECODE_REQUEST": fast[self._type_of[request.type]],
              "_DECODE_UTILITY": fast[self._type_of[utility.type]],
              "_decode_input_careful": partial(base._decode_input_careful, table=table),
              "_DEC_OUTPUTS": dec_outputs, "_DECODE_OUTPUTS": dec_outputs.decode,
              "_decode_outputs_careful": partial(base._decode_outputs_careful, decoder=dec_outputs)}
        self.decode_input = base._compile_hot_path("decode_input", base._DECODE_INPUT, {
            "request": (request.type, "raise _too_deep(_DEC_REQUEST, message, limits, 1 + frame_offset)"),
            "utility": (utility.type, "raise _too_deep(_DEC_UTILITY, message, limits, 1 + frame_offset)"),
        }, ns)
        self.decode_outputs = base._compile_hot_path("decode_outputs", base._DECODE_OUTPUTS_SOURCE, {
            "outputs": (dec_outputs.type, "raise _too_deep(_DEC_OUTPUTS, message, limits, 0)"),
        }, ns)
        self._dec_handshake, self._dec_init, self._dec_ready = dec_handshake, dec_init, dec_ready

    # ------------------------------------------------------------------ decoding, one frame
    def _single(self, decoder: msgspec.msgpack.Decoder | None, what: str, frame: Frame, clause: str,
                limits: DecodeLimits) -> Any:
        if decoder is None:
            raise LocalProtocolError(f"{what}: not in {self.profile.label}", clause="ECP-COMPAT-1")
        n = len(frame)
        if n <= limits._walk_free:
            try:
                message = decoder.decode(frame)
            except Exception:  # diagnosed, precisely, on the careful path
                pass
            else:
                check = base._checker(decoder)
                if check is None or n <= limits._depth_free or not check(message, limits.max_depth):
                    return message
        return base._decode_single(decoder, frame, clause, limits)

    def decode_handshake(self, frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        """An engine -> frontend handshake frame: the release's HELLO or READY (by ``status``)."""
        return self._single(self._dec_handshake, "HELLO/READY", frame, "ECP-HS-7", limits)

    def decode_init(self, frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        return self._single(self._dec_init, "INIT", frame, "ECP-HS-2", limits)

    def decode_ready_response(self, frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        """A ready payload; an empty frame decodes to ``None`` (``ECP-HS-12``)."""
        if len(frame) == 0:
            return None
        return self._single(self._dec_ready, "ready payload", frame, "ECP-HS-4", limits)

    # ------------------------------------------------------------------ encoding
    def request_type_of(self, message: Any) -> bytes:
        """The type frame an input message travels with; :class:`LocalProtocolError`
        for anything that is not an input message of this release."""
        try:
            return self._type_of[message.__class__]
        except KeyError:
            raise LocalProtocolError(
                f"not an input message of {self.profile.label}: {type(message).__name__}",
                clause="ECP-FRAME-1", got=type(message).__name__) from None

    def input_kind(self, message: Any) -> str:
        """``ADD``, ``ABORT``, ``UTILITY`` or ``START_DP_WAVE``."""
        return self.input_table[self.request_type_of(message)][2]

    def encode_input(self, message: Any) -> list[bytes]:
        """``[type, payload, *aux]`` for an engine's input DEALER (no identity)."""
        byte = self.request_type_of(message)
        if message.__class__ is tuple:
            message = list(message)
        try:  # no tensor inside: msgspec alone (a tensor makes the plain encoder refuse)
            return [byte, base._PLAIN_ENCODE(message)]
        except base._ENCODE_FAILURES:
            return [byte, *base.encode_payload(message)]

    #: ``[payload, *aux]`` for an engine's output PUSH (the same rule for every release)
    encode_outputs = staticmethod(base.encode_outputs)
    #: one handshake frame: HELLO, READY, INIT or a ready payload
    encode_handshake = staticmethod(base.encode_handshake)

    # ------------------------------------------------------------------ by direction
    def decode_frames(self, frames: Sequence[Frame], direction: str = "auto",
                      limits: DecodeLimits = DEFAULT_LIMITS) -> Decoded:
        """:func:`ecp.spec.frames.decode_frames` through this release: ``auto`` tries the
        plausible directions in turn and raises the first one's error when none decodes."""
        frames = tuple(bytes(f) for f in frames)
        tried = [direction] if direction != "auto" else [d for d in guess_directions(frames) if d != "coordinator"]
        first: ProtocolError | None = None
        for d in tried:
            try:
                message = self.decode(frames, d, limits)
            except ProtocolError as exc:
                first = first or exc
                continue
            return Decoded(self._kind(d, message), d, message, frames)
        assert first is not None
        raise first

    def _kind(self, direction: str, message: Any) -> str:
        if direction == "input":
            return self.input_kind(message).lower()
        if direction == "output":
            return "engine_dead" if message is ENGINE_DEAD else "outputs"
        if direction == "handshake":
            return "hello" if type(message).__name__ == "Hello" else "ready"
        return {"init": "init", "ready": "ready_response"}[direction]

    def decode(self, frames: Sequence[Frame], direction: str,
               limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        """Decode ``frames`` captured in ``direction`` (``input``, ``output``, ``handshake``,
        ``init`` or ``ready``, as :mod:`ecp.spec.frames`)."""
        if direction == "input":
            return self.decode_input(frames, limits)
        if direction == "output":
            return self.decode_outputs(frames, limits)
        single = {"handshake": (self.decode_handshake, "handshake message"),
                  "init": (self.decode_init, "INIT message"), "ready": (self.decode_ready_response, "ready payload")}
        if direction not in single:
            raise LocalProtocolError(f"no {direction} messages in a release profile", clause="ECP-COMPAT-1",
                                     expected="input, output, handshake, init or ready", got=direction)
        decode, what = single[direction]
        if len(frames) != 1:
            raise FrameCountError(f"a {what} is exactly one frame, got {len(frames)}",
                                  clause="ECP-HS-4" if direction == "ready" else "ECP-HS-7",
                                  expected="1 frame", got=len(frames))
        return decode(frames[0], limits)
