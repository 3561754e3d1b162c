"""A broken engine command gets a clear, bounded answer, never a hang.

Two ways a user's COMMAND goes wrong before any case can run: it exits at once
(bad flags, missing model) or it never connects (the placeholder was not
passed). The first must show the exit status and the engine's own last words;
the second must wait the startup budget once per run, not once per case.
"""

import sys

import pytest


def test_command_that_exits_shows_its_status_and_output(run_ecp):
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-HS-1", "--startup-timeout", "20", "--",
                           sys.executable, "-c", "import sys; print('engine-said-goodbye'); sys.exit(3)")
    assert code == 1, stdout
    assert "CRASH ENG-HS-1" in stdout, stdout
    assert "exit status 3 before completing the handshake" in stdout, stdout
    assert "engine-said-goodbye" in stdout, stdout


def test_command_that_never_connects_waits_once_per_run(run_ecp, tmp_path):
    starts = tmp_path / "starts"
    script = (f"open({str(starts)!r}, 'a').write('x\\n'); import time; time.sleep(30)")
    code, stdout = run_ecp("conformance", "engine", "--startup-timeout", "1", "--case", "ENG-HS-*",
                           "--case", "ENG-DP-*", "--case", "ENG-OUT-2", "--", sys.executable, "-c", script)
    assert code == 1, stdout
    # shared and fresh launches alike: one launch waited, every later case reuses its verdict
    assert starts.read_text().count("x") == 1, stdout
    assert stdout.count("nothing connected to the handshake socket") >= 12, stdout
    assert "{handshake_address}" in stdout


def test_an_adapter_that_never_connects_shows_where_its_threads_wait(run_ecp):
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-HS-1", "--startup-timeout", "1",
                           "--adapter", "reference_adapters:stuck")
    assert code == 1, stdout
    assert "nothing connected to the handshake socket" in stdout, stdout
    # the thread's innermost frame is the wait, then the adapter's own function that called it
    assert "the adapter's threads were at: thread stuck-engine:" in stdout, stdout
    assert "_wait_for_nothing" in stdout, stdout


def test_reports_go_into_folders_that_do_not_exist_yet(run_ecp, tmp_path):
    out = tmp_path / "new" / "deeper"
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-UTIL-2", "--adapter",
                           "ecp.reference.engine.launcher:launch", "--quiet-window", "0.2",
                           "--json", str(out / "r.json"), "--junit-xml", str(out / "x" / "r.xml"),
                           "--markdown", str(out / "r.md"), "--html", str(out / "r.html"))
    assert code == 0, stdout
    for name in ("r.json", "x/r.xml", "r.md", "r.html"):
        assert "ENG-UTIL-2" in (out / name).read_text(), name


def test_an_unwritable_report_is_a_harness_error(run_ecp, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _ = run_ecp("conformance", "engine", "--case", "ENG-UTIL-2", "--adapter",
                      "ecp.reference.engine.launcher:launch", "--quiet-window", "0.2",
                      "--json", str(blocker / "r.json"))
    assert code == 2


def test_transcript_decodes_the_init_the_harness_sent(run_ecp, tmp_path):
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--adapter", "scripted_engine:bug_bare-utility-result",
                           "--case", "ENG-UTIL-1", "--json", str(out), "--quiet-window", "0.2")
    assert code == 1, stdout
    import json

    case = next(c for c in json.loads(out.read_text())["cases"] if c["id"] == "ENG-UTIL-1")
    init = [e for e in case["transcript"] if e["direction"] == "sent" and e["channel"] == "handshake"]
    assert init and "EngineZmqAddresses" in init[0]["decoded"] and len(init[0]["frames_hex"]) == 2, init


@pytest.mark.parametrize("argv", [
    ["--case-timeout", "0", "--", "true"],
    ["--startup-timeout", "-5", "--", "true"],
    # a tcp placeholder with the default ipc transport (the command itself would start fine)
    ["--startup-timeout", "1", "--", sys.executable, "-c", "import time; time.sleep(30)", "{handshake_port}"],
])
def test_nonsense_options_are_usage_errors(run_ecp, argv):
    assert run_ecp("conformance", "engine", "--case", "ENG-HS-1", *argv)[0] == 2
