"""A generic, layout-driven msgpack encoder and checking decoder.

This is how two releases are tried against each other without either one's
code: :func:`sample` builds a message the way a sender built against one
layout writes it (arrays always full length, maps keyed by name), and
:func:`check` decodes those bytes as a receiver built against another layout
would, reporting every problem as an :class:`Issue`:

* ``rejected``: the receiver's decoder refuses the message (wrong shape,
  missing required field, value of the wrong type, too short an array);
* ``misaligned``: it decodes, but an array position carries a different
  field for each side, so values land in the wrong field;
* ``dropped``: the sender's field is ignored by the receiver (extra array
  elements, unknown map keys);
* ``defaulted``: the receiver fills a field the sender did not write;
* ``unchecked``: a nested type one of the layouts does not describe.

Two samples exist: ``full`` (every optional field set to a non-default value)
and ``sparse`` (optional fields at their defaults, except lists of nested
messages, which hold one sparse item, so that ``outputs`` carries an output).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from . import types as wt
from ..overlay import OVERLAY
from .model import Layout, MessageLayout

IssueKind = Literal["rejected", "misaligned", "dropped", "defaulted", "unchecked"]
#: worst first
ISSUE_ORDER: tuple[IssueKind, ...] = ("rejected", "misaligned", "dropped", "defaulted", "unchecked")
Mode = Literal["full", "sparse"]

_MAX_DEPTH = 8
_TENSOR = ["uint8", [1], msgspec.msgpack.Ext(3, b"\x07")]


@dataclass(frozen=True)
class Issue:
    kind: IssueKind
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.path}: {self.detail}"


# --------------------------------------------------------------------------- sampling
def _sampleable(layout: Layout, m: wt.Member) -> bool:
    return m.kind != "struct" or m.name in layout.messages


def _pick(layout: Layout, t: wt.WireType) -> wt.Member:
    non_nil = [m for m in t.members if m.kind != "nil"]
    # Prefer a concrete member the sender's layout can build over "any" or an
    # undescribed struct, so that the receiver's checks have something to bite on.
    concrete = [m for m in non_nil if m.kind != "any" and _sampleable(layout, m)]
    if concrete:
        return concrete[0]
    if len(non_nil) < len(t.members):
        return wt.Member("nil")
    return (non_nil or list(t.members))[0]


def _lists_messages(layout: Layout, t: wt.WireType) -> bool:
    return any(m.kind == "array" and any(i.kind == "struct" and i.name in layout.messages
                                         for i in m.args[0].members) for m in t.members)


def _sample_member(layout: Layout, m: wt.Member, mode: Mode, depth: int) -> Any:
    kind = m.kind
    if kind == "nil":
        return None
    if kind == "bool":
        return True
    if kind == "int":
        return 7
    if kind == "float":
        return 1.5
    if kind == "str":
        return "s"
    if kind == "bytes":
        return b"\x01"
    if kind == "any":
        return "any"
    if kind == "tensor":
        return list(_TENSOR)
    if kind == "enum":
        e = layout.enums.get(m.name)
        return max(e.values.values()) if e and e.values else 0
    if kind == "array":
        item = _pick(layout, m.args[0])
        if not _sampleable(layout, item):
            return []  # items the sender's layout does not describe: send none
        return [_sample_member(layout, item, mode, depth + 1)]
    if kind == "map":
        key, value = _pick(layout, m.args[0]), _pick(layout, m.args[1])
        if not (_sampleable(layout, key) and _sampleable(layout, value)):
            return {}
        return {_sample_member(layout, key, mode, depth + 1): _sample_member(layout, value, mode, depth + 1)}
    if kind == "struct":
        msg = layout.messages.get(m.name)
        if msg is None or depth > _MAX_DEPTH:
            return {}  # undescribed: an empty map is the least a receiver could expect
        return _sample_struct(layout, m.name, msg, mode, depth + 1)
    raise ValueError(f"no sample for {m}")


def _sample_type(layout: Layout, t: wt.WireType, mode: Mode, depth: int) -> Any:
    return _sample_member(layout, _pick(layout, t), mode, depth)


def _sent_type(layout: Layout, message: str, field: str, t: wt.WireType) -> wt.WireType:
    """What a sender writes in a field: the layout's type, or the overlay's pin where the layout can only
    say ``any`` (what vLLM's code actually sends there, :mod:`ecp.spec.overlay`)."""
    note = OVERLAY.get(f"{message}.{field}")
    if note is None or not note.pin or any(m.kind != "any" for m in t.members):
        return t
    return wt.parse(note.pin)


def _sample_struct(layout: Layout, name: str, msg: MessageLayout, mode: Mode, depth: int) -> Any:
    values = []
    for f in msg.fields:
        if mode == "sparse" and not f.required and not _lists_messages(layout, f.wire_type):
            values.append((f.name, f.default if f.default is not msgspec.UNSET else None, True))
        else:
            values.append((f.name, _sample_type(layout, _sent_type(layout, name, f.name, f.wire_type), mode, depth),
                           False))
    if msg.encoding == "array":
        return [v for _, v, _ in values]
    out: dict[str, Any] = {}
    if msg.tag:
        out[msg.tag[0]] = msg.tag[1]
    for name, value, is_default in values:
        if is_default and msg.omit_defaults:
            continue
        out[name] = value
    return out


def sample(layout: Layout, message: str, mode: Mode = "full") -> Any:
    """The builtins value a sender built against ``layout`` writes for ``message``."""
    return _sample_struct(layout, message, layout.messages[message], mode, 0)


def encode(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


# --------------------------------------------------------------------------- checking
def _kind_of(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, list):
        return f"array of {len(value)}"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, msgspec.msgpack.Ext):
        return f"ext {value.code}"
    return type(value).__name__


class _Checker:
    def __init__(self, receiver: Layout, sender: Layout | None) -> None:
        self.receiver = receiver
        self.sender = sender
        self.issues: list[Issue] = []

    def _member_ok(self, m: wt.Member, value: Any, path: str, sender_struct: str | None) -> list[Issue] | None:
        """Issues if ``value`` fits member ``m`` (possibly empty), ``None`` if it does not fit."""
        k = m.kind
        if k == "any":
            return []
        if k == "nil":
            return [] if value is None else None
        if k == "bool":
            return [] if isinstance(value, bool) else None
        if k == "int":
            return [] if isinstance(value, int) and not isinstance(value, bool) else None
        if k == "float":
            return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if k == "str":
            return [] if isinstance(value, str) else None
        if k == "bytes":
            return [] if isinstance(value, (bytes, bytearray)) else None
        if k == "tensor":
            ok = (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
                  and isinstance(value[1], list)
                  and (isinstance(value[2], msgspec.msgpack.Ext) or type(value[2]) is int))
            return [] if ok else None
        if k == "enum":
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            e = self.receiver.enums.get(m.name)
            return [] if e is None or value in e.values.values() else None
        if k == "array":
            if not isinstance(value, list):
                return None
            out: list[Issue] = []
            for i, item in enumerate(value):
                sub = self._value(m.args[0], item, f"{path}[{i}]", sender_struct)
                if sub is None:
                    return None
                out += sub
            return out
        if k == "map":
            if not isinstance(value, dict):
                return None
            out = []
            for key, item in value.items():
                kk = self._value(m.args[0], key, f"{path}{{key}}", None)
                vv = self._value(m.args[1], item, f"{path}[{key!r}]", sender_struct)
                if kk is None or vv is None:
                    return None
                out += kk + vv
            return out
        if k == "struct":
            msg = self.receiver.messages.get(m.name)
            if msg is None:
                return [Issue("unchecked", path, f"{m.name} is not described by the receiver's layout")]
            return self._struct(m.name, msg, value, path)
        raise ValueError(f"unknown member {m}")

    def _value(self, t: wt.WireType, value: Any, path: str, sender_struct: str | None) -> list[Issue] | None:
        # The first member that takes the value cleanly wins; otherwise report
        # everything found under the first member whose shape matched.
        rejected: list[Issue] | None = None
        for m in t.members:
            got = self._member_ok(m, value, path, sender_struct)
            if got is None:
                continue
            if not any(i.kind == "rejected" for i in got):
                return got
            rejected = rejected if rejected is not None else got
        return rejected

    def _field(self, t: wt.WireType, value: Any, path: str) -> list[Issue]:
        got = self._value(t, value, path, None)
        if got is None:
            return [Issue("rejected", path, f"expected {t}, got {_kind_of(value)}")]
        return got

    def _struct(self, name: str, msg: MessageLayout, value: Any, path: str) -> list[Issue]:
        sender_msg = self.sender.messages.get(name) if self.sender else None
        if msg.encoding == "array":
            if not isinstance(value, list):
                return [Issue("rejected", path, f"{name} is an array, got {_kind_of(value)}")]
            need = msg.required_count
            if len(value) < need:
                return [Issue("rejected", path, f"{name} needs at least {need} elements, got {len(value)}")]
            out: list[Issue] = []
            for i, item in enumerate(value[:len(msg.fields)]):
                f = msg.fields[i]
                fpath = f"{path}.{f.name}" if path else f.name
                if sender_msg is not None and sender_msg.encoding == "array" and i < len(sender_msg.fields):
                    sent = sender_msg.fields[i].name
                    if sent != f.name:
                        out.append(Issue("misaligned", fpath, f"position {i} carries the sender's {sent!r}"))
                out += self._field(f.wire_type, item, fpath)
            if len(value) > len(msg.fields):
                extra = len(value) - len(msg.fields)
                names = ([f.name for f in sender_msg.fields[len(msg.fields):]]
                         if sender_msg is not None and sender_msg.encoding == "array" else [])
                out.append(Issue("dropped", path or name, f"{extra} trailing element(s) ignored"
                                 + (f": {', '.join(names)}" if names else "")))
            if len(value) < len(msg.fields):
                out.append(Issue("defaulted", path or name,
                                 ", ".join(f.name for f in msg.fields[len(value):])))
            return out
        if not isinstance(value, dict):
            return [Issue("rejected", path, f"{name} is a map, got {_kind_of(value)}")]
        out = []
        known = {f.name for f in msg.fields}
        if msg.tag:
            known.add(msg.tag[0])
            if value.get(msg.tag[0]) != msg.tag[1]:
                return [Issue("rejected", path, f"{msg.tag[0]} must be {msg.tag[1]!r}, got {value.get(msg.tag[0])!r}")]
        missing = [f.name for f in msg.fields if f.required and f.name not in value]
        if missing:
            return [Issue("rejected", path or name, f"missing required key(s): {', '.join(missing)}")]
        for f in msg.fields:
            if f.name in value:
                out += self._field(f.wire_type, value[f.name], f"{path}.{f.name}" if path else f.name)
        unknown = [k for k in value if k not in known]
        if unknown:
            out.append(Issue("dropped", path or name, f"unknown key(s) ignored: {', '.join(map(str, unknown))}"))
        absent = [f.name for f in msg.fields if not f.required and f.name not in value]
        if absent and not msg.omit_defaults:
            out.append(Issue("defaulted", path or name, ", ".join(absent)))
        return out


def check(receiver: Layout, message: str, data: bytes, sender: Layout | None = None) -> list[Issue]:
    """Decode ``data`` as a receiver built against ``receiver`` would.

    ``sender`` (the layout the bytes were written with) is only used to name
    misaligned and dropped fields; the decision itself uses the receiver's
    layout alone. Returns every issue; no issue means a clean decode.
    """
    try:
        value = msgspec.msgpack.decode(data)
    except msgspec.DecodeError as exc:
        return [Issue("rejected", "", f"not msgpack: {exc}")]
    msg = receiver.messages.get(message)
    if msg is None:
        return [Issue("unchecked", "", f"{message} is not described by the receiver's layout")]
    checker = _Checker(receiver, sender)
    issues = checker._struct(message, msg, value, "")
    seen: set[Issue] = set()
    return [i for i in issues if not (i in seen or seen.add(i))]


def worst(issues: list[Issue]) -> IssueKind | None:
    kinds = {i.kind for i in issues}
    for kind in ISSUE_ORDER:
        if kind in kinds:
            return kind
    return None
