"""Sentence ids of spec/PROTOCOL.md: the markers, the ledger and the data agree; ids are unique and never reused."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ecp.spec import clauses
from ecp.spec import sentences as S

TEXT = S.PROTOCOL_MD.read_text(encoding="utf-8")
LEDGER = S.read_ledger(S.LEDGER.read_text(encoding="utf-8"))

CLAUSE = """## 1. Test

**ECP-SOCK-1** (MUST) Frontend binds. <sup>1</sup> The frontend binds every socket. <sup>2</sup> Engines
connect, e.g. over tcp. <!--i--> vLLM does so too.
vLLM 0.33: a note, never numbered.

**ECP-SOCK-5** (SHOULD) Unlimited. <sup>1</sup> Both sides set SNDHWM to 0.
"""
LEDGER_TEXT = "ECP-SOCK-1.1 MUST\nECP-SOCK-1.2 MUST\nECP-SOCK-5.1 SHOULD\n"


def test_the_shipped_text_and_ledger_agree_and_every_normative_sentence_has_an_id():
    assert S.check(TEXT, LEDGER) == []


def test_the_data_gives_every_sentence_with_id_level_text_and_clause():
    data = clauses.sentences()
    assert len(data) > 150
    assert list(data) == [s.id for s in S.parse(TEXT).sentences]  # document order, one entry per id
    for sid, s in data.items():
        assert S.SENTENCE_ID_RE.match(sid) and sid.startswith(s.clause + ".")
        assert s.clause in clauses.CLAUSES and s.text and s.level in ("MUST", "SHOULD", "MAY")
        assert LEDGER[sid].level == s.level and not LEDGER[sid].withdrawn
        assert "<sup>" not in s.text and "<!--" not in s.text
    # every live clause has at least one numbered sentence, and its sentences are cited by id
    assert {s.clause for s in data.values()} == {c.id for c in clauses._CLAUSES if not c.withdrawn}
    assert clauses.sentences_of("ECP-HS-5")[0].id == "ECP-HS-5.1"


def test_levels_follow_the_key_words():
    data = clauses.sentences()
    # a SHOULD inside a MUST clause, a MUST inside a MAY clause, and a plain sentence at its clause's level
    assert data["ECP-SOCK-2.3"].level == "SHOULD" and "SHOULD" in data["ECP-SOCK-2.3"].text
    assert clauses.get("ECP-HS-12").level == "MAY"
    assert any(s.level == "MUST" for s in clauses.sentences_of("ECP-HS-12"))
    assert data["ECP-HS-5.2"].level == "MUST" and "parallel_config_hash" in data["ECP-HS-5.2"].text


def test_ids_in_the_text_are_unique():
    ids = [s.id for s in S.parse(TEXT).sentences]
    assert len(ids) == len(set(ids))
    dup = CLAUSE.replace("<sup>2</sup>", "<sup>1</sup>")
    assert any("also used" in p for p in S.parse(dup).problems)


def test_sentences_split_at_full_stops_outside_code_and_abbreviations():
    parsed = S.parse(CLAUSE)
    assert [s.id for s in parsed.sentences] == ["ECP-SOCK-1.1", "ECP-SOCK-1.2", "ECP-SOCK-5.1"]
    assert parsed.sentences[1].text == "Engines connect, e.g. over tcp."
    assert parsed.unnumbered == [] and parsed.problems == []
    text = "a `b. C` d (e. F) g. H etc. i. J etc. Kept"
    spans = S.split_sentences(text, 0, len(text))
    assert [text[a:b] for a, b in spans] == ["a `b. C` d (e. F) g.", "H etc. i.", "J etc.", "Kept"]


def test_the_check_names_a_normative_sentence_without_an_id():
    added = CLAUSE.replace("Both sides set SNDHWM to 0.", "Both sides set SNDHWM to 0. Receivers MUST cope.")
    problems = S.check(added, S.read_ledger(LEDGER_TEXT))
    assert len(problems) == 1 and "without an id in ECP-SOCK-5" in problems[0] and "Receivers MUST cope" in problems[0]
    # outside a clause paragraph only a key word makes a sentence normative
    free = CLAUSE + "\nSome prose. A receiver MUST NOT crash.\n"
    problems = S.check(free, S.read_ledger(LEDGER_TEXT))
    assert len(problems) == 1 and "A receiver MUST NOT crash" in problems[0]
    with pytest.raises(S.SentenceError, match="outside a clause paragraph"):
        S.number(free, S.read_ledger(LEDGER_TEXT))


def test_number_gives_the_next_free_number_and_never_reuses_a_withdrawn_one():
    ledger = S.read_ledger(LEDGER_TEXT + "ECP-SOCK-5.2 MUST withdrawn\n")
    added = CLAUSE.replace("Both sides set SNDHWM to 0.", "Both sides set SNDHWM to 0. Receivers MUST cope.")
    added += "\nProse. <sup>ECP-SOCK-1</sup> Elsewhere a frontend SHOULD bind.\n"
    text, new, changes = S.number(added, ledger)
    assert "<sup>3</sup> Receivers MUST cope." in text           # SOCK-5.2 stays withdrawn
    assert "<sup>ECP-SOCK-1.3</sup> Elsewhere" in text
    assert new["ECP-SOCK-5.3"].level == "MUST" and new["ECP-SOCK-1.3"].level == "SHOULD"
    assert S.check(text, new) == [] and len(changes) == 2
    # deleting a sentence: the check names its id, numbering withdraws it, a new sentence takes the next id
    gone = text.replace("<sup>2</sup> Engines\nconnect, e.g. over tcp. ", "")
    assert any("ECP-SOCK-1.2 has no sentence" in p for p in S.check(gone, new))
    gone += "\n**ECP-SOCK-2** (MUST) Identity. An engine's identity is its rank.\n"
    text2, new2, _ = S.number(gone, new)
    assert new2["ECP-SOCK-1.2"].withdrawn and "<sup>1</sup> An engine's identity" in text2
    assert S.check(text2, new2) == []
    reused = text2.replace("<sup>ECP-SOCK-1.3</sup>", "<sup>ECP-SOCK-1.2</sup>")
    assert any("withdrawn and is never reused" in p for p in S.check(reused, new2))


def test_a_changed_level_disagrees_with_the_ledger():
    stronger = CLAUSE.replace("Both sides set SNDHWM to 0.", "Both sides MUST set SNDHWM to 0.")
    assert any("ECP-SOCK-5.1 is MUST in the text, SHOULD" in p for p in S.check(stronger, S.read_ledger(LEDGER_TEXT)))


def test_misplaced_markers_are_problems():
    mid = CLAUSE.replace("Both sides set", "Both <sup>2</sup> sides set")
    assert any("inside a sentence" in p for p in S.parse(mid).problems)
    short = CLAUSE + "\nProse. <sup>4</sup> Elsewhere a frontend SHOULD bind.\n"
    assert any("outside a clause paragraph" in p for p in S.parse(short).problems)
    info = CLAUSE.replace("<!--i--> vLLM does so too.", "<!--i--> vLLM MUST do so too.")
    assert any("carries no key word" in p for p in S.parse(info).problems)
    line_start = CLAUSE.replace("over tcp. <!--i--> vLLM", "over tcp.\n<!--i--> vLLM")
    assert any("starts a line" in p for p in S.parse(line_start).problems)
    other = CLAUSE.replace("<sup>1</sup> Both sides", "<sup>ECP-SOCK-1.9</sup> Both sides")
    assert any("belongs to that clause" in p for p in S.parse(other).problems)
    with pytest.raises(S.SentenceError):
        S.read_ledger("ECP-SOCK-1.1 MUST\nECP-SOCK-1.1 MUST\n")


def test_the_cli_checks_and_numbers(tmp_path: Path):
    protocol = tmp_path / "PROTOCOL.md"
    protocol.write_text(CLAUSE.replace("Both sides set SNDHWM to 0.", "Both sides set SNDHWM to 0. Receivers MUST cope."))
    (tmp_path / "sentences.txt").write_text(LEDGER_TEXT)
    cmd = [sys.executable, "-m", "ecp.spec.cli", "spec", "sentences", "--protocol", str(protocol)]
    first = subprocess.run(cmd + ["--check"], capture_output=True, text=True, timeout=60)
    assert first.returncode == 1 and "Receivers MUST cope" in first.stdout
    numbered = subprocess.run(cmd + ["--number"], capture_output=True, text=True, timeout=60)
    assert numbered.returncode == 0 and "ECP-SOCK-5.2: numbered" in numbered.stdout
    assert subprocess.run(cmd + ["--check"], capture_output=True, text=True, timeout=60).returncode == 0
    assert "ECP-SOCK-5.2 MUST" in (tmp_path / "sentences.txt").read_text()
    assert re.search(r"<sup>2</sup> Receivers MUST cope", protocol.read_text())
