"""The decision table of case outcomes (ecp.conformance.outcomes.decide): every row is reached by the facts it
names, it is the only writer of outcomes in conformance/, and docs/conformance.md shows it as it is."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from ecp.conformance import expected as xf
from ecp.conformance.outcomes import (
    STAGES, TABLE, CaseFailure, CaseTimeout, Declared, FailedClosed, Observed, Outcome, Peer, PeerCrashed,
    PeerNeverStarted, Raised, Unsupported, decide, table_rows,
)
from ecp.conformance.registry import load_role

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
ENGINE = load_role("engine")
#: a MUST case at the interop level, a SHOULD/MAY one, a hardened-level one
MUST = next(c for c in ENGINE if c.level == "MUST" and c.conformance_level == "interop")
SHOULD = next(c for c in ENGINE if c.level != "MUST" and c.conformance_level == "interop")
HARDENED = next(c for c in ENGINE if c.level == "MUST" and c.conformance_level == "hardened")
FINDING = {"clause": "ECP-OUT-8", "level": "MUST", "message": "silent death", "socket": "output[0]", "rank": 0,
           "frames_hex": []}

ENGINE_RUN = Declared(role="engine")
FAILED = Observed(Raised.VIOLATION, "no terminal output")
PASSED = Observed()


def entry(line: str) -> xf.Entry:
    return xf.parse(line + "\n")[0]


def declared(**kw) -> Declared:
    return dataclasses.replace(ENGINE_RUN, **kw)


#: row -> (case, what it observed, what the run declared, the outcome, a word of the message)
EXAMPLES = {
    "release": (MUST, PASSED, declared(release_gap="pause_generation: not in vLLM 0.20"), Outcome.UNSUPPORTED,
                "not in vLLM 0.20"),
    "unsupported": (MUST, Observed.of(Unsupported("declares it lacks logprobs")), ENGINE_RUN, Outcome.UNSUPPORTED,
                    "lacks logprobs"),
    "uncited-routes": (MUST, Observed(uncited_routes=("POST /sleep",)), ENGINE_RUN, Outcome.ERROR, "POST /sleep"),
    "cannot-start": (MUST, Observed(Raised.CANNOT_START, "no such file"), ENGINE_RUN, Outcome.ERROR,
                     "cannot start the peer: no such file"),
    "fail-closed": (MUST, Observed.of(CaseFailure("kept no id", clause="ECP-ROB-2"), crashed=True,
                                      failed_closed=True, death="its process exited with status 1"),
                    ENGINE_RUN, Outcome.FAIL, "fail-closed: kept no id; then the engine sent ENGINE_CORE_DEAD"),
    "crash": (MUST, Observed.of(CaseTimeout("no output"), crashed=True), ENGINE_RUN, Outcome.CRASH,
              "the engine process died during the case (no output)"),
    "findings": (MUST, Observed(findings=(FINDING,)), ENGINE_RUN, Outcome.FAIL, "[ECP-OUT-8] silent death"),
    "pass": (MUST, PASSED, ENGINE_RUN, Outcome.PASS, ""),
    "silent": (MUST, Observed(Raised.TIMEOUT, "no output", probe="after the case the engine died"), ENGINE_RUN,
               Outcome.FAIL, "no output; after the case the engine died"),
    "timeout": (MUST, Observed.of(CaseTimeout("no output in 10 s")), ENGINE_RUN, Outcome.TIMEOUT, "10 s"),
    "violation": (MUST, Observed.of(CaseFailure("two terminal outputs", clause="ECP-REQ-3")), ENGINE_RUN,
                  Outcome.FAIL, "two terminal outputs"),
    "harness-bug": (MUST, Observed.of(KeyError("oops")), ENGINE_RUN, Outcome.ERROR, "harness error: KeyError('oops')"),
    "crash-counts": (SHOULD, Observed.of(PeerCrashed("exit 9")), ENGINE_RUN, Outcome.CRASH, "exit 9"),
    "not-required": (HARDENED, FAILED, declared(level="interop"), Outcome.FAIL, "no terminal output"),
    "required": (SHOULD, FAILED, declared(strict=True), Outcome.FAIL, "no terminal output"),
    "non-strict": (SHOULD, FAILED, ENGINE_RUN, Outcome.FAIL, "no terminal output"),
    "update-failure": (MUST, FAILED, declared(update_expected=True), Outcome.XFAIL, "no terminal output"),
    "update-other": (MUST, PASSED, declared(update_expected=True, expected=entry("ENG-* old")), Outcome.PASS, ""),
    "unlisted": (MUST, FAILED, ENGINE_RUN, Outcome.FAIL, "no terminal output"),
    "listed-failure": (MUST, FAILED, declared(expected=entry("ENG-* known")), Outcome.XFAIL, "no terminal output"),
    "listed-pass": (MUST, PASSED, declared(expected=entry("ENG-* known")), Outcome.XPASS,
                    "listed as expected to fail (known) but passed"),
    "listed-other": (MUST, Observed(Raised.UNSUPPORTED, "no sleep"), declared(expected=entry("ENG-* known")),
                     Outcome.UNSUPPORTED, "no sleep"),
    "accepted-failure": (MUST, FAILED, declared(expected=entry("ENG-* [PASS|FAIL] racy")), Outcome.XFAIL,
                         "FAIL (accepted: [PASS|FAIL]): no terminal output"),
    "accepted-pass": (MUST, PASSED, declared(expected=entry("ENG-* [PASS|FAIL] racy")), Outcome.PASS,
                      "PASS (accepted: [PASS|FAIL]): racy"),
    "unaccepted-pass": (MUST, PASSED, declared(expected=entry("ENG-* [FAIL|TIMEOUT] racy")), Outcome.XPASS,
                        "accepts only [FAIL|TIMEOUT] (racy)"),
    "unaccepted-failure": (MUST, Observed.of(PeerCrashed("gone")), declared(expected=entry("ENG-* [PASS|FAIL] r")),
                           Outcome.CRASH, "CRASH is not among the accepted outcomes [PASS|FAIL]"),
    "accepted-other": (MUST, Observed(Raised.HARNESS_BUG, trace="E"), declared(expected=entry("ENG-* [PASS|FAIL] r")),
                       Outcome.ERROR, "harness error: E"),
}


def test_every_row_has_an_example_and_every_stage_ends_in_a_row_that_always_holds():
    assert list(EXAMPLES) == [r.key for r in TABLE]
    assert [r.stage for r in TABLE] == sorted((r.stage for r in TABLE), key=STAGES.index)
    for stage in STAGES:
        last = [r for r in TABLE if r.stage == stage][-1]
        assert last.holds(None), f"stage {stage} ends in {last.key}, which does not always hold"  # type: ignore[arg-type]


@pytest.mark.parametrize("key", list(EXAMPLES))
def test_each_row_is_reached_by_the_facts_it_names(key):
    case, seen, run, outcome, words = EXAMPLES[key]
    result = decide(case, seen, run)
    assert key in result.rows and len(result.rows) == len(STAGES)
    assert result.outcome is outcome and words in result.message, (result.outcome, result.message)


def test_the_facts_decide_the_clause_the_level_and_what_counts():
    violation = decide(MUST, EXAMPLES["violation"][1], ENGINE_RUN)
    assert violation.clause == "ECP-REQ-3" and violation.blocking
    finding = decide(SHOULD, Observed(findings=(FINDING,)), declared(level="interop"))
    assert finding.clause == "ECP-OUT-8" and finding.blocking and finding.rows == ("findings", "required", "unlisted")
    assert not decide(HARDENED, FAILED, declared(level="interop")).counts_as_failure
    assert decide(SHOULD, Observed.of(PeerCrashed("x")), declared(level="interop")).counts_as_failure
    assert not decide(SHOULD, FAILED, ENGINE_RUN).counts_as_failure
    # the probe's finding follows a failure's own message; the own outcome survives the expected stage
    probed = decide(MUST, dataclasses.replace(FAILED, probe="after the case the engine died"),
                    declared(expected=entry("ENG-* known")))
    assert probed.message == "no terminal output\nafter the case the engine died"
    assert probed.outcome is Outcome.XFAIL and probed.own_outcome is Outcome.FAIL
    assert probed.expected_failure_reason == "known"


def test_an_observation_is_read_off_the_exception_and_the_peer():
    assert Observed.of(None).raised is Raised.NOTHING
    assert Observed.of(FailedClosed("dead")).raised is Raised.FAILED_CLOSED
    assert Observed.of(PeerNeverStarted("exit 1")).raised is Raised.CRASHED
    assert Observed.of(AssertionError("plain")).raised is Raised.VIOLATION
    assert Observed.of(CaseFailure("x", clause="ECP-REQ-3")).clause == "ECP-REQ-3"
    assert Observed.of(None, crashed=True).peer is Peer.DIED
    assert Observed.of(None, crashed=True, failed_closed=True).peer is Peer.FAILED_CLOSED
    assert Observed.of(None, failed_closed=True).peer is Peer.SERVING


def test_a_result_cannot_be_rewritten():
    result = decide(MUST, FAILED, ENGINE_RUN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.outcome = Outcome.PASS  # type: ignore[misc]


#: modules that make a CaseResult of something other than a case of a run, and why
OTHER_RESULTS = {
    "monitor/report.py": "the monitor reports one FAIL per clause broken in passive traffic: no case ran",
}
RESULT_FIELDS = {"outcome", "message", "blocking", "expected_failure_reason", "clause", "conformance_level"}


def _writers(path: Path) -> list[str]:
    """Where ``path`` makes a CaseResult or gives one an outcome: constructor calls, assignments to an
    ``outcome``/``blocking``/``expected_failure_reason`` attribute, ``replace(…, outcome=…)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name == "CaseResult" or (name == "replace" and {k.arg for k in node.keywords} & RESULT_FIELDS):
                found.append(f"{path.relative_to(CONFORMANCE)}:{node.lineno} {name}(…)")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for t in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(t, ast.Attribute) and t.attr in {"outcome", "blocking", "expected_failure_reason"}:
                    found.append(f"{path.relative_to(CONFORMANCE)}:{node.lineno} .{t.attr} =")
    return found


def test_the_table_is_the_only_writer_of_outcomes():
    writers = [w for p in sorted(CONFORMANCE.rglob("*.py")) if p.relative_to(CONFORMANCE) != Path("outcomes.py")
               and str(p.relative_to(CONFORMANCE)) not in OTHER_RESULTS for w in _writers(p)]
    assert writers == []
    # the scan sees what it looks for: the table writes through its draft, and makes the results
    assert any(".outcome =" in w for w in _writers(CONFORMANCE / "outcomes.py"))
    assert any("CaseResult(" in w for w in _writers(CONFORMANCE / "outcomes.py"))
    assert all(_writers(CONFORMANCE / p) for p in OTHER_RESULTS)


def test_docs_show_the_table():
    from doc_blocks import check_block, table

    check_block("conformance.md", "verdict-table", table(("stage", "row", "when (the first that holds)", "then"),
                                                         table_rows()))
