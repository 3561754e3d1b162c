"""A layout as Python source: the wire types of one release, as code a reader and a type checker open.

:func:`render` turns a :class:`~ecp.spec.layout.model.Layout` into the source of one module:

- every enum as an ``enum.IntEnum`` holding exactly the release's members (a value the release does
  not define fails decoding, as it does in that release);
- every message as a ``msgspec.Struct`` (each after the messages it names, so that its annotations are
  the classes themselves and not strings msgspec would evaluate) with its fields in wire order: ``array_like`` for array
  messages, the layout's defaults, ``omit_defaults``, the ``[tag key, tag value]`` of HELLO/READY;
  positional where every required field comes before every optional one, keyword-only otherwise;
- what we write by hand about a message, a field or an enum (:mod:`ecp.spec.overlay`: docstring,
  clause, invariants) as the class docstring and a ``#:`` comment above the field, and the base class
  of :mod:`ecp.spec.behaviour` a note names (its ``__post_init__`` checks, its ``__str__``), in every
  release that has it;
- an overlay note's pin (the type vLLM's code sends where the layout can only say ``any``: ``int | nil``,
  or ``struct:UtilityResult``, a hand-written envelope of :mod:`ecp.spec.envelope`), its decode limit
  (``receive``: the messages of a field's type kept as ``map[str, any]`` or ``any``) and the container an
  array decodes into (``holds="set"``), in every release that has the field (:func:`field_type`);
- ``MESSAGES``, ``ENUMS`` (name -> class, layout order) and ``WIDENED``.

Wire types map as ``array[X]`` -> ``list[X]``, ``map[K, V]`` -> ``dict[K, V]``, ``tensor`` ->
:class:`~ecp.spec.tensors.Tensor` (through the codec's hooks), ``any`` -> ``Any``; a struct or
enum the layout lists in ``not_described`` is ``Any`` or ``int``. A union msgspec cannot decode as
one type (more than one int-like, str-like (``str``, ``bytes``), array-like or map-like member, several
structs not all tagged, a tensor beside anything but nil) is typed ``Any`` and listed in ``WIDENED``, so a receiver of such a field checks it itself.

The shipped layouts' modules are committed in :mod:`ecp.spec.wiretypes` (``ecp spec types`` writes
them, ``--check`` fails while one is stale); any other layout gets the same source written to a
cache folder and imported (:func:`ecp.spec.wiretypes.load`).
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import textwrap
import msgspec

from . import types as wt
from ..envelope import MESSAGES as ENVELOPES
from ..overlay import OVERLAY, Note
from .model import Layout, LayoutError, MessageLayout, encode_layout, release_of

#: names the generated module binds itself: a message, enum or field may not take them
RESERVED = frozenset({"annotations", "enum", "msgspec", "Any", "Tensor", "behaviour", "envelope", "MESSAGES", "ENUMS",
                      "WIDENED", "LAYOUT", "RELEASE"})
_WIDTH = 110


def module_name(layout: Layout) -> str:
    """``vllm_0_33`` for ``vllm-0.33``: the name of the layout's module in :mod:`ecp.spec.wiretypes`."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", layout.name)
    return name if name.isidentifier() and not keyword.iskeyword(name) else f"layout_{name}"


# --------------------------------------------------------------------------- types
class _Types:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        #: the hand-written envelopes a ``struct:`` may name (only while rendering a pinned field)
        self.envelopes: frozenset[str] = frozenset()

    def member(self, m: wt.Member) -> str:
        if m.kind in ("bool", "int", "float", "str", "bytes"):
            return m.kind
        if m.kind == "nil":
            return "None"
        if m.kind == "any":
            return "Any"
        if m.kind == "tensor":
            return "Tensor"
        if m.kind == "array":
            return f"list[{self.type(m.args[0])}]"
        if m.kind == "map":
            return f"dict[{self.type(m.args[0])}, {self.type(m.args[1])}]"
        if m.kind == "struct":
            if m.name in self.layout.messages:
                return m.name
            return f"envelope.{m.name}" if m.name in self.envelopes else "Any"
        if m.kind == "enum":
            return m.name if m.name in self.layout.enums else "int"
        raise LayoutError(f"{self.layout.name}: no Python type for {m}")

    def type(self, t: wt.WireType, holds: str | None = None) -> str:
        rendered = list(dict.fromkeys(
            f"set[{self.type(m.args[0])}]" if holds == "set" and m.kind == "array" else self.member(m)
            for m in t.members))
        if "Any" in rendered:
            return "Any"
        rendered = [r for r in rendered if r != "None"] + [r for r in rendered if r == "None"]
        return " | ".join(rendered)

    # -- which unions msgspec decodes as one type (its rules for union members)
    def decodable(self, t: wt.WireType) -> bool:
        members = list(dict.fromkeys(t.members))  # ("int | int" is one int)
        kinds = [self._kind(m) for m in members]
        if "any" in kinds:
            return True  # rendered as Any: msgspec takes anything
        if "custom" in kinds and any(k not in ("custom", "nil") for k in kinds):
            return False
        if kinds.count("custom") > 1:
            return False
        tagged = [m for m in members if self._kind(m) in ("tagged-map", "tagged-array")]
        structs = [m for m in members if m.kind == "struct" and m.name in self.layout.messages]
        if len(structs) > 1 and len(tagged) != len(structs):  # several structs: all of them tagged
            return False
        if tagged:
            fields = {self.layout.messages[m.name].tag[0] for m in tagged}  # type: ignore[index]
            if len(fields) != 1 or len({self._kind(m) for m in tagged}) != 1:
                return False
            shape = "map" if self._kind(tagged[0]) == "tagged-map" else "array"
            if shape in kinds:  # an untagged member of the same shape beside tagged structs
                return False
            kinds = [k for k in kinds if not k.startswith("tagged-")] + [shape]
        kinds = ["str" if k == "bytes" else k for k in kinds]  # msgspec counts bytes as str-like
        for group in ("int", "str", "array", "map"):
            if kinds.count(group) > 1:
                return False
        return all(self._nested_ok(m) for m in members)

    def _kind(self, m: wt.Member) -> str:
        if m.kind in ("int", "enum"):  # an enum not described is an int all the same
            return "int"
        if m.kind == "struct":
            msg = self.layout.messages.get(m.name)
            if msg is None:
                return "any"
            shape = "array" if msg.encoding == "array" else "map"
            return f"tagged-{shape}" if msg.tag else shape
        if m.kind == "tensor":
            return "custom"
        return {"nil": "nil", "bool": "bool", "float": "float", "str": "str", "bytes": "bytes",
                "any": "any", "array": "array", "map": "map"}[m.kind]

    def _nested_ok(self, m: wt.Member) -> bool:
        if m.kind == "array":
            return self.decodable(m.args[0])
        if m.kind == "map":
            return self.decodable(m.args[0]) and self.decodable(m.args[1])
        return True


# --------------------------------------------------------------------------- defaults
def _literal(value: object) -> str:
    """``value`` (a JSON value) as a Python literal, strings double-quoted."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and value != value:  # NaN
        return 'float("nan")'
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _default(layout: Layout, t: wt.WireType, annotation: str, value: object) -> str:
    if value is None:
        return "None"
    kinds = {m.kind for m in t.members}
    if isinstance(value, dict) and value and len(t.members) == 1 and t.members[0].kind == "struct":
        msg = layout.messages.get(t.members[0].name)
        if msg is not None and value == {f.name: f.default for f in msg.fields if not f.required}:
            return f"msgspec.field(default_factory=lambda: {t.members[0].name}())"  # the message's defaults
    if isinstance(value, (list, dict)) and value:
        # a non-empty container default (a nested struct's defaults): a fresh one per instance
        return f"msgspec.field(default_factory=lambda: msgspec.convert({_literal(value)}, {annotation}))"
    if isinstance(value, (list, dict)):
        return "[]" if isinstance(value, list) else "{}"
    if isinstance(value, int) and not isinstance(value, bool):
        for m in t.members:
            if m.kind == "enum" and m.name in layout.enums:
                members = layout.enums[m.name].values
                name = next((k for k, v in members.items() if v == value), None)
                if name is not None and "int" not in kinds:
                    return f"{m.name}.{name}" if _enum_member_ok(name) else f"{m.name}({value})"
        if "float" in kinds and "int" not in kinds:
            return _literal(float(value))
    return _literal(value)


def _enum_member_ok(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


# --------------------------------------------------------------------------- overlay on a field's type
def _untyped(t: wt.WireType, how: str) -> wt.WireType:
    """``t`` with every ``struct:`` member (nested ones included) as ``map[str, any]`` or ``any``."""
    members = []
    for m in t.members:
        if m.kind == "struct":
            members.append(wt.parse("map[str, any]").members[0] if how == "map" else wt.Member("any"))
        elif m.args:
            members.append(wt.Member(m.kind, tuple(_untyped(a, how) for a in m.args), m.name))
        else:
            members.append(m)
    if any(m.kind == "any" for m in members):
        return wt.WireType((wt.Member("any"),))  # any takes nil too
    return wt.WireType(tuple(dict.fromkeys(members)))


def field_type(layout: Layout, message: str, field: str, t: wt.WireType, note: Note | None) -> wt.WireType:
    """The wire type a field is generated with: the layout's, with the overlay note's pin (only where the
    layout says ``any``) or decode limit (``receive``) applied."""
    if note is None:
        return t
    if note.pin:
        if any(m.kind != "any" for m in t.members):
            raise LayoutError(f"{layout.name}: {message}.{field} is typed {t} there; the overlay pins "
                              f"{note.pin!r}, which may only replace any")
        t = wt.parse(note.pin)
    if note.receive:
        if note.receive not in ("map", "any"):
            raise LayoutError(f"overlay {message}.{field}: receive is 'map' or 'any', not {note.receive!r}")
        t = _untyped(t, note.receive)
    if note.holds not in (None, "set"):
        raise LayoutError(f"overlay {message}.{field}: holds is 'set', not {note.holds!r}")
    return t


# --------------------------------------------------------------------------- rendering
def _wrap(text: str, width: int) -> list[str]:
    """Paragraphs (blank-line separated) filled to ``width``, blank lines kept."""
    out: list[str] = []
    for i, para in enumerate(text.strip().split("\n\n")):
        if i:
            out.append("")
        out += textwrap.wrap(" ".join(para.split()), width, break_long_words=False, break_on_hyphens=False) or [""]
    return out


def _docstring(text: str, indent: str) -> list[str]:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"').strip()
    lines = _wrap(text, _WIDTH - len(indent) - 3)
    if len(lines) == 1 and len(indent) + len(lines[0]) + 6 <= _WIDTH:
        return [f'{indent}"""{lines[0]}"""']
    out = [f'{indent}"""{lines[0]}']
    out += [f"{indent}{line}".rstrip() for line in lines[1:]]
    out.append(f'{indent}"""')
    return out


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}#: {line}".rstrip() for line in _wrap(text, _WIDTH - len(indent) - 3)]


def _check_name(layout: Layout, what: str, name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED:
        raise LayoutError(f"{layout.name}: {what} {name!r} cannot be a Python class name")


def _message_doc(name: str, msg: MessageLayout, note: Note | None, release: str) -> str:
    required = sum(1 for f in msg.fields if f.required)
    shape = (f"an array of {len(msg.fields)} ({required} required)" if msg.encoding == "array"
             else f"a map of {len(msg.fields)} keys ({required} required)")
    wire = f"vLLM {release} wire: {shape}"
    if msg.tag:
        wire += f", tagged {msg.tag[0]}={msg.tag[1]!r}"
    if msg.frame:
        wire += f", the {msg.frame} frame"
    wire += f", {msg.direction}"
    if msg.defined_in:
        wire += f" ({msg.defined_in})"
    parts = [note.text()] if note is not None and note.text() else [f"``{name}`` of vLLM {release}."]
    if msg.note:
        parts.append(msg.note.strip())
    parts.append(wire + ".")
    return "\n\n".join(parts)


def _definition_order(layout: Layout) -> list[str]:
    """The messages in layout order, each after the messages its fields name (so that annotations are
    the classes themselves, which msgspec reads without evaluating a string); a cycle keeps layout order."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order or name in visiting:
            return
        visiting.add(name)
        for f in layout.messages[name].fields:
            for kind, ref in sorted(f.wire_type.refs()):
                if kind == "struct" and ref in layout.messages:
                    visit(ref)
        visiting.discard(name)
        order.append(name)

    for name in layout.messages:
        visit(name)
    return order


def render(layout: Layout, overlay: dict[str, Note] | None = None, *, origin: str | None = None) -> str:
    """The source of the module of ``layout``'s wire types (see the module docstring). ``overlay``
    defaults to :data:`ecp.spec.overlay.OVERLAY`; ``origin`` names the layout's file in the header."""
    if overlay is None:
        overlay = OVERLAY
    release = release_of(layout)
    types = _Types(layout)
    origin = origin or f"the layout {layout.name}"
    out = _docstring(
        f"vLLM {release}'s wire types: {origin} with spec/overlay.py, rendered by ``ecp spec types``.\n\n"
        "Do not edit: ``ecp spec types`` rewrites this module and ``ecp spec types --check`` fails while it is "
        "stale. What is written by hand about a message or a field belongs in spec/overlay.py.", "")
    bases = sorted({n.base for k, n in overlay.items() if n.base and k in (*layout.messages, *layout.enums)})
    pinned = {k: wt.parse(n.pin) for k, n in overlay.items() if n.pin and "." in k
              and k.split(".", 1)[0] in layout.messages
              and any(f.name == k.split(".", 1)[1] for f in layout.messages[k.split(".", 1)[0]].fields)}
    envelopes = sorted({ref for t in pinned.values() for kind, ref in t.refs()
                        if kind == "struct" and ref not in layout.messages and ref in ENVELOPES})
    out += ["", "import enum", "from typing import Any", "",
            "import msgspec", "", *(["from ecp.spec import behaviour"] if bases else []),
            *(["from ecp.spec import envelope"] if envelopes else []),
            "from ecp.spec.tensors import Tensor", "",
            "#: the layout these types are generated from", f"LAYOUT = {_literal(layout.name)}",
            "#: the release's short name", f"RELEASE = {_literal(release)}"]

    for name, e in layout.enums.items():
        _check_name(layout, "enum", name)
        note = overlay.get(name)
        doc = note.text() if note is not None and note.text() else f"``{name}`` of vLLM {release}."
        if e.note:
            doc += "\n\n" + e.note.strip()
        members = sorted(e.values.items(), key=lambda kv: kv[1])
        out += ["", ""]
        base = f"behaviour.{note.base}, " if note is not None and note.base else ""
        if all(_enum_member_ok(k) for k, _ in members):
            out.append(f"class {name}({base}enum.IntEnum):")
            out += _docstring(doc, "    ")
            out.append("")
            for k, v in members:
                member_note = overlay.get(f"{name}.{k}")
                if member_note is not None and member_note.text():
                    out += _comment(member_note.text(), "    ")
                out.append(f"    {k} = {v}")
        else:
            out.append(f"#: {doc.splitlines()[0]}")
            out.append(f"{name} = enum.IntEnum({_literal(name)}, {_literal(dict(members))}, module=__name__)")

    widened: list[str] = []
    defined: set[str] = set()
    for name in _definition_order(layout):
        msg = layout.messages[name]
        _check_name(layout, "message", name)
        out += ["", ""]
        options = []
        keyword_only = any(f.required for i, f in enumerate(msg.fields)
                           if any(not g.required for g in msg.fields[:i]))
        if keyword_only:
            options.append("kw_only=True")
        if msg.tag:
            options += [f"tag_field={_literal(msg.tag[0])}", f"tag={_literal(msg.tag[1])}"]
        if msg.encoding == "array":
            options.append("array_like=True")
        options.append(f"omit_defaults={msg.omit_defaults or msg.encoding == 'array'}")
        note = overlay.get(name)
        base = f"behaviour.{note.base}, " if note is not None and note.base else ""
        out.append(f"class {name}({base}msgspec.Struct, {', '.join(options)}):")
        out += _docstring(_message_doc(name, msg, overlay.get(name), release), "    ")
        out.append("")
        for f in msg.fields:
            field_note = overlay.get(f"{name}.{f.name}")
            t = field_type(layout, name, f.name, f.wire_type, field_note)
            types.envelopes = frozenset(ENVELOPES) if field_note is not None and field_note.pin else frozenset()
            holds = field_note.holds if field_note is not None else None
            annotation = types.type(t, holds)
            note_text = []
            if annotation != "Any" and not types.decodable(t):
                widened.append(f"{name}.{f.name}")
                note_text.append(f"{f.type}: msgspec decodes no such union as one type, so it is taken as it "
                                 "comes (a receiver checks it).")
                annotation = "Any"
            if field_note is not None and field_note.text():
                note_text.insert(0, field_note.text())
            if f.note:
                note_text.append(f.note.strip())
            if {n for k, n in t.refs() if k == "struct" and n in layout.messages} - defined:
                annotation = _literal(annotation)  # a message defined further down (a cycle): msgspec resolves it
            attr = f.name
            renamed = not (attr.isidentifier() and not keyword.iskeyword(attr) and attr not in RESERVED)
            if renamed:
                attr = f"field_{f.index}"
            if note_text:
                out += _comment("\n".join(note_text), "    ")
            line = f"    {attr}: {annotation}"
            if f.required:
                if renamed:
                    line += f" = msgspec.field(name={_literal(f.name)})"
            else:
                value = None if f.default is msgspec.UNSET else f.default
                default = ("msgspec.field(default_factory=set)" if holds == "set" and value == []
                           else _default(layout, t, annotation, value))
                if value is None and not t.nullable and annotation != "Any":
                    # vLLM's own default lies outside the field's type; kept as it writes it
                    default += "  # type: ignore[assignment]"
                if renamed:
                    default = (default.replace("msgspec.field(", f"msgspec.field(name={_literal(f.name)}, ", 1)
                               if default.startswith("msgspec.field(")
                               else f"msgspec.field(name={_literal(f.name)}, default={default})")
                line += f" = {default}"
            out.append(line)
        if not msg.fields:
            out.append("    pass")
        defined.add(name)

    out += ["", "",
            "#: every message of the layout by name, in layout order",
            "MESSAGES: dict[str, type[msgspec.Struct]] = {"]
    out += [f"    {_literal(n)}: {n}," for n in layout.messages]
    out.append("}")
    out += ["#: every enum of the layout by name", "ENUMS: dict[str, type[enum.IntEnum]] = {"]
    out += [f"    {_literal(n)}: {n}," for n in layout.enums]
    out.append("}")
    out.append("#: ``Message.field`` typed ``Any`` because msgspec decodes no such union as one type")
    out.append("WIDENED: tuple[str, ...] = (" + "".join(f"{_literal(w)}, " for w in widened).rstrip(" ") + ")")
    out += ["", "__all__ = ["]
    out += [f"    {_literal(n)}," for n in ("LAYOUT", "RELEASE", "MESSAGES", "ENUMS", "WIDENED",
                                            *layout.enums, *layout.messages)]
    out.append("]")
    return "\n".join(out) + "\n"


def layout_digest(layout: Layout) -> str:
    """A short digest of a layout's content: the name of its module in the run-time cache."""
    return hashlib.sha256(encode_layout(layout)).hexdigest()[:16]


__all__ = ["Note", "RESERVED", "field_type", "layout_digest", "module_name", "render"]
