"""Figures the docs state about the catalogue agree with the catalogue.

A doc may state how many cases a role has, how many a run reported per outcome, or how many cases a
list names; each such figure is checked here against the code, so a case added or withdrawn fails
this test until the docs say so. A count of a subset must list its ids, e.g. "12 cases (`ENG-REQ-4`,
`ENG-ROB-1…7`, …)"; a tally of a whole run ("42 PASS, 6 UNSUPPORTED, 14 XFAIL, and `ENG-ROB-8` PASS
or XFAIL") must add up to the role's catalogue. The proof matrices are generated blocks, checked by
the self-proof tests (``tests/doc_blocks.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ecp.conformance.registry import load_role

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
SIZES = {role: len(load_role(role)) for role in ("engine", "frontend")}

COUNT = re.compile(r"\b(\d+) (?:engine-role |frontend-role )?(?:cases?\b|case\(s\))(?: \(([^)]*)\))?")
OUTCOMES = "PASS|FAIL|XFAIL|XPASS|UNSUPPORTED|TIMEOUT|CRASH|NOT RUN"
NUMBER = r"\d+(?:[–-]\d+)?"
TALLY = re.compile(rf"\b{NUMBER} (?:{OUTCOMES})(?:, {NUMBER} (?:{OUTCOMES}))*(?:,? and `[A-Z]+-[A-Z]+-\d+` [A-Z]+ or [A-Z]+)?")
ID_LIST = re.compile(r"`?\b((?:ENG|FE)-[A-Z]+)-(\d+)(?:(?:…|\.\.)(\d+))?`?")


def _roles(line: str) -> list[str]:
    """The roles a line can be speaking of: the one it names, else either."""
    named = [r for r in ("frontend", "engine") if r in line.lower()]
    return named[:1] or list(SIZES)


def _listed(ids: str) -> int:
    """How many case ids a list names; ``ENG-ROB-1…7`` is seven."""
    return sum(int(m.group(3)) - int(m.group(2)) + 1 if m.group(3) else 1 for m in ID_LIST.finditer(ids))


def _figures():
    for path in DOCS:
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{lineno}"
            for m in COUNT.finditer(line):
                yield where, line, "count", m
            for m in TALLY.finditer(line):
                if "," in m.group(0) or " in " in line[m.end():m.end() + 4]:
                    yield where, line, "tally", m


FIGURES = list(_figures())


@pytest.mark.parametrize("where,line,kind,m", FIGURES, ids=[f"{w}:{k}" for w, _, k, _ in FIGURES])
def test_doc_figure_matches_the_catalogue(where, line, kind, m):
    if kind == "count":
        n, ids = int(m.group(1)), m.group(2)
        if ids and ID_LIST.search(ids):
            assert _listed(ids) == n, f"{where}: says {n} cases but lists {_listed(ids)}: {line.strip()}"
        else:
            # "NOT RUN 62 case(s)": every case but the one that found the peer dead
            sizes = {SIZES[r] - line[:m.start()].endswith("NOT RUN ") for r in _roles(line)}
            assert n in sizes, f"{where}: says {n} cases; the role has {' or '.join(map(str, sorted(sizes)))}: {line.strip()}"
        return
    text = m.group(0)
    low = sum(int(a) for a, _ in re.findall(r"(\d+)(?:[–-](\d+))? [A-Z]", text))
    high = sum(int(b or a) for a, b in re.findall(r"(\d+)(?:[–-](\d+))? [A-Z]", text))
    pending = 1 if " or " in text else 0
    sizes = {SIZES[r] for r in _roles(line)}
    assert any(low + pending <= s <= high + pending for s in sizes), (
        f"{where}: the outcomes '{text}' add up to {low + pending}"
        f"{'' if low == high else f'–{high + pending}'}, not the role's {' or '.join(map(str, sorted(sizes)))} cases")


def test_the_checks_see_the_docs():
    """The patterns above find the figures the docs state (a pattern that matched nothing proves nothing)."""
    kinds = {kind for _, _, kind, _ in FIGURES}
    assert kinds == {"count", "tally"}, kinds
    assert _listed("`ENG-REQ-4`, `ENG-ROB-1…7`, `FE-ABORT-7..10`") == 12
