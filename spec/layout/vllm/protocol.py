"""Assemble the layout of one vLLM tree: payloads, handshake maps, tuples, type bytes, UTILITY.

Where each part of the protocol lives in vLLM's sources (all releases 0.21 to
0.33 share this shape):

* the struct payloads (``EngineCoreRequest``, ``EngineCoreOutputs``,
  ``EngineCoreReadyResponse``, ``EngineHandshakeMetadata``) are classes; every
  type their fields reach is described too;
* HELLO and READY are dict literals with a ``"status"`` key in
  ``vllm/v1/engine/core.py``; keys added later with ``msg["key"] = ...`` are
  optional;
* UTILITY and START_DP_WAVE travel as plain tuples, named by the engine's
  unpacking (``client_idx, call_id, method_name, args = request``) under
  ``if request_type == EngineCoreRequestType.UTILITY``;
* the request-type bytes are the members of ``EngineCoreRequestType``; a member
  is on the wire when the frontend side (``core_client.py``,
  ``coordinator.py``) uses it;
* the UTILITY methods are the constant names the frontend passes to
  ``call_utility*``; their arguments and results come from the engine core's
  method of that name (``EngineCoreProc``, ``EngineCore``, then
  ``DPEngineCoreProc``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ..model import (
    FORMAT, EnumLayout, FieldLayout, Layout, MessageLayout, Provenance, RequestTypeLayout, UtilityMethodLayout,
    UtilityParamLayout,
)
from .modules import Module, ModuleIndex
from .source import SourceTree, open_tree
from .structs import TypeReader
from .warnings import ExtractionWarning

#: bump when the extractor's output for the same tree changes
EXTRACTOR_VERSION = "vllm-ast/1"

ENGINE_PKG = "vllm.v1.engine"
CORE = "vllm/v1/engine/core.py"
FRONTEND_FILES = ("vllm/v1/engine/core_client.py", "vllm/v1/engine/coordinator.py")
ENGINE_CLASSES = ("EngineCoreProc", "EngineCore", "DPEngineCoreProc")

#: (frame, message, where to look first, direction), in protocol order
PAYLOADS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("HELLO", "Hello", (), "engine->frontend"),
    ("INIT", "EngineHandshakeMetadata", ("vllm.v1.engine.utils", "vllm.v1.engine.core_client", "vllm.v1.utils"),
     "frontend->engine"),
    ("ready payload", "EngineCoreReadyResponse", (ENGINE_PKG,), "engine->frontend"),
    ("READY", "Ready", (), "engine->frontend"),
    ("ADD", "EngineCoreRequest", (ENGINE_PKG,), "frontend->engine"),
    ("UTILITY", "UtilityRequest", (), "frontend->engine"),
    ("START_DP_WAVE", "StartDPWave", (), "coordinator->engine"),
    ("outputs", "EngineCoreOutputs", (ENGINE_PKG,), "engine->frontend"),
)
_HANDSHAKE_TAGS = {"Hello": "HELLO", "Ready": "READY"}
_TUPLE_PAYLOADS = {"UtilityRequest": "UTILITY", "StartDPWave": "START_DP_WAVE"}


class Extraction:
    """The result: the layout, every :class:`ExtractionWarning` met on the way, and the
    paths of the files read (``vllm/...``)."""

    def __init__(self, layout: Layout, warnings: list[ExtractionWarning], files: list[str]) -> None:
        self.layout = layout
        self.warnings = warnings
        self.files = files


def _release_name(version: str | None, commit: str | None = None) -> str:
    """``vllm-0.33`` for a version, ``vllm-<commit>`` for a checkout that records none."""
    if not version:
        return f"vllm-{commit}" if commit else "vllm-unknown"
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"vllm-{m.group(1)}.{m.group(2)}" if m else f"vllm-{version}"


class _Extractor:
    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.index = ModuleIndex(tree)
        self.reader = TypeReader(self.index)
        self.roots: list[tuple[str, str]] = []  # (message, direction) reachability roots

    # ------------------------------------------------------------------ helpers
    def _warn(self, code: str, mod: Module | None, node: ast.AST | None, message: str) -> None:
        self.reader.warn(code, mod, node, message)

    def _core(self) -> Module | None:
        return self.index.module_at(CORE)

    # ------------------------------------------------------------------ payloads
    def payloads(self) -> None:
        for frame, name, modules, direction in PAYLOADS:
            if name in _HANDSHAKE_TAGS:
                msg = self.handshake(name, _HANDSHAKE_TAGS[name])
            elif name in _TUPLE_PAYLOADS:
                msg = self.tuple_payload(name, _TUPLE_PAYLOADS[name])
            else:
                found = self.index.find_class(name, modules)
                if found is None:
                    self._warn("missing", None, None, f"class {name} ({frame}) not found in this tree")
                    continue
                self.reader.claim(name, found.qualname)
                msg = self.reader.message(found)
            if msg is None:
                continue
            msg.frame = frame
            msg.direction = direction  # type: ignore[assignment]
            self.reader.messages[name] = msg
            self.roots.append((name, direction))
            self.reader.describe_pending()

    def _functions(self, mod: Module):
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node

    def _param_type(self, mod: Module, func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str | None:
        for arg in func.args.posonlyargs + func.args.args + func.args.kwonlyargs:
            if arg.arg == name and arg.annotation is not None:
                return self.reader.type_of(mod, arg.annotation)
        if func.args.vararg is not None and func.args.vararg.arg == name:
            return "array[any]"  # *args is a tuple: an array of whatever the caller passed
        return None

    def _value_type(self, mod: Module, func, value: ast.expr, key: str, dict_name: str) -> str:
        if isinstance(value, ast.Constant):
            v = value.value
            return ("nil" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int)
                    else "float" if isinstance(v, float) else "str" if isinstance(v, str) else "any")
        if isinstance(value, ast.Name):
            t = self._param_type(mod, func, value.id)
            if t is not None:
                return t
        if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self"):
            t = self._self_attr_type(mod, func, value.attr)
            if t is not None:
                return t
        if isinstance(value, (ast.Compare, ast.BoolOp)) or (
                isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
            return "bool"
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in (
                "str", "int", "float", "bool"):
            return value.func.id
        self._warn("value-type", mod, value,
                   f"{dict_name}[{key!r}] = {ast.unparse(value)}: type not declared in the source; any")
        return "any"

    def _self_attr_type(self, mod: Module, func, attr: str, _depth: int = 0) -> str | None:
        """The declared type of ``self.<attr>`` in the class that defines ``func``: an annotated
        assignment, or an assignment from an annotated parameter, in that class or its bases."""
        owner = next((c for c in mod.classes.values() if any(n is func for n in ast.walk(c))), None)
        if owner is None:
            return None
        return self._class_attr_type(mod, owner, attr, 0)

    def _class_attr_type(self, mod: Module, cls: ast.ClassDef, attr: str, depth: int) -> str | None:
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(method):
                target = node.target if isinstance(node, ast.AnnAssign) else (
                    node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
                if not (isinstance(target, ast.Attribute) and target.attr == attr
                        and isinstance(target.value, ast.Name) and target.value.id == "self"):
                    continue
                if isinstance(node, ast.AnnAssign):
                    return self.reader.type_of(mod, node.annotation)
                if isinstance(node.value, ast.Name):  # type: ignore[union-attr]
                    t = self._param_type(mod, method, node.value.id)  # type: ignore[union-attr]
                    if t is not None:
                        return t
        if depth < 5:
            for base in cls.bases:
                found = self.index.resolve_expr(mod, base)
                if found.kind == "class" and found.module is not None:
                    t = self._class_attr_type(found.module, found.node, attr, depth + 1)  # type: ignore[arg-type]
                    if t is not None:
                        return t
        return None

    def handshake(self, name: str, tag: str) -> MessageLayout | None:
        core = self._core()
        if core is None:
            self._warn("missing", None, None, f"{CORE} not found: no {tag} message")
            return None
        for func in self._functions(core):
            for node in ast.walk(func):
                if not isinstance(node, ast.Dict):
                    continue
                pairs = [(k.value, v) for k, v in zip(node.keys, node.values)
                         if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                if not any(k == "status" and isinstance(v, ast.Constant) and v.value == tag for k, v in pairs):
                    continue
                fields = [FieldLayout(index=0, name=k, type=self._value_type(core, func, v, k, tag), required=True)
                          for k, v in pairs if k != "status"]
                self.reader.locations[name] = f"{core.path}:{node.lineno}"
                self.reader.locations.update((f"{name}.{k}", f"{core.path}:{v.lineno}") for k, v in pairs)
                var = self._assigned_name(func, node)
                if var is not None:
                    fields += self._later_keys(core, func, var, tag, {f.name for f in fields}, name)
                for i, f in enumerate(fields):
                    f.index = i
                return MessageLayout(encoding="map", direction="engine->frontend", fields=fields,
                                     omit_defaults=True, tag=["status", tag], defined_in=core.path)
        self._warn("missing", core, None, f"no dict literal with \"status\": {tag!r} in {CORE}")
        return None

    @staticmethod
    def _assigned_name(func, dict_node: ast.Dict) -> str | None:
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and node.value is dict_node and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                return node.targets[0].id
        return None

    def _later_keys(self, mod: Module, func, var: str, tag: str, seen: set[str], msg: str) -> list[FieldLayout]:
        out = []
        for node in ast.walk(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            t = node.targets[0]
            if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == var
                    and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)
                    and t.slice.value not in seen):
                key = t.slice.value
                seen.add(key)
                self.reader.locations[f"{msg}.{key}"] = f"{mod.path}:{node.lineno}"
                type_str = self._value_type(mod, func, node.value, key, tag)
                if type_str not in ("any",) and "nil" not in type_str.split(" | "):
                    type_str += " | nil"
                out.append(FieldLayout(index=0, name=key, type=type_str, required=False, default=None))
        return out

    def tuple_payload(self, name: str, member: str) -> MessageLayout | None:
        core = self._core()
        if core is None:
            return None
        # the first branch in source order that tests for this request type
        branches = sorted((n for n in ast.walk(core.tree)
                           if isinstance(n, ast.If) and self._tests_request_type(n.test, member)),
                          key=lambda n: n.lineno)
        for node in branches:
            inner = sorted(ast.walk(ast.Module(body=node.body, type_ignores=[])), key=lambda n: getattr(n, "lineno", 0))
            for stmt in inner:
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Tuple)
                        and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts)
                        and isinstance(stmt.value, ast.Name)):
                    names = [e.id for e in stmt.targets[0].elts]  # type: ignore[attr-defined]
                    types = self._sender_types(member, names)
                    if types is None:
                        self._warn("tuple-payload", core, stmt, f"{member} is the tuple ({', '.join(names)}); no "
                                                                f"sender builds it in {', '.join(FRONTEND_FILES)}: any")
                        types = ["any"] * len(names)
                    fields = [FieldLayout(index=i, name=n, type=t, required=True)
                              for i, (n, t) in enumerate(zip(names, types))]
                    self.reader.locations[name] = f"{core.path}:{stmt.lineno}"
                    return MessageLayout(encoding="array", direction="frontend->engine", fields=fields,
                                         defined_in=core.path,
                                         note=f"a tuple: names from the engine core's unpacking in {core.path}, "
                                              f"types from the sender's tuple")
        self._warn("missing", core, None, f"no tuple unpacking of a {member} request in {CORE}")
        return None

    def _sender_types(self, member: str, names: list[str]) -> list[str] | None:
        """Element types of the tuple the frontend side encodes for ``member``: the
        ``encode((a, b, ...))`` call in a function that sends ``EngineCoreRequestType.<member>``."""
        for path in FRONTEND_FILES:
            mod = self.index.module_at(path)
            if mod is None:
                continue
            for func in self._functions(mod):
                if not any(isinstance(n, ast.Attribute) and n.attr == member and isinstance(n.value, ast.Name)
                           and n.value.id == "EngineCoreRequestType" for n in ast.walk(func)):
                    continue
                for call in ast.walk(func):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr == "encode" and len(call.args) == 1
                            and isinstance(call.args[0], ast.Tuple) and len(call.args[0].elts) == len(names)
                            and not any(isinstance(e, ast.Starred) for e in call.args[0].elts)):
                        return [self._value_type(mod, func, e, name, member)
                                for e, name in zip(call.args[0].elts, names)]
        return None

    @staticmethod
    def _tests_request_type(test: ast.expr, member: str) -> bool:
        return (isinstance(test, ast.Compare) and len(test.comparators) == 1
                and isinstance(test.ops[0], (ast.Eq, ast.Is))
                and isinstance(test.comparators[0], ast.Attribute) and test.comparators[0].attr == member)

    # ------------------------------------------------------------------ type bytes
    def request_types(self) -> list[RequestTypeLayout]:
        found = self.index.find_class("EngineCoreRequestType", (ENGINE_PKG,))
        if found is None:
            self._warn("missing", None, None, "class EngineCoreRequestType not found: no request types")
            return []
        used: set[str] = set()
        for path in FRONTEND_FILES:
            used |= set(re.findall(r"EngineCoreRequestType\.([A-Z_0-9]+)", self.tree.read(path) or ""))
        return [RequestTypeLayout(byte=byte, name=name, on_wire=name in used)
                for name, byte in self.reader.byte_enum(found)]

    # ------------------------------------------------------------------ utility
    def _utility_calls(self) -> dict[str, tuple[Module, ast.Call]]:
        calls: dict[str, tuple[Module, ast.Call]] = {}
        for path in self.tree.python_files("vllm"):
            text = self.tree.read(path) or ""
            if "call_utility" not in text:
                continue
            mod = self.index.module_at(path)
            if mod is None:
                continue
            for func in self._functions(mod):
                params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
                for node in ast.walk(func):
                    if not isinstance(node, ast.Call) or not node.args:
                        continue
                    f = node.func
                    fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                    if "call_utility" not in fname:
                        continue
                    first = node.args[0]
                    method = None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        method = first.value
                    elif isinstance(first, ast.Name) and first.id in params:
                        continue  # a forwarding helper: the caller names the method
                    elif isinstance(first, (ast.Name, ast.Attribute)):
                        method = self._constant(mod, first)
                    if method is None:
                        self._warn("utility-dynamic", mod, node,
                                   f"{fname}({ast.unparse(first)}, ...): method name is not a constant")
                        continue
                    calls.setdefault(method, (mod, node))
        return calls

    def _constant(self, mod: Module, node: ast.expr) -> str | None:
        r = self.index.resolve_expr(mod, node)
        if r.kind == "assign" and isinstance(r.node, ast.Constant) and isinstance(r.node.value, str):
            return r.node.value
        return None

    def _engine_methods(self) -> tuple[Module | None, dict[str, ast.FunctionDef | ast.AsyncFunctionDef], list[str]]:
        core = self._core()
        methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        order: list[str] = []
        if core is None:
            return None, methods, order
        for cls_name in ("EngineCore", "EngineCoreProc", "DPEngineCoreProc"):
            cls = core.classes.get(cls_name)
            for stmt in cls.body if cls else ():
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name not in order:
                    order.append(stmt.name)
        for cls_name in reversed(ENGINE_CLASSES):  # most preferred last, so it wins
            cls = core.classes.get(cls_name)
            for stmt in cls.body if cls else ():
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    methods[stmt.name] = stmt
        return core, methods, order

    def utility_methods(self) -> dict[str, UtilityMethodLayout]:
        calls = self._utility_calls()
        core, methods, order = self._engine_methods()
        names = [n for n in order if n in calls] + sorted(n for n in calls if n not in order)
        out: dict[str, UtilityMethodLayout] = {}
        dispatched = self._dispatched()
        for name in names:
            func = methods.get(name)
            mod, call = calls[name]
            if name in dispatched and func is None and core is not None:
                # answered by the input thread before the method lookup (0.33: the fault-tolerance
                # sentinel); what it takes and returns is not declared there
                self.reader.locations[f"utility {name}"] = f"{core.path}:{dispatched[name]}"
                out[name] = UtilityMethodLayout(result="any", params=None)
                continue
            if func is None or core is None:
                self._warn("utility-unknown", mod, call, f"{name}: called by the frontend, not defined by the "
                                                         f"engine core classes in {CORE}")
                self.reader.locations[f"utility {name}"] = f"{mod.path}:{call.lineno}"
                out[name] = UtilityMethodLayout(result="any", params=None, handled=False)
                continue
            self.reader.locations[f"utility {name}"] = f"{core.path}:{func.lineno}"
            args = func.args.posonlyargs + func.args.args
            first_default = len(args) - len(func.args.defaults)
            is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in func.decorator_list)
            params = [UtilityParamLayout(name=a.arg, type=self.reader.type_of(core, a.annotation)
                                         if a.annotation is not None else "any", required=i < first_default)
                      for i, a in enumerate(args) if is_static or i > 0]
            for t in [p.type for p in params]:
                self._root_types(t, "frontend->engine")
            out[name] = UtilityMethodLayout(result=self._result(core, func), params=params)
            self._root_types(out[name].result, "engine->frontend")
        self.reader.describe_pending()
        return out

    def _dispatched(self) -> dict[str, int]:
        """Method names the engine core's input handling answers itself, ahead of the method
        lookup: ``if method == NAME:`` with NAME a string constant -> the line of the test."""
        core = self._core()
        out: dict[str, int] = {}
        for node in ast.walk(core.tree) if core else ():
            if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
                    and isinstance(node.left, ast.Name) and node.left.id == "method"):
                name = self._constant(core, node.comparators[0]) if isinstance(
                    node.comparators[0], (ast.Name, ast.Attribute)) else None
                if isinstance(node.comparators[0], ast.Constant) and isinstance(node.comparators[0].value, str):
                    name = node.comparators[0].value
                if name is not None:
                    out.setdefault(name, node.lineno)
        return out

    def _result(self, mod: Module, func) -> str:
        if func.returns is not None:
            return self.reader.type_of(mod, func.returns)
        # only the method's own returns count, not those of functions nested in it
        own = [n for n in self._own_nodes(func) if isinstance(n, ast.Return) and n.value is not None
               and not (isinstance(n.value, ast.Constant) and n.value.value is None)]
        if own:
            self._warn("utility-result", mod, func, f"{func.name} returns a value but declares no type: any")
            return "any"
        return "nil"

    @staticmethod
    def _own_nodes(func):
        nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        stack = [n for n in func.body if not isinstance(n, nested)]  # a helper defined in the body too
        while stack:
            node = stack.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, nested):
                    stack.append(child)

    def _root_types(self, type_str: str, direction: str) -> None:
        for name in re.findall(r"struct:(\w+)", type_str):
            self.roots.append((name, direction))

    # ------------------------------------------------------------------ directions
    def directions(self) -> None:
        messages = self.reader.messages
        reached: dict[str, set[str]] = {}
        for root, direction in self.roots:
            stack, seen = [root], set()
            while stack:
                name = stack.pop()
                if name in seen or name not in messages:
                    continue
                seen.add(name)
                reached.setdefault(name, set()).add(direction)
                for f in messages[name].fields:
                    stack += re.findall(r"struct:(\w+)", f.type)
        for name, msg in messages.items():
            if msg.frame is not None:
                continue
            dirs = reached.get(name, set())
            if len(dirs) == 1:
                msg.direction = next(iter(dirs))  # type: ignore[assignment]
            elif dirs:
                ends = {d.split("->")[1] for d in dirs}
                msg.direction = "both" if ends == {"engine", "frontend"} else sorted(dirs)[0]  # type: ignore
            else:
                msg.direction = "both"  # type: ignore[assignment]

    # ------------------------------------------------------------------ all
    def run(self) -> Extraction:
        self.payloads()
        request_types = self.request_types()
        utility = self.utility_methods()
        self.directions()
        version = self.tree.version
        warnings = self.reader.warnings
        what = (f"the wheel {self.tree.wheel_name}" if self.tree.kind == "wheel"
                else "an unpacked wheel" if self.tree.kind == "unpacked" else "a source checkout")
        layout = Layout(
            format=FORMAT, name=_release_name(version, self.tree.commit), vllm_version=version or "unknown",
            source=f"extracted statically from {what} of vLLM "
                   f"{version or (f'commit {self.tree.commit}' if self.tree.commit else '(version not recorded)')} by "
                   f"`ecp spec layout --from-vllm` ({EXTRACTOR_VERSION})",
            messages=self.reader.messages,
            enums={name: EnumLayout(values=values) for name, values in sorted(self.reader.enums.items())},
            request_types=request_types,
            utility_methods=utility,
            provenance=Provenance(
                vllm_version=version or "unknown", extractor=EXTRACTOR_VERSION, tree=self.tree.kind,
                wheel=self.tree.wheel_name, sha256=self.tree.sha256,
                warnings=[str(w) for w in warnings], locations=dict(sorted(self.reader.locations.items()))),
        )
        for path in FRONTEND_FILES:  # read for the request types even when nothing else is
            self.index.module_at(path)
        return Extraction(layout, list(warnings), self.index.parsed_paths())


def extract(path: str | Path, version: str | None = None) -> Extraction:
    """Extract the layout of the vLLM tree at ``path`` (``.whl``, unpacked wheel or checkout).

    ``version`` overrides the release the tree records (a checkout may record none).
    Raises :class:`~.source.SourceError` when ``path`` is not a vLLM tree.
    """
    tree = open_tree(path)
    try:
        if version is not None:
            tree.version = version
        return _Extractor(tree).run()
    finally:
        tree.close()
