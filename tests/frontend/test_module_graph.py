"""``reference/frontend/`` imports form no cycle (imports inside functions included), and no module
imports another's private name."""

from __future__ import annotations

import ast
from pathlib import Path

import ecp.reference.frontend as frontend

PACKAGE = "ecp.reference.frontend"
ROOT = Path(frontend.__file__).parent


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module of the package, names) for every import of a sibling module in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                target = node.module.split(".")[0]
            elif node.level == 0 and node.module and node.module.startswith(PACKAGE + "."):
                target = node.module[len(PACKAGE) + 1:].split(".")[0]
            elif node.level == 1 and node.module is None:  # from . import x
                out += [(a.name, []) for a in node.names]
                continue
            else:
                continue
            out.append((target, [a.name for a in node.names]))
    return out


def _graph() -> dict[str, dict[str, list[str]]]:
    modules = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, dict[str, list[str]]] = {}
    for m in sorted(modules):
        edges: dict[str, list[str]] = {}
        for target, names in _imports(ROOT / f"{m}.py"):
            if target in modules and target != m:
                edges.setdefault(target, []).extend(names)
        graph[m] = edges
    return graph


def _cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for start in graph:
        if start not in state:
            found = visit(start, [])
            if found:
                return found
    return None


def test_the_frontend_modules_import_each_other_without_a_cycle():
    graph = _graph()
    assert "launch" in graph["api_servers"]  # the graph was read (function-level imports too)
    assert _cycle(graph) is None


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) is not None
    assert _cycle({"a": {"b": []}, "b": {}, "c": {"a": []}}) is None


def test_no_frontend_module_imports_a_private_name_of_another():
    private = [(m, target, name) for m, edges in _graph().items() for target, names in edges.items()
               for name in names if name.startswith("_")]
    assert private == []
