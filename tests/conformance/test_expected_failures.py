"""Expected-failure lists: parsing, stale entries, unmatched patterns, rewriting."""

from dataclasses import replace

import pytest

from ecp.conformance import expected as xf
from ecp.conformance.outcomes import CaseResult, Declared, Observed, Outcome, Raised, decide
from ecp.conformance.registry import load_role

CATALOGUE = {c.id: c for c in load_role("engine")}


def result(cid, outcome):
    return CaseResult(id=cid, clause="ECP-ABORT-2", level="MUST", slug="s", requirement="r", role="engine",
                      outcome=outcome, message="boom")


def test_parse_requires_a_reason():
    entries = xf.parse("# comment\n\nENG-ABORT-3   caps at 256 ids\nENG-ROB-*\tinput thread dies\n")
    assert [(e.pattern, e.reason) for e in entries] == [("ENG-ABORT-3", "caps at 256 ids"),
                                                        ("ENG-ROB-*", "input thread dies")]
    with pytest.raises(xf.ExpectedFailuresError, match="has no reason"):
        xf.parse("ENG-ABORT-3\n")


def judged(cid, outcome, entries):
    """The verdict of a case whose own outcome was ``outcome``, under ``entries``."""
    seen = {Outcome.PASS: Observed(), Outcome.FAIL: Observed(Raised.VIOLATION, "boom"),
            Outcome.TIMEOUT: Observed(Raised.TIMEOUT, "boom"), Outcome.CRASH: Observed(Raised.CRASHED, "boom")}[outcome]
    return decide(CATALOGUE[cid], seen, Declared("engine", expected=xf.entry_for(cid, entries)))


def test_entries_make_xfail_and_stale_ones_xpass_and_unmatched_patterns_are_problems():
    entries = xf.parse("ENG-ABORT-3 known\nENG-ROB-* known too\nENG-NOPE-* typo\n")
    results = [judged(cid, o, entries) for cid, o in (("ENG-ABORT-3", Outcome.FAIL), ("ENG-ROB-1", Outcome.PASS),
                                                       ("ENG-ROB-2", Outcome.CRASH), ("ENG-HS-1", Outcome.FAIL))]
    assert [r.outcome for r in results] == [Outcome.XFAIL, Outcome.XPASS, Outcome.XFAIL, Outcome.FAIL]
    assert results[0].expected_failure_reason == "known"
    assert results[1].counts_as_failure and not results[0].counts_as_failure
    assert xf.unmatched(entries, ["ENG-ABORT-3", "ENG-ROB-1", "ENG-ROB-2", "ENG-HS-1"]) == [
        "expected-failures line 3: pattern 'ENG-NOPE-*' matches no case"]


def test_rewrite_keeps_reasons_and_lists_current_failures(tmp_path):
    path = tmp_path / "xf.txt"
    old = xf.parse("ENG-ABORT-3 caps at 256\nENG-HS-1 fixed since\n")
    results = [result("ENG-ABORT-3", Outcome.FAIL), result("ENG-HS-1", Outcome.PASS),
               result("ENG-UTIL-2", Outcome.TIMEOUT)]
    assert xf.rewrite(path, results, old) == 2
    entries = xf.load(path)
    assert [(e.pattern, e.reason) for e in entries][0] == ("ENG-ABORT-3", "caps at 256")
    assert entries[1].pattern == "ENG-UTIL-2" and "TIMEOUT" in entries[1].reason


def test_rewrite_after_a_partial_run_keeps_entries_for_cases_not_run(tmp_path):
    """`--case ENG-REJECT-* --update-expected-failures` must not forget ENG-UTIL-1's known failure."""
    path = tmp_path / "xf.txt"
    old = xf.parse("ENG-REJECT-1 runs abort_immediately\nENG-UTIL-1 bare results\n"
                   "ENG-ROB-* input thread dies\nENG-NOPE-1 typo\n")
    catalogue = ["ENG-REJECT-1", "ENG-REJECT-2", "ENG-UTIL-1", "ENG-ROB-1", "ENG-ROB-2"]
    results = [result("ENG-REJECT-1", Outcome.XFAIL), result("ENG-REJECT-2", Outcome.PASS),
               result("ENG-ROB-1", Outcome.XFAIL)]
    assert xf.rewrite(path, results, old, catalogue) == 3
    entries = [(e.pattern, e.reason) for e in xf.load(path)]
    assert ("ENG-UTIL-1", "bare results") in entries
    assert ("ENG-ROB-*", "input thread dies") in entries  # still covers ENG-ROB-2, which did not run
    assert ("ENG-REJECT-1", "runs abort_immediately") in entries
    assert not any(p in ("ENG-NOPE-1", "ENG-ROB-1") for p, _ in entries)


def test_a_racy_entry_accepts_its_outcomes_and_reports_which_occurred():
    entries = xf.parse("ENG-ROB-8 [PASS|FAIL]  the peer's server kills the engine while it answers\n")
    assert entries[0].outcomes == {Outcome.PASS, Outcome.FAIL} and entries[0].reason.startswith("the peer's")
    failed, passed, crashed = (judged("ENG-ROB-8", o, entries) for o in (Outcome.FAIL, Outcome.PASS, Outcome.CRASH))
    assert failed.outcome is Outcome.XFAIL and not failed.counts_as_failure
    assert failed.message.startswith("FAIL (accepted: [PASS|FAIL])")
    assert passed.outcome is Outcome.PASS and not passed.counts_as_failure and "accepted" in passed.message
    assert passed.expected_failure_reason.startswith("[PASS|FAIL]")
    # an outcome the entry does not accept counts as usual
    assert crashed.outcome is Outcome.CRASH and crashed.counts_as_failure
    assert "not among the accepted outcomes [PASS|FAIL]" in crashed.message
    only_fail = judged("ENG-ROB-8", Outcome.PASS, xf.parse("ENG-ROB-8 [FAIL|TIMEOUT] racy\n"))
    assert only_fail.outcome is Outcome.XPASS and only_fail.counts_as_failure
    # a plain entry still fails the run on an unexpected pass
    assert judged("ENG-ROB-8", Outcome.PASS, xf.parse("ENG-ROB-8 always fails\n")).outcome is Outcome.XPASS


@pytest.mark.parametrize("line, words", [
    ("ENG-ROB-8 [PASS|MAYBE] racy", "not among"),
    ("ENG-ROB-8 [PASS] racy", "accepts no failure"),
    ("ENG-ROB-8 [PASS|FAIL]", "has no reason"),
])
def test_accepted_outcomes_are_checked(line, words):
    with pytest.raises(xf.ExpectedFailuresError, match=words):
        xf.parse(line + "\n")


def test_rewrite_keeps_accepted_outcomes(tmp_path):
    path = tmp_path / "xf.txt"
    old = xf.parse("ENG-ROB-8 [PASS|FAIL] racy\n")
    r = judged("ENG-ROB-8", Outcome.FAIL, old)
    assert xf.rewrite(path, [r], old) == 1
    [entry] = xf.load(path)
    assert entry.outcomes == {Outcome.PASS, Outcome.FAIL} and entry.reason == "racy"


def test_the_tally_counts_a_failure_that_is_not_required_apart():
    from ecp.conformance.report import RunSummary, tally

    required = result("ENG-ABORT-3", Outcome.FAIL)
    hardened = replace(result("ENG-ROB-1", Outcome.FAIL), conformance_level="hardened", blocking=False)
    s = RunSummary("engine", "x", [result("ENG-HS-1", Outcome.PASS), required, hardened],
                   conformance_level="interop")
    assert tally(s) == "1 PASS, 1 FAIL, 1 FAIL (not required at level interop)"
    s.results[1] = result("ENG-ABORT-3", Outcome.PASS)
    assert tally(s) == "2 PASS, 1 FAIL (not required at level interop)" and s.exit_code == 0


def test_shipped_files_are_addressed_by_their_name_and_paths_still_work(tmp_path):
    shipped = xf.shipped()
    assert shipped and all(path.name == f"{name}.txt" for name, path in shipped.items())
    for name, path in shipped.items():  # the name comes from the file: every release's files, none hard-coded
        assert xf.resolve(name) == path and xf.resolve(f"{name}.txt") == path
        assert xf.load(name) == xf.load(path) == xf.load(str(path))
    with pytest.raises(xf.ExpectedFailuresError, match="not a file, nor the name of a shipped one") as exc:
        xf.resolve("vllm-9.99-engine")
    assert next(iter(shipped)) in str(exc.value)
    local = tmp_path / next(iter(shipped))  # a file of the same name in the directory wins: it is a path
    local.write_text("ENG-HS-1 mine\n")
    assert xf.resolve(local) == local


@pytest.fixture
def cli(capsys):
    """``ecp ARGV`` in-process: (exit code, stdout, stderr)."""
    from ecp.spec.cli import main

    def run(argv):
        code = main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_a_bad_expected_failures_file_is_one_line_before_anything_starts(tmp_path, cli):
    binary = tmp_path / "xf.txt"
    binary.write_bytes(b"ENG-HS-1 fine\n\xff\xfe\x00 not text\n")
    marker = tmp_path / "started"
    for arg, words in ((str(binary), f"{binary}:2: not UTF-8 text (byte 0xff at offset 14)"),
                       ("vllm-9.99-engine", "not a file, nor the name of a shipped one"),
                       (str(tmp_path), "not a file, nor the name of a shipped one")):
        code, out, err = cli(["conformance", "engine", "--expected-failures", arg, "--", "touch", str(marker)])
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert words in err
    assert not marker.exists()  # the peer never started


def test_update_needs_a_path_not_a_shipped_name(cli):
    name = next(iter(xf.shipped()))
    code, _, err = cli(["conformance", "engine", "--expected-failures", name, "--update-expected-failures",
                         "--", "true"])
    assert code == 2 and "--update-expected-failures rewrites a file: give its path" in err, err
    assert len(err.strip().splitlines()) == 1
