"""The reference engine's modules depend on each other one way: no import circle (type-checking
imports included), and only the core assigns the core's attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import ecp.reference.engine as package

ROOT = Path(package.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in ROOT.glob("*.py")}


def _local_imports(tree: ast.Module) -> set[str]:
    """Sibling modules a module imports anywhere (top level, functions, ``if TYPE_CHECKING``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ecp.reference.engine."):
            out.add(node.module.split(".")[3])
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_import_circle() -> None:
    graph = {name: _local_imports(tree) & set(_modules()) for name, tree in _modules().items()}
    assert graph["core"] >= {"utilities", "stats"}  # the scan sees the imports it is about
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_core_assigns_its_attributes() -> None:
    """A module handed the core (a parameter named ``core``) reads it and calls it; it assigns
    nothing on it (``core.x = …``, ``core.x += …``)."""
    offenders = []
    for name, tree in _modules().items():
        if name == "core":
            continue
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "core":
                    offenders.append(f"{name}.py:{t.lineno}: core.{t.attr}")
    assert not offenders, offenders
