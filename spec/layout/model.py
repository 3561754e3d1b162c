"""The layout file: a machine-readable description of one protocol release.

A layout lists every message with its encoding (msgpack array or map), its
direction and its fields in wire order; the enums that travel as integers; the
one-byte request types; and the UTILITY methods. ``ecp spec layout`` writes
the layout of the code in :mod:`ecp.spec`; layouts of earlier vLLM releases
are written by hand from vLLM's sources and say so in ``source``.

A receiver of a layout (``ecp spec diff``, the cross-version tests) must call
:func:`load_layout`, which validates the file and every type string, and
raises :class:`LayoutError` naming the offending entry.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

from . import types as wt

FORMAT = "ecp-layout/1"

Encoding = Literal["array", "map"]
#: sender->receiver. The coordinator is part of a frontend deployment.
Direction = Literal["frontend->engine", "engine->frontend", "both", "coordinator->engine",
                    "coordinator->frontend"]

_NO_DEFAULT = msgspec.UNSET


class LayoutError(ValueError):
    """A layout file that cannot be used: unreadable, invalid JSON, or inconsistent."""


class FieldLayout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """One field. ``index`` is its wire position (array) or declaration order (map)."""

    index: int
    name: str
    type: str
    required: bool
    #: the value a receiver assumes when the field is absent (only when not required)
    default: Any = _NO_DEFAULT
    note: str | None = None

    @property
    def wire_type(self) -> wt.WireType:
        return wt.parse(self.type)


class MessageLayout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """One message (a msgspec struct, dataclass or fixed dict on the wire)."""

    encoding: Encoding
    direction: Direction
    fields: list[FieldLayout]
    #: the frame this message is the payload of (``ADD``, ``outputs`` ...); absent for nested types
    frame: str | None = None
    #: map encoding only: keys whose value is the default are left out by senders
    omit_defaults: bool = False
    #: tagged map (HELLO/READY): ``[tag key, tag value]`` written first
    tag: list[str] | None = None
    defined_in: str | None = None
    note: str | None = None

    def field(self, name: str) -> FieldLayout | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def required_count(self) -> int:
        return sum(1 for f in self.fields if f.required)


class EnumLayout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """An enum that travels as an integer: member name -> value."""

    values: dict[str, int]
    note: str | None = None


class RequestTypeLayout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """One input type byte (hex, two digits)."""

    byte: str
    name: str
    on_wire: bool


class UtilityParamLayout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """One positional argument; ``name`` is documentation (``None`` where unknown).
    ``required`` is false when the engine's method has a default for it, so a caller
    may leave it (and every later one) out."""

    name: str | None
    type: str
    required: bool = True


class UtilityMethodLayout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """A UTILITY method: positional params (``None`` = not documented) and result type."""

    result: str
    params: list[UtilityParamLayout] | None = None
    #: false: the frontend of the same tree calls the method but no engine-side handler answers
    #: it (every call fails); a receiver rates that as a break, never as a widened result
    handled: bool = True


class Provenance(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """Where a generated layout came from: enough to regenerate and verify it."""

    vllm_version: str
    #: the extractor and its output version (``vllm-ast/1``)
    extractor: str
    #: ``wheel``, ``unpacked`` or ``checkout``
    tree: str
    wheel: str | None = None
    sha256: str | None = None
    #: every construct the extractor could not resolve statically (``file:line: code: what``)
    warnings: list[str] = []
    #: where each described thing is written (``path:line``, the path relative to the tree), keyed
    #: like diff subjects: ``Message``, ``Message.field``, ``enum Name``, ``enum Name.MEMBER``,
    #: ``request type 0xNN``, ``utility name``; annotations of ``ecp spec diff`` point there
    locations: dict[str, str] = {}


class Layout(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """Everything a peer built against one release assumes about the wire."""

    format: str
    name: str
    vllm_version: str
    source: str
    messages: dict[str, MessageLayout]
    enums: dict[str, EnumLayout]
    request_types: list[RequestTypeLayout]
    utility_methods: dict[str, UtilityMethodLayout]
    #: messages/enums the source of a hand-written layout did not show; never compared
    not_described: list[str] = []
    note: str | None = None
    #: generated layouts: release, wheel and extractor they come from
    provenance: Provenance | None = None

    def describes(self, name: str) -> bool:
        return name in self.messages or name in self.enums


def release_of(layout: Layout) -> str:
    """The short release name of a layout: ``0.32`` for ``vllm-0.32`` (version 0.32.0), the commit for a
    checkout named after it."""
    m = re.fullmatch(r"vllm-(\d+\.\d+)", layout.name)
    if m:
        return m.group(1)
    m = re.match(r"(\d+\.\d+)", layout.vllm_version)
    if m:
        return m.group(1)
    # a checkout that records no version is named by its commit (``vllm-1a2b3c4d5e6f``)
    return layout.name[len("vllm-"):] if layout.name.startswith("vllm-") else layout.name


# --------------------------------------------------------------------------- io
def _check(layout: Layout, origin: str) -> Layout:
    if layout.format != FORMAT:
        raise LayoutError(f"{origin}: format {layout.format!r} is not {FORMAT!r}")
    known_structs = set(layout.messages) | set(layout.not_described)
    known_enums = set(layout.enums) | set(layout.not_described)

    def check_type(text: str, where: str) -> None:
        try:
            parsed = wt.parse(text)
        except wt.TypeSyntaxError as exc:
            raise LayoutError(f"{origin}: {where}: {exc}") from None
        for kind, name in parsed.refs():
            if name not in (known_structs if kind == "struct" else known_enums):
                raise LayoutError(f"{origin}: {where}: {kind}:{name} is neither described nor listed "
                                  f"in not_described")

    for mname, msg in layout.messages.items():
        names = [f.name for f in msg.fields]
        if len(set(names)) != len(names):
            raise LayoutError(f"{origin}: {mname}: duplicate field names")
        if [f.index for f in msg.fields] != list(range(len(msg.fields))):
            raise LayoutError(f"{origin}: {mname}: field indexes must be 0..{len(msg.fields) - 1} in order")
        for f in msg.fields:
            check_type(f.type, f"{mname}.{f.name}")
            if f.required and f.default is not _NO_DEFAULT:
                raise LayoutError(f"{origin}: {mname}.{f.name}: a required field has no default")
        if msg.encoding == "array" and msg.tag is not None:
            raise LayoutError(f"{origin}: {mname}: only map messages carry a tag")
    bytes_seen = set()
    for rt in layout.request_types:
        if len(rt.byte) != 2 or any(c not in "0123456789abcdef" for c in rt.byte):
            raise LayoutError(f"{origin}: request type {rt.name}: byte {rt.byte!r} is not two lower-case hex digits")
        if rt.byte in bytes_seen:
            raise LayoutError(f"{origin}: request type byte {rt.byte} listed twice")
        bytes_seen.add(rt.byte)
    for uname, um in layout.utility_methods.items():
        check_type(um.result, f"utility {uname} result")
        for i, p in enumerate(um.params or ()):
            check_type(p.type, f"utility {uname} arg {i}")
    return layout


def decode_layout(data: bytes | str, origin: str = "layout") -> Layout:
    """Decode and validate layout JSON; raises :class:`LayoutError`."""
    try:
        layout = msgspec.json.decode(data, type=Layout)
    except msgspec.ValidationError as exc:
        raise LayoutError(f"{origin}: not a valid layout: {exc}") from None
    except msgspec.DecodeError as exc:
        raise LayoutError(f"{origin}: not JSON: {exc}") from None
    return _check(layout, origin)


_ONE_LINE = 110


def _dump(value: Any, indent: int) -> str:
    compact = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    flat = isinstance(value, dict) and not any(isinstance(v, (dict, list)) for v in value.values())
    if flat or not isinstance(value, (dict, list)) or not value or len(compact) + indent <= _ONE_LINE:
        return compact
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {_dump(v, indent + 2)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _dump(v, indent + 2) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def encode_layout(layout: Layout) -> bytes:
    """Deterministic, diff-friendly JSON: one field per line, trailing newline."""
    return (_dump(msgspec.to_builtins(layout), 0) + "\n").encode()
