"""The normative sentences of ``spec/PROTOCOL.md``: their ids, levels and texts, as data.

A clause (``ECP-HS-5``, :mod:`ecp.spec.clauses`) is a paragraph; a *sentence id* extends it
(``ECP-HS-5.2``) so that a conformance case can cite the one statement it checks. This module is
the one parser of the sentence markers and the one place that decides which sentences are
normative. The rules, stated also in PROTOCOL.md's preamble:

* **Which sentences are normative.** Every sentence of a clause paragraph (after its bold id,
  level and title), except the paragraph's informative note (from a line starting ``vLLM 0.33:``
  to the paragraph's end), a sentence wholly in parentheses that carries no key word, and a
  sentence marked informative (``<!--i-->`` right before it: a fact about vLLM 0.33's peers or
  about the suite, not a requirement; it renders as nothing); and, in
  prose outside clause paragraphs (from section 1 on, generated blocks and tables left out),
  every sentence that carries a key word (MUST, MUST NOT, SHOULD, SHOULD NOT, MAY).
* **A sentence's level** is its strongest key word (MUST NOT counts as MUST, SHOULD NOT as
  SHOULD), else the level of its clause.
* **Markers.** A sentence id is written as a superscript right before the sentence:
  ``<sup>2</sup>`` inside a clause paragraph (the id is the paragraph's clause plus ``.2``), and
  ``<sup>ECP-OUT-2.3</sup>`` outside one. ``<sup>ECP-OUT-2</sup>`` (no number) asks
  :func:`number` to give that sentence the next free number of ECP-OUT-2.
* **Stable, never reused.** Every id ever issued is recorded in the ledger ``spec/sentences.txt``
  with its level (``ECP-HS-5.2 MUST``); an id whose sentence was deleted stays there marked
  ``withdrawn``, and a new sentence takes the next number after the highest recorded one.

``ecp spec sentences --check`` names every normative sentence without an id and every
disagreement between the markers and the ledger; ``ecp spec sentences --number`` numbers the
former and records them.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from . import clauses as spec_clauses

PROTOCOL_MD = Path(__file__).resolve().parent / "PROTOCOL.md"
LEDGER = Path(__file__).resolve().parent / "sentences.txt"

#: ``<sup>2</sup>``, ``<sup>ECP-OUT-2.3</sup>`` or ``<sup>ECP-OUT-2</sup>`` (to be numbered)
MARKER_RE = re.compile(r"<sup>(?:(?P<clause>ECP-[A-Z]+-[0-9]+)(?:\.(?P<cn>[1-9][0-9]*))?|(?P<n>[1-9][0-9]*))</sup>")
SENTENCE_ID_RE = re.compile(r"^(?P<clause>ECP-[A-Z]+-[0-9]+)\.(?P<n>[1-9][0-9]*)$")
KEYWORD_RE = re.compile(r"\b(MUST|SHOULD|MAY)\b")
_HEADER_RE = re.compile(r"\*\*(?P<clause>ECP-[A-Z]+-[0-9]+)\*\* \((?P<level>MUST|SHOULD|MAY)(?:, hardened)?"
                        r"(?:, vLLM [0-9.–]+)?\) ")
_GENERATED_OPEN = re.compile(r"^<!-- (fields:[A-Za-z]+|machine:[a-z]+|utility-methods|http-routes) -->$")
_NOTE = "vLLM 0.33: "
#: put right before a sentence of a clause paragraph that states no requirement
INFORMATIVE = "<!--i-->"
_NO_END = ("e.g.", "i.e.", "cf.", "vs.")
_STRENGTH = {"MUST": 0, "SHOULD": 1, "MAY": 2}


class SentenceError(ValueError):
    """PROTOCOL.md's sentence markers or the ledger are inconsistent; the message lists every problem."""


@dataclass(frozen=True)
class Sentence:
    """One normative sentence. ``id`` is None for a sentence that has no id yet."""

    id: str | None
    clause: str | None
    level: str
    text: str
    line: int
    #: offset in PROTOCOL.md where the sentence (or its marker) starts
    start: int
    #: the number a ``<sup>ECP-X-n</sup>`` marker asks for (True) or none at all (False)
    marked_unnumbered: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "clause": self.clause, "level": self.level, "text": self.text, "line": self.line}


@dataclass
class Parsed:
    """What :func:`parse` found: the numbered sentences, those without an id, and marker problems."""

    sentences: list[Sentence]
    unnumbered: list[Sentence]
    problems: list[str]


def sentence_level(text: str, clause_level: str | None) -> str | None:
    """The strongest key word of ``text`` outside code spans, else ``clause_level``."""
    words = KEYWORD_RE.findall(_without_code(text))
    if not words:
        return clause_level
    return min(words, key=_STRENGTH.__getitem__)


def _without_code(text: str) -> str:
    return re.sub(r"`[^`]*`", "", text)


def split_sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The sentences of ``text[start:end]`` as (start, end) offsets, leading blanks skipped.

    A sentence ends at a full stop followed by a blank or the end, outside code spans and
    parentheses (or at the ``.)`` that closes a parenthesised sentence); ``e.g.`` and ``i.e.``
    never end one, ``etc.`` only before a capital."""
    out: list[tuple[int, int]] = []
    i, code, depth = start, False, 0
    s = None
    while i < end:
        c = text[i]
        if s is None:
            if c.isspace():
                i += 1
                continue
            s = i
        if c == "`":
            code = not code
        elif not code and c == "(":
            depth += 1
        elif not code and c == ")":
            depth = max(0, depth - 1)
            if depth == 0 and text[i - 1] == "." and text[s] in "(<" and _ends_here(text, i, end):
                out.append((s, i + 1))
                s = None
        elif not code and depth == 0 and c == "." and _ends_here(text, i, end) and not _abbreviation(text, s, i, end):
            out.append((s, i + 1))
            s = None
        i += 1
    if s is not None and text[s:end].strip():
        out.append((s, len(text[:end].rstrip())))
    return out


def _ends_here(text: str, i: int, end: int) -> bool:
    return i + 1 >= end or text[i + 1].isspace()


def _abbreviation(text: str, s: int, i: int, end: int) -> bool:
    word = text[max(s, text.rfind(" ", s, i) + 1):i + 1].lstrip("(")
    if word.lower() in _NO_END:
        return True
    if word == "etc.":
        rest = re.sub(r"^\s*(?:<!--i-->|<sup>[^<]*</sup>)?\s*", "", text[i + 1:end])
        return not rest[:1].isupper()
    return False


def _paragraphs(text: str) -> list[tuple[int, int]]:
    """Prose paragraphs from section 1 on, as (start, end) offsets: no headings, tables, rules,
    comments or generated blocks."""
    out: list[tuple[int, int]] = []
    first = re.search(r"(?m)^## ", text)
    if first is None:
        return out
    lines = text[first.start():].split("\n")
    offset = first.start()
    block: list[tuple[int, str]] = []
    generated = None

    def flush() -> None:
        if block:
            first = block[0][1]
            if not (first.startswith(("#", "|", "<!--", "---", "```")) or not first.strip()):
                out.append((block[0][0], block[-1][0] + len(block[-1][1])))
            block.clear()

    for line in lines:
        at = offset
        offset += len(line) + 1
        if generated is not None:
            if line.strip() == f"<!-- /{generated} -->":
                generated = None
            continue
        m = _GENERATED_OPEN.match(line.strip())
        if m:
            flush()
            generated = m.group(1).split(":")[0]
            continue
        if not line.strip() or line.startswith(("|", "#")):
            flush()
            continue
        block.append((at, line))
    flush()
    return out


def parse(text: str) -> Parsed:
    """Every normative sentence of PROTOCOL.md ``text``, numbered or not, and the marker problems."""
    line_of = _line_index(text)
    numbered: list[Sentence] = []
    unnumbered: list[Sentence] = []
    problems: list[str] = []
    for p_start, p_end in _paragraphs(text):
        header = _HEADER_RE.match(text, p_start, p_end)
        clause = clause_level = None
        body_start, body_end = p_start, p_end
        if header:
            clause, clause_level = header.group("clause"), header.group("level")
            title = split_sentences(text, header.end(), p_end)
            body_start = title[0][1] if title else p_end
            note = text.find("\n" + _NOTE, body_start, p_end)
            body_end = note if note >= 0 else p_end
        for s, e in split_sentences(text, body_start, body_end):
            informative = text.startswith(INFORMATIVE, s)
            if informative and text[s - 1] == "\n":
                # CommonMark: a line that starts with "<!--" ends the paragraph and opens an HTML block
                problems.append(f"PROTOCOL.md:{line_of(s)}: {INFORMATIVE} starts a line, which ends the paragraph "
                                "in Markdown: put it at the end of the line before")
            if informative:
                s = s + len(INFORMATIVE)
                while s < e and text[s].isspace():
                    s += 1
            m = MARKER_RE.match(text, s, e)
            raw = text[m.end() if m else s:e]
            plain = " ".join(MARKER_RE.sub("", raw).split())
            stray = MARKER_RE.search(text, m.end() if m else s, e)
            line = line_of(s)
            if INFORMATIVE in raw:
                problems.append(f"PROTOCOL.md:{line}: {INFORMATIVE} stands inside a sentence, not at its start")
            if stray:
                problems.append(f"PROTOCOL.md:{line_of(stray.start())}: a sentence marker stands inside a sentence, "
                                f"not at its start: {stray.group(0)}")
            level = sentence_level(plain, clause_level)
            keyword = KEYWORD_RE.search(_without_code(plain)) is not None
            aside = plain.startswith("(") and plain.endswith(")") and not keyword
            if informative:
                if keyword or m or not header:
                    problems.append(f"PROTOCOL.md:{line}: {INFORMATIVE} marks a sentence of a clause paragraph that "
                                    "carries no key word and no id")
                continue
            if m is None:
                if level is not None and not (header and aside):
                    unnumbered.append(Sentence(None, clause, level, plain, line, s))
                continue
            mclause = m.group("clause") or clause
            n = m.group("cn") or m.group("n")
            if m.group("n") and not header:
                problems.append(f"PROTOCOL.md:{line}: {m.group(0)} outside a clause paragraph: write the full id, "
                                f"<sup>ECP-AREA-n.m</sup>")
                continue
            if mclause not in spec_clauses.CLAUSES:
                problems.append(f"PROTOCOL.md:{line}: {m.group(0)} names no clause of ecp.spec.clauses")
                continue
            if header and m.group("clause") and m.group("clause") != clause:
                problems.append(f"PROTOCOL.md:{line}: {m.group(0)} inside the paragraph of {clause}: a sentence of "
                                "a clause paragraph belongs to that clause")
                continue
            level = level or spec_clauses.CLAUSES[mclause].level
            if n is None:
                unnumbered.append(Sentence(None, mclause, level, plain, line, s, marked_unnumbered=True))
            else:
                numbered.append(Sentence(f"{mclause}.{n}", mclause, level, plain, line, s))
    seen: dict[str, int] = {}
    for sen in numbered:
        if sen.id in seen:
            problems.append(f"PROTOCOL.md:{sen.line}: sentence id {sen.id} is also used on line {seen[sen.id]}")
        seen.setdefault(sen.id, sen.line)
    return Parsed(numbered, unnumbered, problems)


def _line_index(text: str):
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def line_of(offset: int) -> int:
        return bisect.bisect_right(starts, offset)
    return line_of


# ----------------------------------------------------------------------------- ledger
@dataclass(frozen=True)
class LedgerEntry:
    id: str
    level: str
    withdrawn: bool = False


def read_ledger(text: str) -> dict[str, LedgerEntry]:
    """The ledger's entries by id; raises :class:`SentenceError` on a malformed line."""
    out: dict[str, LedgerEntry] = {}
    bad = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        ok = len(line) in (2, 3) and SENTENCE_ID_RE.match(line[0]) and line[1] in _STRENGTH and (
            len(line) == 2 or line[2] == "withdrawn")
        if not ok or line[0] in out:
            bad.append(f"sentences.txt:{i}: {raw!r}: expected 'ECP-AREA-n.m LEVEL [withdrawn]', each id once")
            continue
        out[line[0]] = LedgerEntry(line[0], line[1], len(line) == 3)
    if bad:
        raise SentenceError("\n".join(bad))
    return out


def write_ledger(entries: dict[str, LedgerEntry]) -> str:
    head = ("# Every sentence id ever issued in spec/PROTOCOL.md, with its level (ecp.spec.sentences).\n"
            "# Maintained by `ecp spec sentences --number`; an id is never removed or reused: a deleted\n"
            "# sentence's id stays here marked withdrawn.\n")
    order = sorted(entries.values(), key=lambda e: (_clause_order(e.id), int(e.id.rsplit(".", 1)[1])))
    return head + "".join(f"{e.id} {e.level}{' withdrawn' if e.withdrawn else ''}\n" for e in order)


@functools.lru_cache(maxsize=None)
def _clause_positions() -> dict[str, int]:
    return {c.id: i for i, c in enumerate(spec_clauses._CLAUSES)}


def _clause_order(sentence_id: str) -> int:
    return _clause_positions().get(sentence_id.rsplit(".", 1)[0], 10**6)


def check(text: str, ledger: dict[str, LedgerEntry]) -> list[str]:
    """Every problem: normative sentences without an id, marker errors, disagreements with the ledger."""
    parsed = parse(text)
    problems = list(parsed.problems)
    for s in parsed.unnumbered:
        problems.append(f"PROTOCOL.md:{s.line}: normative sentence ({s.level}) without an id"
                        f"{' in ' + s.clause if s.clause else ''}: {s.text[:90]!r}")
    live = {s.id: s for s in parsed.sentences}
    for sid, s in live.items():
        entry = ledger.get(sid)
        if entry is None:
            problems.append(f"PROTOCOL.md:{s.line}: {sid} is not in spec/sentences.txt")
        elif entry.withdrawn:
            problems.append(f"PROTOCOL.md:{s.line}: {sid} was withdrawn and is never reused")
        elif entry.level != s.level:
            problems.append(f"PROTOCOL.md:{s.line}: {sid} is {s.level} in the text, {entry.level} in "
                            "spec/sentences.txt (a changed level changes what the suite must check)")
    for sid, entry in ledger.items():
        if not entry.withdrawn and sid not in live:
            problems.append(f"spec/sentences.txt: {sid} has no sentence in PROTOCOL.md: mark it withdrawn")
    return problems


def number(text: str, ledger: dict[str, LedgerEntry]) -> tuple[str, dict[str, LedgerEntry], list[str]]:
    """Give every normative sentence without an id the next free number of its clause, record new
    ids and changed levels in the ledger, and mark ids whose sentence is gone withdrawn.

    Returns the new text, the new ledger and one line per change. Raises :class:`SentenceError`
    when a sentence outside a clause paragraph has no marker naming its clause (only a person can
    say which clause it belongs to) or when a marker is malformed."""
    parsed = parse(text)
    orphans = [s for s in parsed.unnumbered if s.clause is None]
    if parsed.problems or orphans:
        raise SentenceError("\n".join(parsed.problems + [
            f"PROTOCOL.md:{s.line}: {s.text[:90]!r} carries a key word outside a clause paragraph: put "
            "<sup>ECP-AREA-n</sup> (its clause) before it, then number again" for s in orphans]))
    ledger = dict(ledger)
    changes: list[str] = []
    highest: dict[str, int] = {}
    for sid in ledger:
        c, n = sid.rsplit(".", 1)
        highest[c] = max(highest.get(c, 0), int(n))
    live = {s.id: s for s in parsed.sentences}
    for sid, s in live.items():
        c, n = sid.rsplit(".", 1)
        highest[c] = max(highest.get(c, 0), int(n))
        entry = ledger.get(sid)
        if entry is None or entry.level != s.level:
            if entry is not None:
                changes.append(f"{sid}: level {entry.level} -> {s.level}")
            else:
                changes.append(f"{sid}: recorded ({s.level})")
            ledger[sid] = LedgerEntry(sid, s.level)
    for sid, entry in list(ledger.items()):
        if not entry.withdrawn and sid not in live:
            ledger[sid] = LedgerEntry(sid, entry.level, True)
            changes.append(f"{sid}: withdrawn (its sentence is gone)")
    edits: list[tuple[int, int, str]] = []
    # a clause's own paragraph is numbered before its sentences elsewhere in the text
    for s in sorted(parsed.unnumbered, key=lambda s: s.marked_unnumbered):
        n = highest.get(s.clause, 0) + 1
        highest[s.clause] = n
        sid = f"{s.clause}.{n}"
        ledger[sid] = LedgerEntry(sid, s.level)
        changes.append(f"{sid}: numbered ({s.level}) {s.text[:70]!r}")
        if s.marked_unnumbered:
            m = MARKER_RE.match(text, s.start)
            edits.append((m.start(), m.end(), f"<sup>{sid}</sup>"))
        else:
            edits.append((s.start, s.start, f"<sup>{n}</sup> "))  # unmarked ones are all in clause paragraphs
    for a, b, new in sorted(edits, reverse=True):
        text = text[:a] + new + text[b:]
    return text, ledger, changes


# ----------------------------------------------------------------------------- the catalogue
@functools.lru_cache(maxsize=None)
def catalogue() -> dict[str, Sentence]:
    """Every numbered sentence of the shipped PROTOCOL.md, by id, in document order."""
    parsed = parse(PROTOCOL_MD.read_text(encoding="utf-8"))
    return {s.id: s for s in parsed.sentences}


def get(sentence_id: str) -> Sentence:
    """The sentence with this id; ``KeyError`` naming it if unknown."""
    try:
        return catalogue()[sentence_id]
    except KeyError:
        raise KeyError(f"unknown sentence id {sentence_id!r}") from None


def of_clause(clause_id: str) -> list[Sentence]:
    """The numbered sentences of one clause, in document order."""
    return [s for s in catalogue().values() if s.clause == clause_id]
