"""Expected-failure lists: known failures an engine author tracks on purpose.

File format, one entry per line::

    # comment
    ENG-ABORT-3   our engine caps ABORT at 256 ids (issue #12)
    ENG-ROB-*     input thread dies on bad frames; fix scheduled for 2.1

    ENG-ROB-8 [PASS|FAIL]  racy in this peer: its server kills the engine while it still answers

A case id or an ``fnmatch`` glob, optionally the outcomes the entry accepts in brackets (a peer
whose behaviour is racy: either outcome is expected, as WPT's metadata lists ``[PASS, FAIL]``),
whitespace, then a mandatory reason. The files shipped with the package (``expected/*.txt``: one per
vLLM release and peer) are addressed by name, the file's name without ``.txt``
(``--expected-failures vllm-0.33-engine``); any other file by its path. What an entry does to a case's outcome
(the ``expected`` stage of the decision table, ``ecp.conformance.outcomes.decide``):

* a listed case that fails (FAIL/TIMEOUT/CRASH) becomes XFAIL and does not fail the run;
* a listed case that passes becomes XPASS: the list is stale and the run fails;
* with accepted outcomes, an outcome among them keeps the run green (a failure becomes XFAIL, a
  PASS stays PASS) and the report says which occurred; an outcome outside them counts as usual
  (a failure fails the run, a PASS is XPASS);
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

_LINE_RE = re.compile(r"^(?P<pattern>\S+)(?:\s+\[(?P<outcomes>[A-Z|, ]+)\])?\s+(?P<reason>\S.*)$")
#: the outcomes an entry may accept (what a peer can do; UNSUPPORTED and ERROR are never expected)
ACCEPTABLE = (Outcome.PASS, Outcome.FAIL, Outcome.TIMEOUT, Outcome.CRASH)


#: the expected-failure files shipped as package data, addressed by name (:func:`shipped`)
SHIPPED_DIR = Path(__file__).resolve().parent / "expected"


class ExpectedFailuresError(Exception):
    """The file is missing, unreadable or malformed (usage error, exit 2)."""


def shipped() -> dict[str, Path]:
    """The shipped expected-failure files by name (file name without ``.txt``), in name order."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.txt"))}


def resolve(name_or_path: str | Path) -> Path:
    """The file ``--expected-failures`` names: an existing path, else a shipped file's name.

    Raises :class:`ExpectedFailuresError` naming the shipped files when it is neither."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    files = shipped()
    name = path.name[:-4] if path.name.endswith(".txt") else path.name
    if str(name_or_path) in (name, f"{name}.txt") and name in files:
        return files[name]
    raise ExpectedFailuresError(f"no expected-failures file {str(name_or_path)!r}: not a file, nor the name of a "
                                f"shipped one ({', '.join(files) or 'none shipped'})")


@dataclass(frozen=True)
class Entry:
    pattern: str
    reason: str
    line: int
    #: the outcomes a racy entry accepts (``None``: a plain entry, the case is expected to fail)
    outcomes: frozenset[Outcome] | None = None

    def matches(self, case_id: str) -> bool:
        return fnmatch.fnmatchcase(case_id, self.pattern)

    @property
    def outcomes_text(self) -> str:
        return "" if self.outcomes is None else "|".join(o.value for o in ACCEPTABLE if o in self.outcomes)

    def line_text(self) -> str:
        """The entry as a line of the file."""
        accepted = f" [{self.outcomes_text}]" if self.outcomes is not None else ""
        return f"{self.pattern}{accepted}  {self.reason}"


def parse(text: str, source: str = "<expected-failures>") -> list[Entry]:
    entries = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if not m or m.group("reason").startswith("["):
            raise ExpectedFailuresError(f"{source}:{n}: {line!r} has no reason; write '<id-or-glob> <reason>' "
                                        "or '<id-or-glob> [PASS|FAIL] <reason>'")
        outcomes = None
        if m.group("outcomes") is not None:
            names = [w for w in re.split(r"[|, ]+", m.group("outcomes")) if w]
            known = {o.value: o for o in ACCEPTABLE}
            unknown = [w for w in names if w not in known]
            if unknown or not names:
                raise ExpectedFailuresError(f"{source}:{n}: accepted outcomes {unknown or names} are not among "
                                            f"{'|'.join(known)}")
            outcomes = frozenset(known[w] for w in names)
            if not any(o.is_failure for o in outcomes):
                raise ExpectedFailuresError(f"{source}:{n}: [{m.group('outcomes')}] accepts no failure: a case "
                                            "that must pass needs no entry")
        entries.append(Entry(m.group("pattern"), m.group("reason").strip(), n, outcomes))
    return entries


def load(name_or_path: str | Path) -> list[Entry]:
    """The entries of a file or shipped name (:func:`resolve`); a file that cannot be read or is not
    UTF-8 text raises :class:`ExpectedFailuresError` with a one-line reason."""
    path = resolve(name_or_path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ExpectedFailuresError(f"cannot read expected-failures file: {exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ExpectedFailuresError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                    f"{exc.start}); an expected-failures file is UTF-8 text") from None
    return parse(text, str(path))


def entry_for(case_id: str, entries: Iterable[Entry]) -> Entry | None:
    """The first entry that matches ``case_id`` (what the run declares for that case), or None."""
    return next((e for e in entries if e.matches(case_id)), None)


def unmatched(entries: Iterable[Entry], catalogue_ids: Iterable[str]) -> list[str]:
    """Problems that fail the run: patterns that match no case of the catalogue. (What an entry does to a
    case's outcome is a stage of the decision table, ``ecp.conformance.outcomes.decide``.)"""
    ids = list(catalogue_ids)
    return [f"expected-failures line {e.line}: pattern {e.pattern!r} matches no case"
            for e in entries if not any(e.matches(i) for i in ids)]


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
    lines += [e.line_text() for e in kept]
    count = len(kept)
    for r in results:
        own = r.own_outcome or r.outcome
        if not (own.is_failure or own is Outcome.XFAIL):
            continue
        if any(e.matches(r.id) for e in kept):
            continue
        entry = next((e for e in old if e.matches(r.id)), None)
        reason = entry.reason if entry else f"{own.value if own is not Outcome.XFAIL else 'FAIL'}" \
            f" [{r.clause}] {r.message.splitlines()[0][:120] if r.message else r.requirement}"
        accepted = f" [{entry.outcomes_text}]" if entry is not None and entry.outcomes is not None else ""
        lines.append(f"{r.id}{accepted}  {reason}")
        count += 1
    Path(path).write_text("\n".join(lines) + "\n")
    return count
