"""Generated blocks of ``docs/*.md``: a figure a doc shows is rendered from the code and compared.

A block sits between ``<!-- begin generated: NAME -->`` and ``<!-- end generated: NAME -->``. The
test that owns a block renders it from the data it tests (the proof matrices come from the
mappings the self-proof asserts) and calls :func:`check_block`; a doc that says something else
fails that test with the block it should hold. ``ECP_UPDATE_DOCS=1 pytest -n 0 TEST`` writes the
rendered block into the doc instead (review the diff before committing it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Sequence

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- begin generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)",
                      re.S)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table, one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def check_block(doc: str, name: str, rendered: str) -> None:
    """Assert that ``docs/<doc>`` holds ``rendered`` as its block ``name`` (or write it, see above)."""
    path = DOCS / doc
    text = path.read_text(encoding="utf-8")
    found = _pattern(name).search(text)
    assert found is not None, f"docs/{doc} has no block 'begin generated: {name}'"
    if found.group(2) == rendered:
        return
    if os.environ.get("ECP_UPDATE_DOCS") == "1":
        path.write_text(text[:found.start(2)] + rendered + text[found.end(2):], encoding="utf-8")
        return
    raise AssertionError(f"docs/{doc}'s block '{name}' says something the code does not; it should read:\n"
                         f"{rendered}\n(ECP_UPDATE_DOCS=1 rewrites it)")
