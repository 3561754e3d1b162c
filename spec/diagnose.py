"""Why a payload does not fit its type: field path, ``expected`` and ``got``.

Runs only after msgspec has refused a payload (the error path). The payload is
re-read as plain msgpack and compared with the message type's own description
(:mod:`msgspec.inspect`), in the order msgspec decodes it, so the first
mismatch found is the one msgspec stopped at. Nothing here reads msgspec's
error wording: ``expected`` and ``got`` come from the type and from the value.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec.inspect as mi

from .tensors import Tensor


class Mismatch(NamedTuple):
    path: str
    expected: str
    got: str


class TensorShapeError(ValueError):
    """Raised by the codec's tensor hook; carries the structured fields for the error."""

    def __init__(self, message: str, expected: str, got: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class ExtValue(bytes):
    """An ext value of a refused payload, re-read for diagnosis: the body of ext
    type 3 as bytes (the codec's tensor hook accepts it), any other code empty."""

    def __new__(cls, code: int, data: bytes | memoryview) -> "ExtValue":
        self = super().__new__(cls, data)
        self.code = code
        return self


def kind(value: Any) -> str:
    """msgpack's name for the kind of a decoded value (``int``, ``array``, ``ext 1``...)."""
    if type(value) is ExtValue:
        return f"ext {value.code}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def type_name(t: mi.Type) -> str:
    """A short wire-level name of a type (``int | null``, ``array``, ``FinishReason``)."""
    if isinstance(t, mi.UnionType):
        return " | ".join(dict.fromkeys(type_name(m) for m in t.types))
    if isinstance(t, mi.NoneType):
        return "null"
    if isinstance(t, mi.AnyType):
        return "any"
    if isinstance(t, (mi.BoolType, mi.IntType, mi.FloatType, mi.StrType)):
        return {mi.BoolType: "bool", mi.IntType: "int", mi.FloatType: "float", mi.StrType: "str"}[type(t)]
    if isinstance(t, (mi.BytesType, mi.ByteArrayType, mi.MemoryViewType)):
        return "bytes"
    if isinstance(t, mi.EnumType):
        return t.cls.__name__
    if isinstance(t, mi.LiteralType):
        return " | ".join(repr(v) for v in t.values)
    if isinstance(t, mi.StructType):
        return "array" if t.array_like else "object"
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType, mi.TupleType)):
        return "array"
    if isinstance(t, mi.DictType):
        return "object"
    if isinstance(t, mi.CustomType) and t.cls is Tensor:
        return "tensor [dtype, shape, data]"
    return repr(t)


def _accepts_kind(t: mi.Type, value: Any) -> bool:
    """Whether msgspec would pick ``t`` for a value of this msgpack kind."""
    k = kind(value)
    if isinstance(t, mi.AnyType):
        return True
    if isinstance(t, mi.NoneType):
        return k == "null"
    if isinstance(t, mi.BoolType):
        return k == "bool"
    if isinstance(t, mi.IntType):
        return k == "int"
    if isinstance(t, mi.FloatType):
        return k in ("int", "float")
    if isinstance(t, mi.StrType):
        return k == "str"
    if isinstance(t, (mi.BytesType, mi.ByteArrayType, mi.MemoryViewType)):
        return k == "bytes"
    if isinstance(t, mi.EnumType):
        return k == kind(next(iter(t.cls)).value)
    if isinstance(t, mi.LiteralType):
        return any(k == kind(v) for v in t.values)
    if isinstance(t, mi.StructType):
        return k == ("array" if t.array_like else "object")
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType, mi.TupleType)):
        return k == "array"
    if isinstance(t, mi.DictType):
        return k == "object"
    if isinstance(t, mi.CustomType) and t.cls is Tensor:
        return k in ("array", "bytes")
    return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def find_mismatch(typ: Any, value: Any, tensor_hook: Any = None) -> Mismatch | None:
    """The first place where ``value`` (the payload decoded as plain msgpack) breaks ``typ``."""
    return _check(mi.type_info(typ), value, "$", tensor_hook)


def _check(t: mi.Type, value: Any, path: str, hook: Any) -> Mismatch | None:
    if isinstance(t, mi.AnyType):
        return None
    if isinstance(t, mi.UnionType):
        candidates = [m for m in t.types if _accepts_kind(m, value)]
        tagged = [m for m in candidates if isinstance(m, mi.StructType) and m.tag_field is not None]
        if tagged and isinstance(value, dict):
            field = tagged[0].tag_field
            if field not in value:
                return Mismatch(path, f"required field `{field}`", "missing")
            chosen = [m for m in tagged if m.tag == value[field]]
            if not chosen:
                return Mismatch(f"{path}.{field}", " | ".join(repr(m.tag) for m in tagged), _short(value[field]))
            candidates = chosen
        if not candidates:
            return Mismatch(path, type_name(t), kind(value))
        return _check(candidates[0], value, path, hook)
    if not _accepts_kind(t, value):
        return Mismatch(path, type_name(t), kind(value))
    if isinstance(t, mi.EnumType):
        if value not in {m.value for m in t.cls}:
            return Mismatch(path, f"{t.cls.__name__} ({', '.join(repr(m.value) for m in t.cls)})", _short(value))
        return None
    if isinstance(t, mi.LiteralType):
        return None if value in t.values else Mismatch(path, type_name(t), _short(value))
    if isinstance(t, mi.StructType):
        return _check_struct(t, value, path, hook)
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        for i, item in enumerate(value):
            found = _check(t.item_type, item, f"{path}[{i}]", hook)
            if found:
                return found
        return None
    if isinstance(t, mi.TupleType):
        if len(value) != len(t.item_types):
            return Mismatch(path, f"array of length {len(t.item_types)}", str(len(value)))
        for i, (it, item) in enumerate(zip(t.item_types, value)):
            found = _check(it, item, f"{path}[{i}]", hook)
            if found:
                return found
        return None
    if isinstance(t, mi.DictType):
        for key, item in value.items():
            found = _check(t.key_type, key, f"`{_short(key)}` in `{path}`", hook) or _check(
                t.value_type, item, f"{path}[...]", hook)
            if found:
                return found
        return None
    if isinstance(t, mi.CustomType) and t.cls is Tensor and hook is not None:
        try:
            hook(Tensor, value)
        except TensorShapeError as exc:
            return Mismatch(path, exc.expected, exc.got)
        except (TypeError, ValueError) as exc:
            return Mismatch(path, type_name(t), str(exc))
    return None


def _check_struct(t: mi.StructType, value: Any, path: str, hook: Any) -> Mismatch | None:
    fields = t.fields
    if t.array_like:
        required = sum(1 for f in fields if f.required)
        if len(value) < required:
            return Mismatch(path, f"array of at least length {required}", str(len(value)))
        for i, (f, item) in enumerate(zip(fields, value)):
            found = _check(f.type, item, f"{path}[{i}]", hook)
            if found:
                return found
        return None
    by_name = {f.encode_name: f for f in fields}
    for key, item in value.items():
        f = by_name.get(key)
        if f is None:
            if t.forbid_unknown_fields and key != t.tag_field:
                return Mismatch(path, "no unknown fields", f"field `{_short(key)}`")
            continue
        found = _check(f.type, item, f"{path}.{key}", hook)
        if found:
            return found
    for f in fields:
        if f.required and f.encode_name not in value:
            return Mismatch(path, f"required field `{f.encode_name}`", "missing")
    return None
