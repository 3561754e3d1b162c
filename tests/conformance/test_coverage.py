"""The clause coverage table: every clause has a case per role it binds, or a stated reason."""

import json

from ecp.conformance.coverage import BINDS, REASONS, ROLES, clause_rows, format_matrix, gaps, summary
from ecp.conformance.registry import Case, load_all
from ecp.spec import clauses


def _case(cid, clause, role):
    return Case(id=cid, clause=clause, level="MUST", roles=(role,), requirement="r", slug="s")


def test_reasons_and_binds_name_live_clauses_and_known_roles():
    for cid, reason in REASONS.items():
        assert cid in clauses.CLAUSES and not clauses.CLAUSES[cid].withdrawn
        assert reason.roles and set(reason.roles) <= set(ROLES)
        assert reason.why.strip() and reason.checked_by.strip()
    for cid, roles in BINDS.items():
        assert cid in clauses.CLAUSES and set(roles) <= set(ROLES)


def test_a_reason_is_never_given_where_a_case_exists():
    """A reason stands in for a case only where none can be written: a role with a case needs none."""
    cases = load_all().values()
    for cid, reason in REASONS.items():
        have = {r for c in cases if c.clause == cid for r in c.roles}
        assert not have & set(reason.roles), f"{cid}: reason given for {sorted(have & set(reason.roles))} which have cases"


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
    code, out = run_ecp("conformance", "list", "--matrix")
    assert code == 0 and "ECP-SEC-3" in out and "Reasons" in out and "layout gate" in out
    code, out = run_ecp("conformance", "list", "--role", "engine", "--json")
    data = json.loads(out)
    by = {r["clause"]: r for r in data["coverage"]}
    assert "ECP-ABORT-6" not in by  # a frontend-only clause is no gap of the engine role
    assert by["ECP-ABORT-2"]["cases"]["engine"] and by["ECP-ABORT-2"]["status"] == "case"
    assert all(by[c]["status"] == "missing" for c in data["uncovered_must_clauses"])
