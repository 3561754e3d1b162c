"""The wire-type grammar of layout files, and which type accepts which.

A layout describes each field by the msgpack value a receiver accepts::

    type   := member (" | " member)*
    member := "nil" | "bool" | "int" | "float" | "str" | "bytes" | "any" | "tensor"
            | "array[" type "]" | "map[" type ", " type "]"
            | "struct:" Name | "enum:" Name

``array`` covers Python lists, tuples and sets (all msgpack arrays);
``tensor`` is the ``[dtype, shape, data]`` form of ``ECP-FRAME-7``; ``enum:X``
is an integer restricted to the values of enum ``X`` in the same layout;
``struct:X`` is the message ``X`` of the same layout (array or map).

:func:`accepts` answers "does a receiver expecting ``wanted`` decode every
value of ``given``", with msgspec's rules: an int is accepted where a float
is expected (``ECP-FRAME-5``), ``any`` accepts everything. :func:`value_matches`
answers it for one decoded value.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SCALARS = frozenset({"nil", "bool", "int", "float", "str", "bytes", "any", "tensor"})


class TypeSyntaxError(ValueError):
    """A type string that does not follow the grammar above."""


@dataclass(frozen=True)
class Member:
    """One alternative of a union: ``kind`` plus its parameters."""

    kind: str  # a scalar name, "array", "map", "struct" or "enum"
    args: tuple["WireType", ...] = ()
    name: str = ""  # struct/enum name

    def __str__(self) -> str:
        if self.kind == "array":
            return f"array[{self.args[0]}]"
        if self.kind == "map":
            return f"map[{self.args[0]}, {self.args[1]}]"
        if self.kind in ("struct", "enum"):
            return f"{self.kind}:{self.name}"
        return self.kind


@dataclass(frozen=True)
class WireType:
    """A union of members, kept in written order (``nil`` last when rendered)."""

    members: tuple[Member, ...]

    def __str__(self) -> str:
        ordered = [m for m in self.members if m.kind != "nil"] + [m for m in self.members if m.kind == "nil"]
        return " | ".join(str(m) for m in ordered)

    @property
    def nullable(self) -> bool:
        return any(m.kind in ("nil", "any") for m in self.members)

    def refs(self) -> set[tuple[str, str]]:
        """Every ``(kind, name)`` of struct/enum references, nested ones included."""
        out: set[tuple[str, str]] = set()
        for m in self.members:
            if m.kind in ("struct", "enum"):
                out.add((m.kind, m.name))
            for a in m.args:
                out |= a.refs()
        return out


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` where it is not inside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise TypeSyntaxError(f"unbalanced ']' in {text!r}")
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    if depth != 0:
        raise TypeSyntaxError(f"unbalanced '[' in {text!r}")
    parts.append(text[start:])
    return parts


def parse(text: str) -> WireType:
    """Parse a type string; raises :class:`TypeSyntaxError` naming the bad part."""
    if not isinstance(text, str) or not text.strip():
        raise TypeSyntaxError(f"empty type {text!r}")
    return _parse(text)


# Memoised: a WireType is immutable, and the release tools parse the same few hundred type
# strings of the 13 layouts hundreds of thousands of times (`ecp spec compat`: 13 s -> 4 s).
@lru_cache(maxsize=4096)
def _parse(text: str) -> WireType:
    return WireType(tuple(_parse_member(p.strip(), text) for p in _split_top(text, "|")))


def _parse_member(part: str, whole: str) -> Member:
    if part in SCALARS:
        return Member(part)
    for prefix in ("struct:", "enum:"):
        if part.startswith(prefix):
            name = part[len(prefix):]
            if not name.isidentifier():
                raise TypeSyntaxError(f"bad {prefix[:-1]} name {name!r} in {whole!r}")
            return Member(prefix[:-1], name=name)
    if part.startswith("array[") and part.endswith("]"):
        return Member("array", (parse(part[6:-1]),))
    if part.startswith("map[") and part.endswith("]"):
        kv = _split_top(part[4:-1], ",")
        if len(kv) != 2:
            raise TypeSyntaxError(f"map needs a key and a value type in {whole!r}")
        return Member("map", (parse(kv[0].strip()), parse(kv[1].strip())))
    raise TypeSyntaxError(f"unknown type {part!r} in {whole!r}")


def _member_accepts(wanted: Member, given: Member) -> bool:
    if wanted.kind == "any":
        return True
    if given.kind == "any":
        return False  # an unconstrained sender may send what the receiver refuses
    if wanted.kind == "float" and given.kind == "int":
        return True
    if wanted.kind != given.kind:
        return False
    if wanted.kind in ("struct", "enum"):
        # Same name: the struct/enum itself is compared on its own.
        return wanted.name == given.name
    return all(accepts(w, g) for w, g in zip(wanted.args, given.args))


def accepts(wanted: WireType, given: WireType) -> bool:
    """Whether every value of ``given`` decodes as ``wanted``."""
    return all(any(_member_accepts(w, g) for w in wanted.members) for g in given.members)


def relation(old: WireType, new: WireType) -> str:
    """``same``, ``widened`` (new accepts more), ``narrowed`` (new accepts less) or ``changed``."""
    new_takes_old = accepts(new, old)
    old_takes_new = accepts(old, new)
    if new_takes_old and old_takes_new:
        return "same"
    if new_takes_old:
        return "widened"
    if old_takes_new:
        return "narrowed"
    return "changed"


def _value_member(m: Member, value: Any) -> bool:
    kind = m.kind
    if kind in ("any", "struct", "tensor"):  # structs and tensors are not re-validated here
        return True
    if kind == "nil":
        return value is None
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "enum"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bytes":
        return isinstance(value, (bytes, bytearray))
    if kind == "array":
        return isinstance(value, (list, tuple)) and all(_value_of(m.args[0], v) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(
            _value_of(m.args[0], k) and _value_of(m.args[1], v) for k, v in value.items())
    return False


def _value_of(t: WireType, value: Any) -> bool:
    return any(_value_member(m, value) for m in t.members)


def value_matches(type_text: str, value: Any) -> bool:
    """Whether a decoded msgpack value has the wire type ``type_text`` (structs and tensors
    are taken as they come: their own decoders check them)."""
    return _value_of(parse(type_text), value)
