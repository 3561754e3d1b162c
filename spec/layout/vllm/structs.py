"""Describe vLLM's wire types from their class definitions, statically.

:class:`TypeReader` turns an annotation (an :mod:`ast` node in the context of
its module) into a layout type string (:mod:`ecp.spec.layout.types`), and a
class into a :class:`~ecp.spec.layout.model.MessageLayout` with the encoding
msgspec gives it:

* ``msgspec.Struct`` subclasses: an array with ``array_like=True``, else a map
  (``omit_defaults`` recorded); fields of base structs come first;
* dataclasses (``@dataclass``, pydantic dataclasses, vLLM's ``@config``): a
  map of every field except ``init=False`` ones and ``ClassVar``\\ s;
* ``NamedTuple``: an array; ``TypedDict``: a map;
* ``Enum``/``IntEnum`` with integer values: ``enum:Name``; with string
  values: ``str`` (msgspec encodes an enum member by its value).

Anything else (a class of another kind, a name that resolves outside the tree
and is not a known builtin, a default that is not a literal) is reported as an
:class:`~.warnings.ExtractionWarning` naming the file and line, and described
as ``any`` (or without a default): never silently guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from ..model import FieldLayout, MessageLayout
from .modules import Module, ModuleIndex, Resolved
from .warnings import ExtractionWarning

_SCALARS = {
    "builtins.int": "int", "builtins.float": "float", "builtins.str": "str", "builtins.bool": "bool",
    "builtins.bytes": "bytes", "builtins.bytearray": "bytes", "builtins.memoryview": "bytes",
    "builtins.None": "nil", "builtins.object": "any", "typing.Any": "any", "typing_extensions.Any": "any",
    "builtins.complex": "any",
}
_TENSORS = {"torch.Tensor", "numpy.ndarray", "numpy.typing.NDArray", "numpy.typing.ArrayLike"}
_ARRAYS = {"list", "List", "set", "Set", "frozenset", "FrozenSet", "Sequence", "MutableSequence", "AbstractSet",
           "MutableSet", "Iterable", "Collection", "deque"}
_MAPS = {"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "OrderedDict", "Counter"}
_WRAPPERS = {"Annotated", "Final", "Required", "NotRequired", "ReadOnly"}
_STRUCT_BASES = {"msgspec.Struct", "msgspec.structs.Struct"}
_NAMEDTUPLE = {"typing.NamedTuple", "typing_extensions.NamedTuple"}
_TYPEDDICT = {"typing.TypedDict", "typing_extensions.TypedDict"}
_ENUMS = {"enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.IntFlag", "enum.Flag"}
_DATACLASS_DECORATORS = {"dataclasses.dataclass", "pydantic.dataclasses.dataclass", "vllm.config.utils.config"}
_FUTURES = {"concurrent.futures.Future", "concurrent.futures._base.Future", "asyncio.Future"}


def _tail(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


@dataclass
class ClassInfo:
    """What kind of wire type a class is."""

    kind: str  # struct | dataclass | namedtuple | typeddict | enum | other
    config: dict[str, Any] = field(default_factory=dict)


class TypeReader:
    """Reads annotations and classes of one tree; collects what they reach."""

    def __init__(self, index: ModuleIndex) -> None:
        self.index = index
        self.warnings: list[ExtractionWarning] = []
        #: name -> message layout, in the order first reached
        self.messages: dict[str, MessageLayout] = {}
        self.enums: dict[str, dict[str, int]] = {}
        self._pending: list[tuple[str, Resolved]] = []
        self._qualnames: dict[str, str] = {}
        self._in_progress: set[str] = set()
        #: subject -> ``path:line`` (``Provenance.locations``)
        self.locations: dict[str, str] = {}

    # ------------------------------------------------------------------ warnings
    def warn(self, code: str, mod: Module | None, node: ast.AST | None, message: str) -> None:
        w = ExtractionWarning(code, mod.path if mod else "?", getattr(node, "lineno", 0), message)
        if w not in self.warnings:
            self.warnings.append(w)

    def claim(self, name: str, qualname: str) -> None:
        """Reserve ``name`` for the class ``qualname`` (a payload described by the caller)."""
        self._qualnames[name] = qualname

    # ------------------------------------------------------------------ classes
    def class_info(self, found: Resolved, _depth: int = 0) -> ClassInfo:
        node = found.node
        assert isinstance(node, ast.ClassDef) and found.module is not None
        mod = found.module
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            r = self.index.resolve_expr(mod, target)
            if r.qualname in _DATACLASS_DECORATORS or (r.kind == "function" and _tail(r.qualname) == "config"):
                return ClassInfo("dataclass")
        config: dict[str, Any] = {}
        kind = "other"
        for base in node.bases:
            base_node = base.value if isinstance(base, ast.Subscript) else base
            r = self.index.resolve_expr(mod, base_node)
            if r.qualname in _STRUCT_BASES:
                kind = "struct"
            elif r.qualname in _NAMEDTUPLE:
                kind = "namedtuple"
            elif r.qualname in _TYPEDDICT:
                kind = "typeddict"
            elif r.qualname in _ENUMS:
                kind = "enum"
            elif r.kind == "class" and _depth < 10:
                inherited = self.class_info(r, _depth + 1)
                if inherited.kind != "other" and kind == "other":
                    kind = inherited.kind
                    config.update(inherited.config)
        for kw in node.keywords:
            if kw.arg is None:
                continue
            try:
                config[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                config[kw.arg] = ast.unparse(kw.value)
        return ClassInfo(kind, config)

    def _class_fields(self, found: Resolved, info: ClassInfo, _depth: int = 0) -> list[tuple[Module, ast.AnnAssign]]:
        """Annotated class attributes in definition order, base classes first."""
        node, mod = found.node, found.module
        assert isinstance(node, ast.ClassDef) and mod is not None
        out: list[tuple[Module, ast.AnnAssign]] = []
        if _depth < 10:
            for base in node.bases:
                r = self.index.resolve_expr(mod, base.value if isinstance(base, ast.Subscript) else base)
                if r.kind == "class" and self.class_info(r).kind == info.kind:
                    for m, f in self._class_fields(r, info, _depth + 1):
                        out = [(mm, ff) for mm, ff in out if ff.target.id != f.target.id]  # type: ignore[union-attr]
                        out.append((m, f))
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if self._is_classvar(mod, stmt.annotation):
                    continue
                if info.kind == "dataclass" and self._init_false(mod, stmt.value):
                    continue
                existing = [i for i, (_, f) in enumerate(out) if f.target.id == stmt.target.id]  # type: ignore
                if existing:
                    out[existing[0]] = (mod, stmt)  # a redefinition keeps the base's position
                else:
                    out.append((mod, stmt))
        return out

    def _is_classvar(self, mod: Module, ann: ast.expr) -> bool:
        node = ann.value if isinstance(ann, ast.Subscript) else ann
        if isinstance(node, (ast.Name, ast.Attribute)):
            return _tail(self.index.resolve_expr(mod, node).qualname) in ("ClassVar", "InitVar")
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value.startswith(("ClassVar", "InitVar"))
        return False

    def _field_call(self, mod: Module, value: ast.expr | None) -> ast.Call | None:
        if isinstance(value, ast.Call):
            r = self.index.resolve_expr(mod, value.func)
            if _tail(r.qualname) == "field":
                return value
        return None

    def _init_false(self, mod: Module, value: ast.expr | None) -> bool:
        call = self._field_call(mod, value)
        return bool(call) and any(
            kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
            for kw in call.keywords)  # type: ignore[union-attr]

    def struct_ref(self, found: Resolved, where_mod: Module, where: ast.AST) -> str:
        """``struct:Name`` / ``enum:Name`` / ``str`` / ``any`` for a class used in an annotation."""
        node = found.node
        assert isinstance(node, ast.ClassDef)
        info = self.class_info(found)
        name = node.name
        if info.kind == "other":
            self.warn("unsupported-class", where_mod, where,
                      f"{found.qualname} is not a msgspec Struct, dataclass, NamedTuple, TypedDict or Enum; "
                      f"described as any")
            return "any"
        known = self._qualnames.get(name)
        if known is not None and known != found.qualname:
            self.warn("name-clash", where_mod, where,
                      f"two classes named {name}: {known} and {found.qualname}; the first is described")
            return f"struct:{name}" if name in self.messages or name in self._in_progress else "any"
        self._qualnames[name] = found.qualname
        if info.kind == "enum":
            values = self.enum_values(found, record=name not in self.enums)
            if values is None:
                return "str"
            self.enums.setdefault(name, values)
            return f"enum:{name}"
        if name not in self.messages and name not in self._in_progress:
            self._in_progress.add(name)
            self._pending.append((name, found))
        return f"struct:{name}"

    def enum_values(self, found: Resolved, record: bool = False) -> dict[str, int] | None:
        """Member -> int for an integer enum; ``None`` for a string-valued one. ``auto()`` gives
        the previous member's value plus one (1 for the first), as Python's ``Enum`` does."""
        node, mod = found.node, found.module
        assert isinstance(node, ast.ClassDef) and mod is not None
        values: dict[str, int] = {}
        lines: dict[str, int] = {}
        last: int | None = None
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if self._is_auto(mod, stmt.value):
                    value: Any = 1 if last is None else last + 1
                else:
                    try:
                        value = ast.literal_eval(stmt.value)
                    except ValueError:
                        self.warn("enum-value", mod, stmt, f"{node.name}.{name}: value is not a literal; left out")
                        continue
                if isinstance(value, bool) or not isinstance(value, int):
                    return None
                values[name] = last = value
                lines[name] = stmt.lineno
        if record:
            self.locations[f"enum {node.name}"] = f"{mod.path}:{node.lineno}"
            self.locations.update((f"enum {node.name}.{m}", f"{mod.path}:{line}") for m, line in lines.items())
        return values

    def _is_auto(self, mod: Module, value: ast.expr) -> bool:
        return (isinstance(value, ast.Call) and not value.args and not value.keywords
                and self.index.resolve_expr(mod, value.func).qualname == "enum.auto")

    def byte_enum(self, found: Resolved) -> list[tuple[str, str]]:
        """``[(NAME, hex byte)]`` of an enum whose values are one-byte ``bytes`` literals."""
        node, mod = found.node, found.module
        assert isinstance(node, ast.ClassDef) and mod is not None
        out = []
        self.locations["request types"] = f"{mod.path}:{node.lineno}"
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                try:
                    value = ast.literal_eval(stmt.value)
                except ValueError:
                    value = None
                if isinstance(value, bytes) and len(value) == 1:
                    out.append((stmt.targets[0].id, value.hex()))
                    self.locations[f"request type 0x{value.hex()}"] = f"{mod.path}:{stmt.lineno}"
                else:
                    self.warn("request-type", mod, stmt,
                              f"{node.name}.{stmt.targets[0].id} is not a one-byte bytes literal; left out")
        return out

    # ------------------------------------------------------------------ messages
    def describe_pending(self) -> None:
        while self._pending:
            name, found = self._pending.pop(0)
            self.messages[name] = self.message(found)
            self._in_progress.discard(name)

    def message(self, found: Resolved, direction: str = "both") -> MessageLayout:
        node, mod = found.node, found.module
        assert isinstance(node, ast.ClassDef) and mod is not None
        info = self.class_info(found)
        for unsupported in ("rename", "tag", "tag_field", "kw_only", "forbid_unknown_fields"):
            if unsupported in info.config and info.config[unsupported] not in (None, False):
                self.warn("struct-option", mod, node,
                          f"{node.name}: msgspec option {unsupported}={info.config[unsupported]!r} is not modelled")
        array = info.kind == "namedtuple" or (info.kind == "struct" and bool(info.config.get("array_like")))
        fields = []
        total = info.config.get("total", True) is not False
        self.locations[node.name] = f"{mod.path}:{node.lineno}"
        for i, (fmod, stmt) in enumerate(self._class_fields(found, info)):
            name = stmt.target.id  # type: ignore[union-attr]
            self.locations[f"{node.name}.{name}"] = f"{fmod.path}:{stmt.lineno}"
            type_str = self.type_of(fmod, stmt.annotation)
            has_default, default = self.default_of(fmod, stmt, info)
            required = not has_default if info.kind != "typeddict" else total and not self._not_required(
                fmod, stmt.annotation)
            fl = FieldLayout(index=i, name=name, type=type_str, required=required)
            if not required and has_default and default is not _UNRESOLVED:
                fl.default = default
                if default is None and "nil" not in type_str.split(" | ") and type_str != "any":
                    self.warn("default-mismatch", fmod, stmt, f"{node.name}.{name}: default None does not fit "
                                                              f"the annotation {type_str}; recorded as written")
            fields.append(fl)
        return MessageLayout(
            encoding="array" if array else "map",
            direction=direction,  # type: ignore[arg-type]
            fields=fields,
            omit_defaults=bool(info.config.get("omit_defaults")) and info.kind == "struct" and not array,
            defined_in=mod.path,
        )

    def _not_required(self, mod: Module, ann: ast.expr) -> bool:
        node = ann.value if isinstance(ann, ast.Subscript) else ann
        return isinstance(node, (ast.Name, ast.Attribute)) and _tail(
            self.index.resolve_expr(mod, node).qualname) == "NotRequired"

    # ------------------------------------------------------------------ defaults
    def default_of(self, mod: Module, stmt: ast.AnnAssign, info: ClassInfo) -> tuple[bool, Any]:
        """``(has_default, value)``; the value is ``_UNRESOLVED`` (with a warning) when it
        is not a literal this reader can evaluate."""
        value = stmt.value
        if value is None:
            return False, None
        call = self._field_call(mod, value)
        if call is not None:
            for kw in call.keywords:
                if kw.arg == "default":
                    return True, self._literal(mod, kw.value, stmt)
                if kw.arg == "default_factory":
                    return True, self._factory(mod, kw.value, stmt)
            return False, None
        return True, self._literal(mod, value, stmt)

    def _literal(self, mod: Module, node: ast.expr, where: ast.AST) -> Any:
        try:
            value = ast.literal_eval(node)
        except ValueError:
            value = _UNRESOLVED
        if value is not _UNRESOLVED:
            if isinstance(value, (set, frozenset, tuple)):
                return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
            if isinstance(value, bytes):
                return value.hex()
            return value
        if isinstance(node, ast.Attribute):
            base = self.index.resolve_expr(mod, node.value)
            if base.kind == "class":
                values = self.enum_values(base) if self.class_info(base).kind == "enum" else None
                if values is not None and node.attr in values:
                    return values[node.attr]
                member = self._enum_member_literal(base, node.attr)
                if member is not _UNRESOLVED:
                    return member
        if isinstance(node, ast.Name):
            r = self.index.resolve(mod, node.id)
            if r.kind == "assign" and r.module is not None and isinstance(r.node, ast.expr):
                return self._literal(r.module, r.node, where)
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            factory = self._factory(mod, node.func, where, quiet=True)
            if factory is not _UNRESOLVED:
                return factory
        self.warn("default", mod, where, f"default {ast.unparse(node)!r} is not a literal; not recorded")
        return _UNRESOLVED

    def _enum_member_literal(self, found: Resolved, attr: str) -> Any:
        node = found.node
        assert isinstance(node, ast.ClassDef)
        for stmt in node.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == attr):
                try:
                    return ast.literal_eval(stmt.value)
                except ValueError:
                    return _UNRESOLVED
        return _UNRESOLVED

    def _factory(self, mod: Module, node: ast.expr, where: ast.AST, quiet: bool = False) -> Any:
        r = self.index.resolve_expr(mod, node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if r is not None:
            bare = _tail(r.qualname)
            if r.kind == "external" and bare in ("list", "set", "frozenset", "tuple", "deque"):
                return []
            if r.kind == "external" and bare in ("dict", "defaultdict", "OrderedDict", "Counter"):
                return {}
            if r.kind == "class":
                return self._default_instance(r, where)
        if isinstance(node, ast.Lambda):
            return self._literal(mod, node.body, where)
        if not quiet:
            self.warn("default", mod, where, f"default factory {ast.unparse(node)!r} is not resolvable; not recorded")
        return _UNRESOLVED

    def _default_instance(self, found: Resolved, where: ast.AST) -> Any:
        """The builtins form of ``Cls()``: every field at its default (array or map)."""
        info = self.class_info(found)
        if info.kind not in ("struct", "dataclass", "namedtuple"):
            return _UNRESOLVED
        values: dict[str, Any] = {}
        for fmod, stmt in self._class_fields(found, info):
            has, value = self.default_of(fmod, stmt, info)
            if not has or value is _UNRESOLVED:
                return _UNRESOLVED
            values[stmt.target.id] = value  # type: ignore[union-attr]
        array = info.kind == "namedtuple" or bool(info.config.get("array_like"))
        return list(values.values()) if array else values

    # ------------------------------------------------------------------ annotations
    def type_of(self, mod: Module, ann: ast.expr | None, _depth: int = 0) -> str:
        """The layout type string of annotation ``ann`` written in module ``mod``."""
        members = self._members(mod, ann, _depth)
        out: list[str] = []
        for m in members:
            if m not in out:
                out.append(m)
        if "any" in out:
            return "any"  # any takes every value, nil included
        non_nil = [m for m in out if m != "nil"]
        return " | ".join(non_nil + (["nil"] if "nil" in out else []))

    def _members(self, mod: Module, ann: ast.expr | None, depth: int) -> list[str]:
        if ann is None:
            return ["any"]
        if depth > 25:
            self.warn("recursive-type", mod, ann, f"{ast.unparse(ann)}: type alias nests too deep; described as any")
            return ["any"]
        if isinstance(ann, ast.Constant):
            if ann.value is None:
                return ["nil"]
            if isinstance(ann.value, str):  # a forward reference
                try:
                    parsed = ast.parse(ann.value, mode="eval").body
                except SyntaxError:
                    self.warn("unresolved-type", mod, ann, f"annotation {ann.value!r} does not parse; described as any")
                    return ["any"]
                ast.copy_location(parsed, ann)
                for child in ast.walk(parsed):
                    ast.copy_location(child, ann)
                return self._members(mod, parsed, depth + 1)
            if ann.value is Ellipsis:
                return ["any"]
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            return self._members(mod, ann.left, depth + 1) + self._members(mod, ann.right, depth + 1)
        if isinstance(ann, ast.Subscript):
            return self._subscript(mod, ann, depth)
        if isinstance(ann, (ast.Name, ast.Attribute)):
            return self._named(mod, ann, depth)
        self.warn("unresolved-type", mod, ann, f"annotation {ast.unparse(ann)!r} is not a type; described as any")
        return ["any"]

    def _args(self, sub: ast.Subscript) -> list[ast.expr]:
        s = sub.slice
        return list(s.elts) if isinstance(s, ast.Tuple) else [s]

    def _subscript(self, mod: Module, ann: ast.Subscript, depth: int) -> list[str]:
        origin = self.index.resolve_expr(mod, ann.value)
        bare = _tail(origin.qualname)
        args = self._args(ann)
        if origin.qualname in _TENSORS:
            return ["tensor"]
        if bare in ("Optional",):
            return self._members(mod, args[0], depth + 1) + ["nil"]
        if bare == "Union":
            return [m for a in args for m in self._members(mod, a, depth + 1)]
        if bare in _WRAPPERS:
            return self._members(mod, args[0], depth + 1)
        if bare == "Literal":
            kinds: list[str] = []
            for a in args:
                if isinstance(a, ast.Constant):
                    v = a.value
                    found = ["nil" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int)
                             else "str" if isinstance(v, str) else "bytes" if isinstance(v, bytes) else "any"]
                else:  # Literal[OtherLiteral, ...] nests the values of another Literal alias
                    found = self._members(mod, a, depth + 1)
                kinds += [k for k in found if k not in kinds]
            return sorted(kinds, key=lambda k: (k == "nil", k))
        if bare in _ARRAYS:
            return [f"array[{self.type_of(mod, args[0], depth + 1)}]"]
        if bare in ("tuple", "Tuple"):
            if len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value is Ellipsis:
                return [f"array[{self.type_of(mod, args[0], depth + 1)}]"]
            return ["array[any]"]
        if bare in _MAPS:
            if len(args) != 2:
                return ["map[any, any]"]
            return [f"map[{self.type_of(mod, args[0], depth + 1)}, {self.type_of(mod, args[1], depth + 1)}]"]
        if bare in ("Future",) and origin.qualname in _FUTURES | {"builtins.Future"}:
            # the engine core waits for a Future and sends its result
            return self._members(mod, args[0], depth + 1)
        if bare in ("Type", "type", "Callable"):
            self.warn("unresolved-type", mod, ann, f"{ast.unparse(ann)} cannot travel on the wire; described as any")
            return ["any"]
        # A generic class (``Foo[int]``): describe the class itself.
        return self._named(mod, ann.value, depth)

    def _named(self, mod: Module, node: ast.expr, depth: int) -> list[str]:
        r = self.index.resolve_expr(mod, node)
        q = r.qualname
        if r.kind == "external":
            if q in _SCALARS:
                return [_SCALARS[q]]
            if q in _TENSORS:
                return ["tensor"]
            bare = _tail(q)
            if bare in _ARRAYS or bare in ("tuple", "Tuple"):
                return ["array[any]"]
            if bare in _MAPS:
                return ["map[any, any]"]
            if bare in ("Any",):
                return ["any"]
            if q in _FUTURES:
                return ["any"]
            if bare in ("None", "NoneType"):
                return ["nil"]
            if q.startswith("builtins."):
                self.warn("unresolved-type", mod, node, f"{bare} is not defined in {mod.path} nor imported; "
                                                        f"described as any")
            else:
                self.warn("external-type", mod, node, f"{q} is defined outside the vllm tree; described as any")
            return ["any"]
        if r.kind == "class":
            return [self.struct_ref(r, mod, node)]
        if r.kind == "assign" and r.module is not None and isinstance(r.node, ast.expr):
            value = r.node
            if isinstance(value, ast.Call):
                func = self.index.resolve_expr(r.module, value.func)
                if _tail(func.qualname) in ("TypeVar", "ParamSpec", "TypeVarTuple"):
                    return ["any"]
                if _tail(func.qualname) == "NewType" and len(value.args) == 2:
                    return self._members(r.module, value.args[1], depth + 1)
                if _tail(func.qualname) == "TypeAliasType" and len(value.args) >= 2:
                    return self._members(r.module, value.args[1], depth + 1)
            return self._members(r.module, value, depth + 1)
        self.warn("unresolved-type", mod, node, f"{q} does not resolve to a type in this tree; described as any")
        return ["any"]


class _Unresolved:
    def __repr__(self) -> str:
        return "<unresolved>"


_UNRESOLVED: Any = _Unresolved()
