"""Nesting limits inside the *untyped* parts of a message (``ECP-FRAME-9``).

msgspec validates every typed position while it decodes, so the nesting of a
typed position is fixed by its type (:func:`typed_depth`). Only values typed
``Any`` (``extra_args``, ``kv_transfer_params``, utility ``args`` and results,
the scheduler's free-form stats, ...) can nest as deep as the sender likes;
msgspec bounds that only by the interpreter's recursion limit. This module
finds those positions once per message type and builds a checker for them.

The depth of a position counts the non-empty arrays and maps that enclose it,
the message's own top-level container included, exactly as
:func:`ecp.spec.limits.check_frame` counts them on the wire. A tensor counts as
its wire form ``[dtype, [shape...], data]``.

:func:`depth_checker` returns a function generated from the type (one
attribute test per untyped field, one loop per list of structs), because it
runs on every decoded message: ``check(message, max_depth)`` is true when some
untyped value nests deeper than ``max_depth`` allows. :func:`locate_too_deep`
is its slow, generic twin that names the offending field path for the error.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Iterator

import msgspec
import msgspec.inspect as mi

from .tensors import Tensor

_CONTAINERS = (list, dict, tuple, set, frozenset)
_NESTING = frozenset((*_CONTAINERS, Tensor))  # values that can open a level
_encode = msgspec.msgpack.Encoder().encode


def _nesting_exceeds(value: Any, budget: int) -> bool:
    """True when ``value`` nests more than ``budget`` non-empty containers deep."""
    if budget > 0:
        # A C-speed bound first: every level takes at least one byte of its msgpack form, so a
        # value encoding to at most ``budget`` bytes cannot exceed it (the usual small dict). Only
        # for values of few items, so that the transient copy stays small.
        try:
            if len(value) <= budget and len(_encode(value)) <= budget:
                return False
        except Exception:  # noqa: BLE001 - e.g. a Tensor: the walk below decides
            pass
    return _walk_exceeds(value, budget)


def _walk_exceeds(value: Any, budget: int) -> bool:
    t = type(value)
    if t is dict:
        if not value:
            return False
        if budget < 1:
            return True
        for key in value:  # keys are scalars, or tuples (msgpack arrays used as keys)
            if type(key) is tuple and key and _walk_exceeds(key, budget - 1):
                return True
        items: Any = value.values()
    elif t is list or t is tuple or t is set or t is frozenset:
        if not value:
            return False
        if budget < 1:
            return True
        items = value
    elif t is Tensor:  # [dtype, [shape...], data] on the wire
        return budget < (2 if value.shape else 1)
    else:
        return False
    budget -= 1
    for item in items:
        if item and type(item) in _NESTING and _walk_exceeds(item, budget):
            return True
    return False


def _info(t: Any) -> mi.Type:
    return mi.type_info(t)


def _members(t: mi.Type) -> tuple[mi.Type, ...]:
    return t.types if isinstance(t, mi.UnionType) else (t,)


def _has_untyped(t: mi.Type, seen: frozenset = frozenset()) -> bool:
    if isinstance(t, mi.AnyType):
        return True
    if isinstance(t, mi.UnionType):
        return any(_has_untyped(m, seen) for m in t.types)
    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return False
        return any(_has_untyped(f.type, seen | {t.cls}) for f in t.fields)
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return _has_untyped(t.item_type, seen)
    if isinstance(t, mi.TupleType):
        return any(_has_untyped(i, seen) for i in t.item_types)
    if isinstance(t, mi.DictType):
        return _has_untyped(t.key_type, seen) or _has_untyped(t.value_type, seen)
    return False


def typed_depth(typ: Any) -> int:
    """The deepest nesting any *typed* position of ``typ`` can reach on the wire
    (an ``Any`` value counts 0: its own nesting is what the checker bounds)."""
    def depth(t: mi.Type, seen: frozenset) -> int:
        if isinstance(t, mi.UnionType):
            return max((depth(m, seen) for m in t.types), default=0)
        if isinstance(t, mi.StructType):
            if t.cls in seen:
                raise ValueError(f"recursive type {t.cls.__name__} has no depth bound")
            return 1 + max((depth(f.type, seen | {t.cls}) for f in t.fields), default=0)
        if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            return 1 + depth(t.item_type, seen)
        if isinstance(t, mi.TupleType):
            return 1 + max((depth(i, seen) for i in t.item_types), default=0)
        if isinstance(t, mi.DictType):
            return 1 + max(depth(t.key_type, seen), depth(t.value_type, seen))
        if isinstance(t, mi.CustomType) and t.cls is Tensor:
            return 2
        return 0

    return depth(_info(typ), frozenset())


# ---------------------------------------------------------------------- the generated checker
class _Gen:
    """Emits the checking code. ``fail`` is the statement run when a value is too deep;
    the code reads the budget from a name ``limit`` that the surrounding code binds, and
    names its own variables and constants with ``prefix`` (free for the caller)."""

    def __init__(self, fail: str = "return True", prefix: str = "_u") -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"_u_exceeds": _nesting_exceeds, "_u_C": _NESTING}
        self.fail = fail
        self.prefix = prefix
        self.n = 0

    def var(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"

    def const(self, value: Any) -> str:
        name = f"{self.prefix}k{len(self.names)}"
        self.names[name] = value
        return name

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def value(self, t: mi.Type, expr: str, level: int, indent: int) -> None:
        """Code checking the value ``expr`` of type ``t``, enclosed by ``level`` containers."""
        # A variable lives only in the code for its own value: siblings reuse the names, so
        # that a function inlining the check keeps few locals (each costs at every call).
        saved = self.n
        try:
            self._value(t, expr, level, indent)
        finally:
            self.n = saved

    def _value(self, t: mi.Type, expr: str, level: int, indent: int) -> None:
        if not _has_untyped(t):
            return
        if _untyped_container(t):
            v = self.var()
            self.emit(indent, f"{v} = {expr}")
            items = _items_of(t)
            if items is None:
                # Any: one call bounds the whole value (its own container counts as one
                # level, as it does on the wire)
                self.emit(indent, f"if {v} and type({v}) in _u_C and _u_exceeds({v}, limit - {level}):")
                self.emit(indent + 1, self.fail)
                return
            # a typed list/dict of Any: its own level is known, so only items that open
            # a level are looked into (the usual item is a scalar or an empty container;
            # a call per value would cost more than the loop)
            x = self.var()
            self.emit(indent, f"if {v}:")
            self.emit(indent + 1, f"if limit < {level + 2}:")
            self.emit(indent + 2, f"if _u_exceeds({v}, limit - {level}):")
            self.emit(indent + 3, self.fail)
            self.emit(indent + 1, "else:")
            self.emit(indent + 2, f"for {x} in {v}{items}:")
            self.emit(indent + 3, f"if {x} and type({x}) in _u_C and _u_exceeds({x}, limit - {level + 1}):")
            self.emit(indent + 4, self.fail)
            return
        if isinstance(t, mi.UnionType):
            needing = [m for m in t.types if _has_untyped(m)]
            others = [m for m in t.types if not _has_untyped(m)]
            v = self.var()
            self.emit(indent, f"{v} = {expr}")
            if len(needing) == 1 and all(isinstance(m, mi.NoneType) for m in others):
                self.emit(indent, f"if {v} is not None:")
                self.value(needing[0], v, level, indent + 1)
                return
            for m in needing:
                self.emit(indent, f"if isinstance({v}, {self.const(_python_class(m))}):")
                self.value(m, v, level, indent + 1)
            return
        if isinstance(t, mi.StructType):
            v = expr
            if not expr.isidentifier():
                v = self.var()
                self.emit(indent, f"{v} = {expr}")
            needing = [f for f in t.fields if _has_untyped(f.type)]
            if len(needing) > 1 and level > 0:
                # one cheap test first: in a typical message every such field is nil or empty
                # (not at the top, where some usually is set: the outputs, the sampling params)
                self.emit(indent, "if " + " or ".join(_present(v, f) for f in needing) + ":")
                indent += 1
            for f in needing:
                self.value(f.type, f"{v}.{f.name}", level + 1, indent)
            return
        if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
            v = self.var()
            self.emit(indent, f"for {v} in {expr}:")
            self.value(t.item_type, v, level + 1, indent + 1)
            return
        if isinstance(t, mi.TupleType):
            v = self.var()
            self.emit(indent, f"{v} = {expr}")
            for i, item in enumerate(t.item_types):
                self.value(item, f"{v}[{i}]", level + 1, indent)
            return
        if isinstance(t, mi.DictType):
            v = self.var()
            self.emit(indent, f"for {v} in {expr}.values():")
            self.value(t.value_type, v, level + 1, indent + 1)
            return


def _present(var: str, f: mi.Field) -> str:
    """An expression true when field ``f`` of ``var`` may hold something to check."""
    t = f.type
    if isinstance(t, mi.AnyType) or (isinstance(t, mi.UnionType)
                                     and any(isinstance(m, mi.NoneType) for m in t.types)):
        return f"{var}.{f.name} is not None"  # (faster than a truth test when it is None)
    return f"{var}.{f.name}"


def _untyped_container(t: mi.Type) -> bool:
    """Any, or a collection whose items are Any (keys of a dict typed or not)."""
    if isinstance(t, mi.AnyType):
        return True
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return isinstance(t.item_type, mi.AnyType)
    if isinstance(t, mi.DictType):
        return isinstance(t.value_type, mi.AnyType) and not _has_untyped(t.key_type)
    if isinstance(t, mi.UnionType):
        needing = [m for m in t.types if _has_untyped(m)]
        return len(needing) == 1 and _untyped_container(needing[0]) and all(
            m is needing[0] or isinstance(m, mi.NoneType) for m in t.types)
    return False


def _items_of(t: mi.Type) -> str | None:
    """For a typed collection of Any (or one or nil): how its items are iterated
    (``""`` or ``".values()"``); ``None`` for Any itself."""
    if isinstance(t, mi.UnionType):
        t = next(m for m in t.types if _has_untyped(m))
    if isinstance(t, mi.DictType):
        return ".values()"
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return ""
    return None


_PY_CLASS = {mi.ListType: list, mi.SetType: set, mi.FrozenSetType: frozenset, mi.VarTupleType: tuple,
             mi.TupleType: tuple, mi.DictType: dict}


def _python_class(t: mi.Type) -> type:
    return t.cls if isinstance(t, mi.StructType) else _PY_CLASS[type(t)]


def depth_check_code(typ: Any, value: str, fail: str, indent: int, prefix: str = "_u"
                     ) -> tuple[list[str], dict[str, Any]] | None:
    """Source lines that run the statement ``fail`` when some untyped value inside
    ``value`` (an expression: a decoded ``typ``) nests deeper than the name ``limit``
    allows, and the constants they use (``_u_exceeds``, ``_u_C`` and names starting with
    ``prefix``, as are the variables); ``None`` when ``typ`` has no untyped position.

    For code that inlines the check into its own hot path (a call costs as much as the
    tests themselves on a small message); :func:`depth_checker` wraps it in a function.
    """
    t = _info(typ)
    if not _has_untyped(t):
        return None
    gen = _Gen(fail, prefix)
    gen.value(t, value, 0, indent)
    return gen.lines, dict(gen.names)


@lru_cache(maxsize=None)
def depth_checker(typ: Any) -> Callable[[Any, int], bool] | None:
    """``check(message, max_depth) -> bool`` for decoded values of ``typ``, or
    ``None`` when ``typ`` has no untyped position (nothing to check)."""
    code = depth_check_code(typ, "message", "return True", 1)
    if code is None:
        return None
    lines, namespace = code
    source = "\n".join(["def check(message, limit):", *lines, "    return False"])
    exec(compile(source, f"<ecp depth checker for {getattr(typ, '__name__', typ)}>", "exec"), namespace)
    return namespace["check"]


# ---------------------------------------------------------------------- locating an offender
def _positions(t: mi.Type, value: Any, level: int, path: str) -> Iterator[tuple[Any, int, str]]:
    """Every untyped value in ``value`` (typed ``t``) with its level and field path."""
    if value is None or not _has_untyped(t):
        return
    if isinstance(t, mi.AnyType):
        yield value, level, path
        return
    if isinstance(t, mi.UnionType):
        for m in t.types:
            if isinstance(m, mi.AnyType):
                yield value, level, path
                return
            cls = getattr(m, "cls", None) or _PY_CLASS.get(type(m))
            if cls is not None and isinstance(value, cls):
                yield from _positions(m, value, level, path)
                return
        return
    if isinstance(t, mi.StructType):
        for i, f in enumerate(t.fields):
            step = f"[{i}]" if t.array_like else f".{f.encode_name}"
            yield from _positions(f.type, getattr(value, f.name), level + 1, path + step)
        return
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        for i, item in enumerate(value):
            yield from _positions(t.item_type, item, level + 1, f"{path}[{i}]")
        return
    if isinstance(t, mi.TupleType):
        for i, (it, item) in enumerate(zip(t.item_types, value)):
            yield from _positions(it, item, level + 1, f"{path}[{i}]")
        return
    if isinstance(t, mi.DictType):
        for key, item in value.items():
            yield from _positions(t.value_type, item, level + 1, f"{path}[{key!r}]")


def locate_too_deep(typ: Any, message: Any, max_depth: int) -> str | None:
    """The field path of the first untyped value of ``message`` nesting deeper than ``max_depth``."""
    for value, level, path in _positions(_info(typ), message, 0, "$"):
        if _nesting_exceeds(value, max_depth - level):
            return path
    return None
