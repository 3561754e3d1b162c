"""The codec a peer of one release is spoken to with, in vLLM 0.33's typed messages.

:func:`wire_codec` gives, for a profile, an object with the functions of
:mod:`ecp.spec.codec` that the protocol machines and peers call
(``decode_input``, ``decode_outputs``, ``decode_handshake``, ``decode_init``,
``decode_ready_response``, ``encode_add``, ``encode_abort``,
``encode_utility``, ``encode_start_dp_wave``, ``encode_input``,
``encode_outputs``, ``encode_handshake``, ``encode_engine_dead``, ...), with the
same contracts: frames are written and read as that release writes and reads
them (its layout, its type bytes), messages in and out are :mod:`ecp.spec`'s
classes (vLLM 0.33's typed API), translated at the edge by :mod:`.translate`.

For vLLM 0.33 itself (the shipped layout) :func:`wire_codec` returns the module
:mod:`ecp.spec.codec`: no translation, no cost.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence, Union

import msgspec

from .. import codec as base
from ..control import StartDPWave, UtilityRequest
from ..errors import LocalProtocolError
from ..handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from ..limits import DEFAULT_LIMITS, DecodeLimits
from ..outputs import EngineCoreOutputs
from ..request import EngineCoreRequest
from .translate import Translator
from ..version import VLLM_RELEASE

if TYPE_CHECKING:
    from .model import Profile

Frame = Union[bytes, bytearray, memoryview]

#: frame label -> the class of vLLM 0.33's typed API (ecp.spec's: the 0.33 module's) a frame carries
API_CLASSES: dict[str, type] = {
    "ADD": EngineCoreRequest, "UTILITY": UtilityRequest, "START_DP_WAVE": StartDPWave,
    "outputs": EngineCoreOutputs, "HELLO": Hello, "READY": Ready, "INIT": EngineHandshakeMetadata,
    "ready payload": EngineCoreReadyResponse,
}


def _fields(cls: type) -> list[tuple[str, str]]:
    return [(f.name, f.encode_name) for f in msgspec.structs.fields(cls)]


@lru_cache(maxsize=None)
def layout_field_names(cls: type) -> list[tuple[str, str]]:
    """Each field of ``cls`` as (attribute, name in the layouts): every class translated is a generated one,
    which carries the layout's names."""
    return _fields(cls)


def wire_codec(profile: "Profile") -> Any:
    """The codec for a peer of ``profile``'s release (the module :mod:`ecp.spec.codec`
    for the shipped vLLM 0.33 layout)."""
    from .resolve import shipped_profile

    if profile is shipped_profile(VLLM_RELEASE) or profile.layout == shipped_profile(VLLM_RELEASE).layout:
        return base
    return ReleaseCodec(profile)


def release_of_codec(codec: Any) -> str:
    """``0.32`` for a :class:`ReleaseCodec`, ``0.33`` for :mod:`ecp.spec.codec`."""
    return codec.release if isinstance(codec, ReleaseCodec) else VLLM_RELEASE


class ReleaseCodec:
    """:mod:`ecp.spec.codec`'s functions for a release other than 0.33 (see the module
    docstring). Build it with :func:`wire_codec`."""

    #: the same for every release
    ENGINE_DEAD = base.ENGINE_DEAD
    encode_engine_dead = staticmethod(base.encode_engine_dead)
    encode_payload = staticmethod(base.encode_payload)
    decode_any = staticmethod(base.decode_any)

    def __init__(self, profile: "Profile") -> None:
        self.profile = profile
        self.release = profile.release
        self._codec = profile.codec
        self._down = Translator(profile.label, layout_field_names)  # 0.33 -> this release
        self._up = Translator(f"vLLM {VLLM_RELEASE}", layout_field_names, fill_required=True)  # this release -> 0.33
        self._theirs = {label: profile.frame_message(label) for label in API_CLASSES if label in profile.frames}
        self._ours_by_theirs = {cls: API_CLASSES[label] for label, cls in self._theirs.items()}
        self._theirs_by_ours = {API_CLASSES[label]: cls for label, cls in self._theirs.items()}

    def __repr__(self) -> str:
        return f"<ReleaseCodec {self.profile.label}>"

    # ------------------------------------------------------------------ translation
    def to_release(self, message: Any) -> Any:
        """A 0.33 message (or a list of request ids) as this release's message."""
        if message.__class__ in (list, tuple):
            return list(message)
        target = self._theirs_by_ours.get(message.__class__)
        if target is None:
            raise LocalProtocolError(f"{type(message).__name__}: not in {self.profile.label}",
                                     clause="ECP-COMPAT-1", got=type(message).__name__)
        return self._down.struct(message, target)

    def to_033(self, message: Any) -> Any:
        """This release's message as 0.33's (lists, ``None`` and ENGINE_DEAD unchanged)."""
        target = self._ours_by_theirs.get(message.__class__)
        return message if target is None else self._up.struct(message, target)

    # ------------------------------------------------------------------ decoding
    def decode_input(self, frames: Sequence[Frame], limits: DecodeLimits = DEFAULT_LIMITS,
                     frame_offset: int = 0) -> Any:
        return self.to_033(self._codec.decode_input(frames, limits, frame_offset))

    def decode_outputs(self, frames: Sequence[Frame], limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        return self.to_033(self._codec.decode_outputs(frames, limits))

    def decode_handshake(self, frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        return self.to_033(self._codec.decode_handshake(frame, limits))

    def decode_init(self, frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        return self.to_033(self._codec.decode_init(frame, limits))

    def decode_ready_response(self, frame: Frame, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
        message = self._codec.decode_ready_response(frame, limits)
        return None if message is None else self.to_033(message)

    # ------------------------------------------------------------------ encoding
    def encode_input(self, message: Any) -> list[bytes]:
        return self._codec.encode_input(self.to_release(message))

    def encode_add(self, request: EngineCoreRequest) -> list[bytes]:
        return self.encode_input(request)

    def encode_abort(self, request_ids: Sequence[str]) -> list[bytes]:
        return self._codec.encode_input(list(request_ids))

    def encode_utility(self, client_index: int, call_id: int, method_name: str,
                       args: Sequence[Any] = ()) -> list[bytes]:
        base.encode_utility(client_index, call_id, method_name, args)  # the same checks (u64 call id)
        return self.encode_input(UtilityRequest(client_index, call_id, method_name, list(args)))

    def encode_start_dp_wave(self, new_wave: int, exclude_eng_index: int | None = None) -> list[bytes]:
        return self.encode_input(StartDPWave(new_wave, exclude_eng_index))

    def encode_outputs(self, outputs: Any) -> list[bytes]:
        return base.encode_outputs(self.to_release(outputs))

    def encode_handshake(self, message: Any) -> bytes:
        """One handshake frame (HELLO, READY, INIT or a ready payload; a plain map as it is)."""
        if isinstance(message, msgspec.Struct):
            message = self.to_release(message)
        return base.encode_handshake(message)
