"""A broken engine command gets a clear, bounded answer, never a hang.

Two ways a user's COMMAND goes wrong before any case can run: it exits at once
(bad flags, missing model) or it never connects (the placeholder was not
passed). The first must show the exit status and the engine's own last words;
the second must wait the startup budget once per run, not once per case.
"""

import re
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


_EXITS = ("import sys; sys.stderr.write('engine: unknown flag --no-such-flag\\n'); sys.exit(3)  # {}")


@pytest.mark.parametrize("role, placeholders", [("engine", "{handshake_address}"),
                                                ("frontend", "{handshake_port} {http_port}")])
def test_a_command_that_exits_before_its_handshake_is_reported_once(run_ecp, tmp_path, role, placeholders):
    """One CRASH with the exit status and the command's last words, the other cases NOT RUN: not the
    same crash paragraph once per case."""
    from ecp.conformance.registry import load_role

    total = len(load_role(role))
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", role, "--json", str(out), "--", sys.executable, "-c",
                           _EXITS.format(placeholders))
    assert code == 1, stdout
    import json

    import jsonschema

    from ecp.conformance.report import SCHEMA_PATH

    doc = json.loads(out.read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    assert len(doc["cases"]) == 1 and doc["not_run"]["count"] == total - 1 and "status 3" in doc["not_run"]["why"]
    assert stdout.count("\nCRASH ") == 1, stdout
    not_run = [ln for ln in stdout.splitlines() if ln.startswith("NOT RUN ")]
    assert len(not_run) == 1, stdout
    assert not_run[0].startswith(f"NOT RUN {total - 1} case(s): the {role} command exited with status 3 "
                                 "before its first handshake"), not_run
    assert "engine: unknown flag --no-such-flag" in not_run[0]
    assert re.search(rf": 1 CRASH, {total - 1} NOT RUN in [0-9.]+s at level \w+ -> exit 1$", stdout.strip()), stdout
    assert len(stdout.splitlines()) < 20, stdout


@pytest.mark.parametrize("option, name", [("--html", "r.html"), ("--json", "r.json"), ("--markdown", "r.md"),
                                          ("--junit-xml", "r.xml"), ("--transcripts", "t")])
def test_an_unwritable_report_path_is_refused_before_the_run_starts(tmp_path, capsys, option, name):
    from ecp.spec.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    marker = tmp_path / "started"
    code = main(["conformance", "engine", option, str(blocker / name), "--", "touch", str(marker),
                 "{handshake_address}"])
    out, err = capsys.readouterr()
    assert code == 2 and not out and not marker.exists(), out
    assert err == f"ecp conformance: {option} {blocker / name}: cannot be written ({blocker} is a file, not a folder)\n"


@pytest.mark.parametrize("argv, hidden, extra", [
    (["serve"], ("starlette", "uvicorn"), "serve"),
    (["conformance", "frontend", "--", "x", "{handshake_port}", "{http_port}"], ("httpx",), "conformance"),
])
def test_a_missing_extra_is_named_in_one_line(argv, hidden, extra):
    import subprocess

    # sys.modules[name] = None makes a module unimportable, as in an install without the extra
    code = (f"import sys; sys.modules.update(dict.fromkeys({list(hidden)!r})); from ecp.spec.cli import main; "
            f"sys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"ecp {argv[0]}: needs the '{extra}' extra ({hidden[0]} is not installed): "
                           f"pip install 'engine-core-protocol[{extra}]'\n")


def test_the_frontend_role_against_ecp_serve_without_its_extra_says_which_extra(run_ecp):
    """`ecp serve` without the [serve] extra: one CRASH whose evidence names the extra, the rest NOT RUN."""
    serve = ("import sys; sys.modules['starlette'] = None; from ecp.spec.cli import main; "
             "sys.exit(main(['serve', '--data-parallel-size-local', '0', '--data-parallel-address', '127.0.0.1', "
             "'--data-parallel-rpc-port', '{handshake_port}', '--port', '{http_port}']))")
    code, stdout = run_ecp("conformance", "frontend", "--", sys.executable, "-c", serve)
    assert code == 1, stdout
    [not_run] = [ln for ln in stdout.splitlines() if ln.startswith("NOT RUN ")]
    assert "exited with status 2 before its first handshake" in not_run, not_run
    assert "ecp serve: needs the 'serve' extra (starlette is not installed): " \
           "pip install 'engine-core-protocol[serve]'" in not_run, not_run
