"""Citations a user can follow: code and docs cite spec/PROTOCOL.md clauses or vLLM's sources,
never the project's internal fact sheet (which users do not have)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("spec", "reference", "conformance", "docs", "tests", "benchmarks", "campaigns", "lab")
SHEET = re.compile(r"\b" + "FA" + r"CTS\b")  # spelled apart so this file does not cite it


def test_nothing_cites_the_internal_fact_sheet():
    files = [ROOT / "README.md"] + [p for part in PARTS for p in (ROOT / part).rglob("*")
                                    if p.is_file() and p.suffix in {".py", ".md", ".json", ".txt"}]
    assert len(files) > 100
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in files
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if SHEET.search(line)]
    assert hits == []
