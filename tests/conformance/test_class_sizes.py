"""No class of ``ecp.conformance`` is longer than MAX_LINES lines: one that does several jobs is split
by concept into modules (docs/architecture.md, "The harness frontend"), so each reads at once."""

from __future__ import annotations

import ast
from pathlib import Path

import ecp.conformance

MAX_LINES = 300


def class_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, line, body lines) of every class in ``source``, nested ones too: the lines from the
    first statement of its body (its docstring, if any) to its last, blank and comment lines included."""
    return [(node.name, node.lineno, node.end_lineno - node.body[0].lineno + 1)
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]


def test_a_class_counts_its_body_lines():
    source = "class A:\n    '''doc'''\n\n    class B:\n        x = 1\n\n    def f(self):\n        return 1\n"
    assert sorted(class_lengths(source)) == [("A", 1, 7), ("B", 4, 1)]


def test_no_class_of_the_conformance_harness_is_over_the_limit():
    root = Path(ecp.conformance.__file__).parent
    sizes = {f"{path.relative_to(root)}:{line} {name}": n
             for path in sorted(root.rglob("*.py")) for name, line, n in class_lengths(path.read_text())}
    assert len(sizes) > 50 and max(sizes.values()) > 100  # every module was read
    over = {where: n for where, n in sizes.items() if n > MAX_LINES}
    assert not over, f"classes over {MAX_LINES} lines (split each by concept): {over}"
