"""Launch records in every report, budgets that follow the measured pace, and launch reuse.

The budget rule itself (``ecp.conformance.pace``) is checked directly; what the runs do with it
is checked against the scripted engine launched as a COMMAND (a real process per launch).
"""

import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from ecp.conformance.pace import MAX_SCALE, REFERENCE_RESPONSE_S, STARTUP_FACTOR, Pace
from ecp.conformance.report import SCHEMA_PATH

from scripted_engine import COMMAND as SCRIPTED

FAST = ["--quiet-window", "0.2"]


def _run(run_ecp, tmp_path, *args):
    paths = {k: tmp_path / f"report.{k}" for k in ("json", "xml", "md", "html")}
    code, stdout = run_ecp("conformance", "engine", "--json", str(paths["json"]), "--junit-xml", str(paths["xml"]),
                           "--markdown", str(paths["md"]), "--html", str(paths["html"]), *FAST, *args)
    doc = json.loads(paths["json"].read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    return code, stdout, doc, paths


# ------------------------------------------------------------------ the rule
def test_startup_budget_follows_the_slowest_launch_measured():
    pace = Pace("engine", case_timeout_s=10.0, startup_timeout_s=60.0)
    assert pace.startup_budget() == 60.0  # nothing measured: the flag
    fast = pace.launch_started(1, "1 engine(s)", "ENG-HS-1")
    fast.startup_s, fast.state = 2.0, "serving"
    assert pace.startup_budget() == 60.0  # 4 x 2 s is below the flag: the flag stays the floor
    slow = pace.launch_started(2, "1 engine(s)", "ENG-HS-6")
    slow.startup_s, slow.state = 40.0, "serving"
    assert pace.startup_budget() == STARTUP_FACTOR * 40.0


def test_case_budget_scales_with_the_first_answer_only():
    pace = Pace("frontend", case_timeout_s=30.0, startup_timeout_s=60.0)
    assert pace.case_budget() == 30.0
    pace.note_response(REFERENCE_RESPONSE_S["frontend"] / 2)  # faster than the reference: never below the flag
    assert pace.case_budget() == 30.0
    pace.note_response(1.0)  # a later measurement does not move the budget of a run
    assert pace.case_budget() == 30.0

    slow = Pace("frontend", case_timeout_s=30.0, startup_timeout_s=60.0)
    slow.note_response(3 * REFERENCE_RESPONSE_S["frontend"])
    assert slow.case_budget() == pytest.approx(90.0)
    glacial = Pace("engine", case_timeout_s=10.0, startup_timeout_s=60.0)
    glacial.note_response(1000 * REFERENCE_RESPONSE_S["engine"])
    assert glacial.case_budget() == MAX_SCALE * 10.0


def test_summary_counts_and_totals_the_launches():
    pace = Pace("engine", case_timeout_s=10.0, startup_timeout_s=60.0)
    for n, t in ((1, 1.5), (2, 2.5)):
        rec = pace.launch_started(n, "1 engine(s)", "ENG-HS-1", ahead=n == 2)
        rec.startup_s, rec.state = t, "serving"
    Pace.launch_failed(pace.launch_started(3, "2 engine(s)", "ENG-DP-1"), "CaseTimeout")
    s = pace.summary()
    assert (s["count"], s["total_startup_s"]) == (3, 4.0)
    assert [r["state"] for r in s["launches"]] == ["serving", "serving", "failed: CaseTimeout"]
    assert s["launches"][1]["ahead"] and s["launches"][2]["startup_s"] is None


# ------------------------------------------------------------------ the reports
def test_every_report_states_the_launches_and_their_startup(run_ecp, tmp_path):
    code, stdout, doc, paths = _run(run_ecp, tmp_path, "--case", "ENG-HS-1", "--case", "ENG-HS-2", "--case", "ENG-HS-6",
                                    "--", *SCRIPTED)
    assert code == 0, stdout
    launches = doc["launches"]
    # the shared topology, and the two-client one that ENG-HS-6 needs, started ahead once the first came up
    assert {r["what"]: (r["case"], r["ahead"]) for r in launches["launches"]} == {
        "1 engine(s), 1 client(s)": ("ENG-HS-1", False), "1 engine(s), 2 client(s)": ("ENG-HS-6", True)}, launches
    assert all(r["startup_s"] > 0 and r["state"] == "serving" for r in launches["launches"])
    assert launches["total_startup_s"] == pytest.approx(sum(r["startup_s"] for r in launches["launches"]), abs=0.01)
    assert launches["response_s"] is not None and launches["case_budget_s"] >= 10.0
    head = f"launches: 2 (1 started ahead); start-up until serving {launches['total_startup_s']:.1f}s in total"
    assert head in stdout, stdout
    assert "launch 2: 1 engine(s), 2 client(s) (started ahead, ENG-HS-6): " in stdout, stdout
    assert head in paths["md"].read_text() and "launch 1: 1 engine(s), 1 client(s) (ENG-HS-1)" in paths["md"].read_text()
    assert head in paths["html"].read_text()
    props = {p.get("name"): p.get("value") for p in ET.parse(paths["xml"]).getroot().find("properties")}
    assert props["launches"].startswith(head)


# ------------------------------------------------------------------ reuse and launching ahead
def test_a_paused_engine_that_resumed_is_reused_not_relaunched(run_ecp, tmp_path):
    code, stdout, doc, _ = _run(run_ecp, tmp_path, "--case", "ENG-REQ-9", "--case", "ENG-OUT-7",
                                "--case", "ENG-ABORT-2", "--", *SCRIPTED)
    assert code == 0, stdout
    # both pause cases (they run first) left it resumed: one launch serves all three
    assert [c["id"] for c in doc["cases"]] == ["ENG-REQ-9", "ENG-OUT-7", "ENG-ABORT-2"]
    assert doc["launches"]["count"] == 1, stdout


def test_an_engine_that_does_not_show_its_initial_state_is_relaunched(run_ecp, tmp_path):
    # is_sleeping answers true on an awake engine: the check for reuse cannot trust it
    code, stdout, doc, _ = _run(run_ecp, tmp_path, "--case", "ENG-REQ-9", "--case", "ENG-ABORT-2",
                                "--", *SCRIPTED, "--bug", "is-sleeping-inverted")
    assert code == 0, stdout
    assert doc["launches"]["count"] == 2, stdout


def test_an_engine_that_slept_is_relaunched(run_ecp, tmp_path):
    code, stdout, doc, _ = _run(run_ecp, tmp_path, "--case", "ENG-UTIL-4", "--case", "ENG-UTIL-5", "--", *SCRIPTED)
    assert code == 0 and doc["cases"][0]["outcome"] == "PASS", stdout
    assert doc["launches"]["count"] == 2, stdout


def test_spares_never_outnumber_the_cases_left(run_ecp, tmp_path):
    # every bad frame leaves this engine deaf: each robustness case needs a launch of its own
    code, stdout, doc, _ = _run(run_ecp, tmp_path, "--case", "ENG-ROB-1", "--case", "ENG-ROB-2",
                                "--case", "ENG-ROB-3", "--startup-timeout", "60", "--", *SCRIPTED, "--bug", "deaf-on-bad-frame")
    assert code == 1 and all(c["outcome"] == "FAIL" for c in doc["cases"]), stdout
    launches = doc["launches"]["launches"]
    # ROB-1 on the first launch; ROB-2 and ROB-3 each on a spare, one at a time (one case left each time)
    assert len(launches) == 3, launches
    assert [r["ahead"] for r in launches] == [False, True, True]
    assert all(r["state"] == "serving" for r in launches), launches


def test_the_graceful_shutdown_case_takes_a_spare_when_one_is_ready(run_ecp, tmp_path):
    code, stdout, doc, _ = _run(run_ecp, tmp_path, "--case", "ENG-ROB-1", "--case", "ENG-ROB-2",
                                "--case", "ENG-ROB-8", "--case", "ENG-SEC-3", "--startup-timeout", "60",
                                "--", *SCRIPTED, "--bug", "deaf-on-bad-frame")
    cases = {c["id"]: c for c in doc["cases"]}
    assert cases["ENG-ROB-8"]["outcome"] == "PASS", stdout
    launches = doc["launches"]["launches"]
    # ROB-2 takes one of two spares started side by side, one more starts behind it; ROB-8 takes one
    # as its own launch, SEC-3 the last
    assert len(launches) == 4 and sum(r["ahead"] for r in launches) == 3, launches
    assert all(r["state"] == "serving" for r in launches), launches


def test_every_topology_hint_is_what_its_case_asks_for(run_ecp, tmp_path):
    """Each hinted case gets the launch prepared for it: none is left unused, and the launches of the
    other topologies are the ones started ahead (a stale hint would leave one "not needed")."""
    from ecp.conformance.engine.session import TOPOLOGY_HINTS

    # ENG-HS-1 first: nothing starts ahead before one launch of the command came up
    args = [a for cid in ["ENG-HS-1", *TOPOLOGY_HINTS] for a in ("--case", cid)]
    code, stdout, doc, _ = _run(run_ecp, tmp_path, *args, "--", *SCRIPTED)
    assert code == 0, stdout
    launches = doc["launches"]["launches"]
    assert all(r["state"] == "serving" for r in launches), launches
    topologies = {r["what"]: r["ahead"] for r in launches}
    assert len(launches) == 4 and topologies == {
        "1 engine(s), 1 client(s)": False, "1 engine(s), 2 client(s)": True, "2 engine(s), 1 client(s)": True,
        "2 engine(s), 1 client(s), a DP coordinator": True}, launches


def test_every_case_that_ends_its_engine_runs_in_the_last_phase():
    """The cases whose code asks for a dedicated launch (they end that engine) run with the hostile ones."""
    import re

    from ecp.conformance.engine.session import EngineManager
    from ecp.conformance.registry import load_role
    from ecp.conformance.runner import CASE_PACKAGES

    catalogue = {c.id: c for c in load_role("engine")}
    dedicated = set()
    for path in CASE_PACKAGES["engine"].glob("test_*.py"):
        for block in re.split(r"\n(?=@case\()", path.read_text()):
            m = re.match(r'@case\("([A-Z0-9-]+)"\)', block)
            if m and "engines.dedicated(" in block:
                dedicated.add(m.group(1))
    assert dedicated and all(EngineManager.run_phase(catalogue[cid]) == 2 for cid in dedicated), dedicated
    assert EngineManager.run_phase(catalogue["ENG-SEC-1"]) == 2  # interop level, but a pickle payload


def test_the_engine_role_runs_interop_cases_then_topologies_then_hostile_input(run_ecp, tmp_path):
    """The run order (EngineManager.run_phase), seen in the transcript's case order; the report keeps the
    catalogue's order."""
    code, stdout, doc, _ = _run(run_ecp, tmp_path, "--case", "ENG-ROB-1", "--case", "ENG-HS-6",
                                "--case", "ENG-SEC-1", "--case", "ENG-REQ-1", "--", *SCRIPTED)
    assert code == 0, stdout
    assert [c["id"] for c in doc["cases"]] == ["ENG-HS-6", "ENG-REQ-1", "ENG-ROB-1", "ENG-SEC-1"]
    launches = doc["launches"]["launches"]
    # REQ-1 first, on the first launch (the run order, whatever order the report lists)
    assert [r["case"] for r in launches][:2] == ["ENG-REQ-1", "ENG-HS-6"], launches
