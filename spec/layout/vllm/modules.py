"""Parse the modules of a vLLM tree and resolve names across them, statically.

A :class:`ModuleIndex` parses each ``vllm/...`` module on first use (Python
:mod:`ast`; nothing is imported or executed) and answers "what does the name
``X`` mean in module ``M``": a class defined in the tree, a module-level
assignment (a type alias or a constant), or something outside the tree
(``torch.Tensor``, ``typing.Any``) named by its qualified name. Imports are
followed, relative ones included; names bound under ``if TYPE_CHECKING:`` count
as imports, which is what the annotations mean.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .source import SourceTree


@dataclass
class Module:
    name: str
    path: str
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    #: local name -> (module, attribute or None for ``import module``)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    #: local name -> value of a module-level assignment (the first one seen)
    assigns: dict[str, ast.expr] = field(default_factory=dict)


@dataclass(frozen=True)
class Resolved:
    """What a name means. ``kind``: ``class``, ``assign``, ``external``, ``module`` or ``unknown``."""

    kind: str
    module: Module | None = None
    node: ast.AST | None = None
    #: the qualified name (``torch.Tensor``, ``vllm.v1.outputs.LogprobsLists``)
    qualname: str = ""


def _walk_top(body: list[ast.stmt]):
    """Module-level statements, descending into ``if``/``try`` blocks (imports under
    ``if TYPE_CHECKING:`` and fallbacks under ``try/except ImportError``)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _walk_top(stmt.body)
            yield from _walk_top(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _walk_top(stmt.body)
            for handler in stmt.handlers:
                yield from _walk_top(handler.body)
            yield from _walk_top(stmt.orelse)
            yield from _walk_top(stmt.finalbody)
        else:
            yield stmt


class ModuleIndex:
    """Lazily parsed modules of one :class:`SourceTree`."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._modules: dict[str, Module | None] = {}

    # ------------------------------------------------------------------ loading
    def path_of(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if self.tree.exists(candidate):
                return candidate
        return None

    def module(self, name: str) -> Module | None:
        """The parsed module ``name`` (``vllm.v1.engine``), or ``None`` if the tree lacks it."""
        if name in self._modules:
            return self._modules[name]
        path = self.path_of(name) if name == "vllm" or name.startswith("vllm.") else None
        mod = None
        if path is not None:
            text = self.tree.read(path) or ""
            try:
                parsed = ast.parse(text, filename=path)
            except SyntaxError:
                parsed = None
            if parsed is not None:
                mod = self._index(name, path, parsed)
        self._modules[name] = mod
        return mod

    def module_at(self, path: str) -> Module | None:
        name = path[:-3].replace("/", ".")
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        return self.module(name)

    def _index(self, name: str, path: str, tree: ast.Module) -> Module:
        mod = Module(name=name, path=path, tree=tree)
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for stmt in _walk_top(tree.body):
            if isinstance(stmt, ast.ClassDef):
                mod.classes.setdefault(stmt.name, stmt)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                mod.functions.setdefault(stmt.name, stmt)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        mod.imports.setdefault(alias.asname, (alias.name, None))
                    else:
                        top = alias.name.split(".")[0]
                        mod.imports.setdefault(top, (top, None))
            elif isinstance(stmt, ast.ImportFrom):
                source = stmt.module or ""
                if stmt.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - (stmt.level - 1)]) if stmt.level > 1 else package
                    source = f"{base}.{source}" if source else base
                for alias in stmt.names:
                    if alias.name != "*":
                        mod.imports.setdefault(alias.asname or alias.name, (source, alias.name))
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        mod.assigns.setdefault(target.id, stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                mod.assigns.setdefault(stmt.target.id, stmt.value)
            elif type(stmt).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12+)
                mod.assigns.setdefault(stmt.name.id, stmt.value)  # type: ignore[attr-defined]
        return mod

    def parsed_paths(self) -> list[str]:
        """The paths of every module parsed so far, sorted."""
        return sorted(m.path for m in self._modules.values() if m is not None)

    # ------------------------------------------------------------------ names
    def resolve(self, mod: Module, name: str, _depth: int = 0) -> Resolved:
        """What ``name`` means at module level in ``mod``."""
        if _depth > 20:
            return Resolved("unknown", qualname=name)
        if name in mod.classes:
            return Resolved("class", mod, mod.classes[name], f"{mod.name}.{name}")
        if name in mod.imports:
            source, attr = mod.imports[name]
            if attr is None:
                return self._module_ref(source)
            return self.resolve_in(source, attr, _depth + 1)
        if name in mod.assigns:
            return Resolved("assign", mod, mod.assigns[name], f"{mod.name}.{name}")
        if name in mod.functions:
            return Resolved("function", mod, mod.functions[name], f"{mod.name}.{name}")
        return Resolved("external", qualname=f"builtins.{name}")

    def _module_ref(self, source: str) -> Resolved:
        target = self.module(source) if source.startswith("vllm") else None
        return Resolved("module", target, None, source)

    def resolve_in(self, module: str, attr: str, _depth: int = 0) -> Resolved:
        """What ``module.attr`` means (following re-exports)."""
        if not (module == "vllm" or module.startswith("vllm.")):
            return Resolved("external", qualname=f"{module}.{attr}")
        target = self.module(module)
        if target is None:
            sub = self.module(f"{module}.{attr}")
            return Resolved("module", sub, None, f"{module}.{attr}") if sub else Resolved(
                "unknown", qualname=f"{module}.{attr}")
        found = self.resolve(target, attr, _depth)
        if found.kind == "external" and found.qualname == f"builtins.{attr}":
            sub = self.module(f"{module}.{attr}")
            if sub is not None:
                return Resolved("module", sub, None, f"{module}.{attr}")
            return Resolved("unknown", target, None, f"{module}.{attr}")
        return found

    def resolve_expr(self, mod: Module, node: ast.expr) -> Resolved:
        """A ``Name`` or dotted ``Attribute`` chain (``np.ndarray``, ``msgspec.Struct``)."""
        if isinstance(node, ast.Name):
            return self.resolve(mod, node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve_expr(mod, node.value)
            if base.kind == "module":
                if base.module is not None:
                    return self.resolve_in(base.module.name, node.attr)
                return Resolved("external", qualname=f"{base.qualname}.{node.attr}")
            if base.kind == "external":
                return Resolved("external", qualname=f"{base.qualname}.{node.attr}")
            return Resolved("attribute", base.module, node, f"{base.qualname}.{node.attr}")
        return Resolved("unknown", mod, node, ast.unparse(node))

    def find_class(self, name: str, modules: tuple[str, ...], scan_under: str = "vllm/v1") -> Resolved | None:
        """Class ``name``: looked up in ``modules`` first (following imports), then in
        every module below ``scan_under`` that defines it at top level."""
        for module in modules:
            mod = self.module(module)
            if mod is None:
                continue
            found = self.resolve(mod, name)
            if found.kind == "class":
                return found
        needle = f"class {name}"
        for path in self.tree.python_files(scan_under):
            text = self.tree.read(path) or ""
            if needle not in text:
                continue
            mod = self.module_at(path)
            if mod is not None and name in mod.classes:
                return Resolved("class", mod, mod.classes[name], f"{mod.name}.{name}")
        return None
