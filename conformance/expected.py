"""Expected-failure lists: known failures an engine author tracks on purpose.

File format, one entry per line::

    # comment
    ENG-ABORT-3   our engine caps ABORT at 256 ids (issue #12)
    ENG-ROB-*     input thread dies on bad frames; fix scheduled for 2.1

A case id or an ``fnmatch`` glob, whitespace, then a mandatory reason. Rules
applied to a run's results:

* a listed case that fails (FAIL/TIMEOUT/CRASH) becomes XFAIL and does not fail the run;
* a listed case that passes becomes XPASS: the list is stale and the run fails;
* a pattern that matches no case of the catalogue fails the run.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from .outcomes import CaseResult, Outcome

_LINE_RE = re.compile(r"^(?P<pattern>\S+)\s+(?P<reason>\S.*)$")


class ExpectedFailuresError(Exception):
    """The file is malformed (usage error, exit 2)."""


@dataclass(frozen=True)
class Entry:
    pattern: str
    reason: str
    line: int

    def matches(self, case_id: str) -> bool:
        return fnmatch.fnmatchcase(case_id, self.pattern)


def parse(text: str, source: str = "<expected-failures>") -> list[Entry]:
    entries = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if not m:
            raise ExpectedFailuresError(f"{source}:{n}: {line!r} has no reason; write '<id-or-glob> <reason>'")
        entries.append(Entry(m.group("pattern"), m.group("reason").strip(), n))
    return entries


def load(path: str | Path) -> list[Entry]:
    try:
        return parse(Path(path).read_text(), str(path))
    except OSError as exc:
        raise ExpectedFailuresError(f"cannot read expected-failures file: {exc}") from exc


def apply(results: list[CaseResult], entries: list[Entry], catalogue_ids: Iterable[str]) -> list[str]:
    """Rewrite outcomes in place (FAIL -> XFAIL, PASS -> XPASS); return problems that fail the run."""
    ids = list(catalogue_ids)
    problems = [f"expected-failures line {e.line}: pattern {e.pattern!r} matches no case"
                for e in entries if not any(e.matches(i) for i in ids)]
    for r in results:
        entry = next((e for e in entries if e.matches(r.id)), None)
        if entry is None:
            continue
        r.expected_failure_reason = entry.reason
        if r.outcome.is_failure:
            r.outcome = Outcome.XFAIL
        elif r.outcome is Outcome.PASS:
            r.outcome = Outcome.XPASS
            r.message = f"listed as expected to fail ({entry.reason}) but passed: remove it from the list"
    return problems


def rewrite(path: str | Path, results: list[CaseResult], old: list[Entry],
            catalogue_ids: Iterable[str] | None = None) -> int:
    """Write the list that makes this run pass: every failing case, keeping known reasons.

    A run with ``--case`` sees only part of the catalogue: an old entry that also
    covers cases this run did not execute is kept verbatim (nothing new is known
    about those cases), and the failing cases it covers are not listed again.
    With ``catalogue_ids``, an old pattern that matches no case at all is dropped.
    Returns the number of entries written.
    """
    ran = {r.id for r in results}
    ids = list(catalogue_ids) if catalogue_ids is not None else None
    kept = [e for e in old if ids is not None and any(e.matches(i) and i not in ran for i in ids)]
    lines = ["# ecp conformance expected failures: <case id or glob> <reason>",
             f"# rewritten {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by --update-expected-failures"]
    lines += [f"{e.pattern}  {e.reason}" for e in kept]
    count = len(kept)
    for r in results:
        if not (r.outcome.is_failure or r.outcome is Outcome.XFAIL):
            continue
        if any(e.matches(r.id) for e in kept):
            continue
        entry = next((e for e in old if e.matches(r.id)), None)
        reason = entry.reason if entry else f"{r.outcome.value if r.outcome is not Outcome.XFAIL else 'FAIL'}" \
            f" [{r.clause}] {r.message.splitlines()[0][:120] if r.message else r.requirement}"
        lines.append(f"{r.id}  {reason}")
        count += 1
    Path(path).write_text("\n".join(lines) + "\n")
    return count
