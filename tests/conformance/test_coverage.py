"""The clause coverage table: every clause has a case per role it binds, or a stated reason."""

import json

import pytest

from ecp.conformance.coverage import (
    BINDS, REASONS, ROLES, SENTENCE_BINDS, clause_rows, format_matrix, gaps, sentence_gaps, sentence_rows,
    sentence_summary, summary,
)
from ecp.conformance.registry import Case, RegistryError, load_all, validate_cases
from ecp.spec import clauses


def _case(cid, clause, role):
    return Case(id=cid, clause=clause, level="MUST", roles=(role,), requirement="r", slug="s")


def test_reasons_and_binds_name_live_clauses_and_known_roles():
    sentences = clauses.sentences()
    for cid, reason in REASONS.items():
        assert (cid in clauses.CLAUSES and not clauses.CLAUSES[cid].withdrawn) or cid in sentences, cid
        assert reason.roles and set(reason.roles) <= set(ROLES)
        assert reason.why.strip() and reason.checked_by.strip()
    for cid, roles in BINDS.items():
        assert cid in clauses.CLAUSES and set(roles) <= set(ROLES)
    for sid, roles in SENTENCE_BINDS.items():
        assert sid in sentences and roles and set(roles) <= set(ROLES), sid


def test_a_reason_is_never_given_where_a_case_exists():
    """A reason stands in for a case only where none can be written: a role with a case needs none."""
    cases = load_all().values()
    for cid, reason in REASONS.items():
        have = {r for c in cases if (c.clause == cid or cid in c.checks) for r in c.roles}
        assert not have & set(reason.roles), f"{cid}: reason given for {sorted(have & set(reason.roles))} which have cases"


def test_no_must_sentence_is_without_a_check_or_a_reason():
    """The gate: every MUST sentence of PROTOCOL.md is checked by a case in each role it binds, or a
    reason says why not and what checks it instead (`ecp conformance list` names any that is not)."""
    rows = sentence_rows(load_all().values())
    assert len(rows) > 150
    assert [(r.sentence, r.missing_roles) for r in sentence_gaps(rows, "MUST")] == []


def test_citing_a_clause_covers_none_of_its_sentences():
    plain = _case("ENG-REQ-1", "ECP-REQ-5", "engine")
    rows = {r.sentence: r for r in sentence_rows([plain], roles=("engine",))}
    assert rows["ECP-REQ-5.1"].status == "missing" and rows["ECP-REQ-5.2"].status == "missing"
    named = Case(id="ENG-REQ-1", clause="ECP-REQ-5", level="MUST", roles=("engine",), requirement="r", slug="s",
                 checks=("ECP-REQ-5.1",))
    rows = {r.sentence: r for r in sentence_rows([named], roles=("engine",))}
    assert rows["ECP-REQ-5.1"].status == "check" and rows["ECP-REQ-5.1"].cases == {"engine": ["ENG-REQ-1"]}
    assert rows["ECP-REQ-5.2"].status == "missing"   # the other statement of the clause stays a gap
    # a clause's reason covers its sentences; a sentence's own reason covers only that sentence
    assert rows["ECP-SEC-3.1"].status == "reason" and rows["ECP-SEC-3.1"].reason_key == "ECP-SEC-3"
    counts = sentence_summary(list(rows.values()))
    assert counts["must_missing"] == len(sentence_gaps(rows.values())) > 0
    assert counts["must_missing_by_role"]["engine"] == counts["must_missing"]


def test_a_case_citing_an_unknown_sentence_is_refused():
    bad = Case(id="ENG-REQ-1", clause="ECP-REQ-5", level="MUST", roles=("engine",), requirement="r", slug="s",
               checks=("ECP-REQ-5.99", "ECP-REQ-5.1", "ECP-REQ-5.1"))
    with pytest.raises(RegistryError) as info:
        validate_cases([bad], "engine")
    assert "unknown sentence id 'ECP-REQ-5.99'" in str(info.value) and "ECP-REQ-5.1 cited twice" in str(info.value)


def test_statuses_case_reason_missing():
    rows = {r.clause: r for r in clause_rows([_case("ENG-HS-1", "ECP-HS-1", "engine"),
                                              _case("ENG-OUT-1", "ECP-OUT-8", "engine")],
                                             outcomes={"ENG-HS-1": "PASS", "ENG-OUT-1": "FAIL"})}
    assert rows["ECP-HS-1"].status == "case" and rows["ECP-HS-1"].verdict == "PASS"
    assert rows["ECP-SEC-3"].status == "reason" and rows["ECP-SEC-3"].verdict == ""
    # OUT-8 binds both roles: an engine case does not cover the frontend role
    assert rows["ECP-OUT-8"].status == "missing" and rows["ECP-OUT-8"].missing_roles == ["frontend"]
    assert rows["ECP-OUT-8"].verdict == "FAIL"
    assert rows["ECP-ABORT-2"].status == "missing"  # no case, no reason: both roles missing
    s = summary(list(rows.values()))
    assert s["must_missing"] == len(gaps(rows.values())) and s["clauses_run"] == 2 and s["clauses_passing"] == 1
    lines = format_matrix([rows["ECP-HS-1"], rows["ECP-OUT-8"], rows["ECP-SEC-3"]])
    assert "ENG-HS-1=PASS" in lines[1] and "MISSING" in lines[2] and "(reason)" in lines[3]


def test_list_command_reports_gaps_and_the_matrix(run_ecp):
    code, out = run_ecp("conformance", "list")
    assert code == 0 and "ENG-ABORT-3" in out
    must = [ln for ln in out.splitlines() if ln.startswith("MUST clauses without a case or reason:")]
    rows = clause_rows(load_all().values())
    assert must == [f"MUST clauses without a case or reason: {len(gaps(rows))}"]
    assert "SHOULD/MAY clauses without a case or reason:" in out
    srows = sentence_rows(load_all().values())
    assert f"MUST sentences without a check or reason: {len(sentence_gaps(srows))} (engine " in out
    assert f"sentences: {len(srows)}: " in out
    code, out = run_ecp("conformance", "list", "--matrix")
    assert code == 0 and "ECP-SEC-3" in out and "Reasons" in out and "layout gate" in out
    code, out = run_ecp("conformance", "list", "--role", "engine", "--json")
    data = json.loads(out)
    by = {r["clause"]: r for r in data["coverage"]}
    assert "ECP-ABORT-6" not in by  # a frontend-only clause is no gap of the engine role
    assert by["ECP-ABORT-2"]["cases"]["engine"] and by["ECP-ABORT-2"]["status"] == "case"
    assert all(by[c]["status"] == "missing" for c in data["uncovered_must_clauses"])
    sentences = {s["sentence"]: s for s in data["sentences"]}
    assert sentences["ECP-ABORT-2.1"]["cases"]["engine"] and data["uncovered_must_sentences"] == []
    assert data["sentence_summary"]["must_missing"] == 0
