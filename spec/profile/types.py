"""A layout's messages and enums as msgspec types, generated at run time.

Every message of a :class:`~ecp.spec.layout.model.Layout` becomes a
``msgspec.Struct`` made with :func:`msgspec.defstruct`: its fields in wire
order, ``array_like`` for array messages, the layout's defaults, ``omit_defaults``
and the ``[tag key, tag value]`` of HELLO/READY. Every enum becomes an
``enum.IntEnum`` holding exactly the release's members, so a value the release
does not define fails decoding as it does in that release. Wire types map as
``array[X]`` -> ``list[X]``, ``map[K, V]`` -> ``dict[K, V]``, ``tensor`` ->
:class:`~ecp.spec.tensors.Tensor` (through the codec's hooks), ``any`` -> ``Any``.

Fields are keyword-only: a generated class is built with names
(``Profile.message("EngineCoreRequest")(request_id=..., ...)``), positions are
the wire's business. A union msgspec cannot decode as one type (it allows one
array-like and one map-like member) is typed ``Any`` and listed in
:attr:`GeneratedTypes.widened`, so a receiver of such a field checks it itself.
"""

from __future__ import annotations

import enum
import keyword
from dataclasses import dataclass, field
from typing import Any, Union

import msgspec

from ..layout import types as wt
from ..layout.model import Layout, LayoutError, MessageLayout
from ..tensors import Tensor

#: the module generated classes claim (their ``__module__``), for readable reprs
MODULE = "ecp.spec.profile.generated"

_SCALARS: dict[str, Any] = {"bool": bool, "int": int, "float": float, "str": str, "bytes": bytes,
                            "tensor": Tensor}


@dataclass
class GeneratedTypes:
    """The classes of one layout: ``messages`` and ``enums`` by layout name, and
    ``widened``: ``Message.field`` paths typed ``Any`` (see the module docstring)."""

    messages: dict[str, type] = field(default_factory=dict)
    enums: dict[str, type[enum.IntEnum]] = field(default_factory=dict)
    widened: list[str] = field(default_factory=list)


def _decodable(typ: Any) -> bool:
    try:
        msgspec.msgpack.Decoder(typ, dec_hook=_no_hook)
    except TypeError:
        return False
    return True


def _no_hook(typ: type, obj: Any) -> Any:  # (only built, never called: checks the type is expressible)
    raise NotImplementedError


class _Builder:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.out = GeneratedTypes()
        self._building: list[str] = []

    # -- enums and structs, on demand (a message is built before the first one that uses it)
    def enum(self, name: str) -> Any:
        if name not in self.out.enums:
            e = self.layout.enums.get(name)
            if e is None:  # listed in not_described: an int of any value
                return int
            cls = enum.IntEnum(name, dict(sorted(e.values.items(), key=lambda kv: kv[1])), module=MODULE)
            self.out.enums[name] = cls
        return self.out.enums[name]

    def struct(self, name: str) -> Any:
        if name in self.out.messages:
            return self.out.messages[name]
        msg = self.layout.messages.get(name)
        if msg is None or name in self._building:
            # not described (the layout lists it in not_described), or a cycle: taken as it comes
            return Any
        self._building.append(name)
        try:
            cls = self._message(name, msg)
        finally:
            self._building.pop()
        self.out.messages[name] = cls
        return cls

    # -- types
    def _member(self, m: wt.Member) -> Any:
        if m.kind in _SCALARS:
            return _SCALARS[m.kind]
        if m.kind == "nil":
            return type(None)
        if m.kind == "any":
            return Any
        if m.kind == "array":
            return list[self.type(m.args[0])]  # type: ignore[misc]
        if m.kind == "map":
            return dict[self.type(m.args[0]), self.type(m.args[1])]  # type: ignore[misc]
        if m.kind == "struct":
            return self.struct(m.name)
        if m.kind == "enum":
            return self.enum(m.name)
        raise LayoutError(f"{self.layout.name}: no Python type for {m}")

    def type(self, t: wt.WireType) -> Any:
        members = [self._member(m) for m in t.members]
        if Any in members:
            return Any
        unique = list(dict.fromkeys(members))
        return unique[0] if len(unique) == 1 else Union[tuple(unique)]  # type: ignore[return-value]

    def _default(self, typ: Any, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (list, dict)) and value:
            # a non-empty container default (a nested struct's defaults): a fresh one per instance
            return msgspec.field(default_factory=lambda: msgspec.convert(value, typ))
        if isinstance(value, (list, dict)):
            return type(value)()
        try:
            return msgspec.convert(value, typ)  # an enum member for an enum's int, 1.0 for a float's 1
        except (msgspec.ValidationError, TypeError):
            return value  # the layout's default outside the field's type (a str field defaulting to nil)

    def _message(self, name: str, msg: MessageLayout) -> type:
        fields: list[tuple[str, Any, Any] | tuple[str, Any]] = []
        rename: dict[str, str] = {}
        for f in msg.fields:
            typ = self.type(f.wire_type)
            if typ is not Any and not _decodable(typ):
                self.out.widened.append(f"{name}.{f.name}")
                typ = Any
            attr = f.name if f.name.isidentifier() and not keyword.iskeyword(f.name) else f"field_{f.index}"
            if attr != f.name:
                rename[attr] = f.name
            if f.required:
                fields.append((attr, typ))
            else:
                default = None if f.default is msgspec.UNSET else f.default
                fields.append((attr, typ, self._default(typ, default)))
        kwargs: dict[str, Any] = {}
        if msg.tag:
            kwargs.update(tag_field=msg.tag[0], tag=msg.tag[1])
        return msgspec.defstruct(
            name, fields, kw_only=True, array_like=msg.encoding == "array",
            omit_defaults=msg.omit_defaults or msg.encoding == "array", rename=rename or None,
            module=MODULE, **kwargs)


def generate(layout: Layout) -> GeneratedTypes:
    """Build every message and enum of ``layout`` (raises :class:`LayoutError` for a
    type the grammar admits but no Python type expresses)."""
    builder = _Builder(layout)
    for name in layout.messages:
        builder.struct(name)
    for name in layout.enums:
        builder.enum(name)
    return builder.out
