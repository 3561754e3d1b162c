"""A release profile: everything one vLLM release puts on the wire, executable.

A :class:`Profile` is built from that release's layout (:func:`build_profile`):
its messages and enums as the generated classes of :mod:`ecp.spec.wiretypes`
(the committed module of a shipped layout, or the same source generated for any
other layout), its one-byte request types and its UTILITY methods with their
arities. Its :attr:`Profile.codec` encodes and decodes frames as a peer of that
release does (:mod:`.codec`). :mod:`ecp.spec`'s typed API is vLLM 0.33's: its
messages are the 0.33 profile's classes, and :mod:`ecp.spec.codec` (the tuned
codec of that API) writes and reads the bytes the 0.33 profile's codec does
(``tests/spec/test_profile_parity.py``).

A caller asking for something the release lacks (a message, a utility method)
gets :class:`~ecp.spec.errors.LocalProtocolError` citing ``ECP-COMPAT-1``
and naming the release ("pause_generation: not in vLLM 0.32").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..errors import LocalProtocolError
from ..layout.model import Layout, UtilityParamLayout, release_of
from ..wiretypes import load as load_wiretypes

if TYPE_CHECKING:
    from .codec import ProfileCodec


@dataclass(frozen=True)
class UtilitySignature:
    """A UTILITY method of one release: positional ``params`` (``None``: not documented
    by the release's source, so any count is taken) and its ``result`` type."""

    name: str
    params: tuple[UtilityParamLayout, ...] | None
    result: str

    @property
    def min_args(self) -> int:
        """Arguments a caller must send (the engine's method has no default for them)."""
        return sum(1 for p in self.params or () if p.required)

    @property
    def max_args(self) -> int | None:
        """Most arguments the engine's method takes (``None``: unknown)."""
        return None if self.params is None else len(self.params)

    def accepts(self, count: int) -> bool:
        """Whether an engine of this release takes a call with ``count`` arguments."""
        top = self.max_args
        return self.min_args <= count and (top is None or count <= top)

    @property
    def arity(self) -> str:
        """``2``, ``0..5`` or ``any`` (for messages)."""
        top = self.max_args
        if top is None:
            return "any"
        return str(top) if top == self.min_args else f"{self.min_args}..{top}"


class Profile:
    """One release, executable. Build it with :func:`build_profile` (or
    :func:`~ecp.spec.profile.resolve_profile` from a release name or path)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        #: ``0.32``: what messages and reports call the release
        self.release = release_of(layout)
        self.vllm_version = layout.vllm_version
        #: the module of the release's generated wire types (``ecp.spec.wiretypes.vllm_0_33``)
        self.module = load_wiretypes(layout)
        #: message name -> generated class
        self.messages: dict[str, type] = dict(self.module.MESSAGES)
        #: enum name -> IntEnum of exactly the release's members
        self.enums: dict[str, type[enum.IntEnum]] = dict(self.module.ENUMS)
        #: ``Message.field`` typed ``Any`` because msgspec cannot decode its union as one type
        self.widened: tuple[str, ...] = tuple(self.module.WIDENED)
        #: request type name -> its byte, for the types a peer sends (ADD, ABORT, ...)
        self.request_types: dict[str, bytes] = {
            rt.name: bytes.fromhex(rt.byte) for rt in layout.request_types if rt.on_wire}
        #: engine-internal type bytes: never on the wire
        self.internal_request_types: dict[str, bytes] = {
            rt.name: bytes.fromhex(rt.byte) for rt in layout.request_types if not rt.on_wire}
        self.utility_methods: dict[str, UtilitySignature] = {
            name: UtilitySignature(name, None if um.params is None else tuple(um.params), um.result)
            for name, um in layout.utility_methods.items()}
        #: frame label (``ADD``, ``outputs``, ``HELLO`` ...) -> message name
        self.frames: dict[str, str] = {msg.frame: name for name, msg in layout.messages.items() if msg.frame}

    def __repr__(self) -> str:
        return f"<Profile vLLM {self.release} ({self.layout.name}, {len(self.messages)} messages)>"

    @property
    def label(self) -> str:
        """``vLLM 0.32``: how reports name the release."""
        return f"vLLM {self.release}"

    def _missing(self, what: str, name: str) -> LocalProtocolError:
        return LocalProtocolError(f"{name}: not in {self.label}", clause="ECP-COMPAT-1",
                                  expected=f"a {what} of {self.label}", got=name)

    def message(self, name: str) -> type:
        """The generated class of message ``name``; raises :class:`LocalProtocolError`
        when the release has no such message."""
        try:
            return self.messages[name]
        except KeyError:
            raise self._missing("message", name) from None

    def frame_message(self, frame: str) -> type:
        """The class a frame carries: ``ADD`` -> EngineCoreRequest, ``outputs`` ->
        EngineCoreOutputs, ``HELLO`` -> Hello, ``ready payload`` ..."""
        try:
            return self.messages[self.frames[frame]]
        except KeyError:
            raise self._missing("frame", frame) from None

    def has_field(self, message: str, field: str) -> bool:
        msg = self.layout.messages.get(message)
        return msg is not None and msg.field(field) is not None

    def utility(self, name: str) -> UtilitySignature:
        """The release's UTILITY method ``name``; raises :class:`LocalProtocolError`
        ("pause_generation: not in vLLM 0.32") when the release has none."""
        try:
            return self.utility_methods[name]
        except KeyError:
            raise self._missing("utility method", name) from None

    def check_utility_call(self, name: str, args: list[Any] | tuple[Any, ...]) -> None:
        """Raise :class:`LocalProtocolError` unless an engine of this release takes the
        call ``name(*args)``: the method exists and takes that many arguments."""
        sig = self.utility(name)
        if not sig.accepts(len(args)):
            raise LocalProtocolError(f"{name} takes {sig.arity} argument(s) in {self.label}, not {len(args)}",
                                     clause="ECP-UTIL-1", expected=sig.arity, got=len(args))

    @cached_property
    def codec(self) -> "ProfileCodec":
        """Frames in and out as a peer of this release encodes and decodes them."""
        from .codec import ProfileCodec

        return ProfileCodec(self)


def build_profile(layout: Layout) -> Profile:
    """The profile of one layout (a shipped one, a file, or extracted from vLLM)."""
    return Profile(layout)
