"""``ecp conformance engine`` end to end: launch modes, outcomes, expected failures, reports.

The reference engine must pass every case, and each of its ``--bug`` knobs
must be caught by the cases named in ``REFERENCE_KNOBS`` (the mapping is
data; docs/conformance.md shows it).
"""

import json
import re
import sys
import threading
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from ecp.conformance.registry import load_role
from ecp.conformance.report import SCHEMA_PATH
from ecp.reference.engine.config import BUGS as REFERENCE_BUGS

from scripted_engine import COMMAND as SCRIPTED

FAST = ["--quiet-window", "0.2", "--startup-timeout", "5"]
#: the reference engine launched as a process, at a step time that keeps ENG-ROB-8's long requests
#: running until the SIGTERM on a loaded machine (unpaced it may finish them first: UNSUPPORTED)
PACED = ["--step-time-ms", "1"]

#: reference-engine knob -> cases that must catch it
REFERENCE_KNOBS: dict[str, list[str]] = {
    "ignore-abort-immediately": ["ENG-REJECT-1"],
    "no-terminal-output": ["ENG-REQ-1", "ENG-OUT-1"],
    "duplicate-output": ["ENG-OUT-1"],
    "inconsistent-is-sleeping": ["ENG-DP-3"],
    "reset-prefix-cache-fails": ["ENG-UTIL-5"],
    "crash-on-bad-frame": ["ENG-ROB-1", "ENG-SEC-1"],
    "wrong-call-id": ["ENG-UTIL-2"],
    "ignore-abort": ["ENG-ABORT-1"],
    "bare-utility-result": ["ENG-UTIL-1"],
    "wave-complete-to-client": ["ENG-DP-5"],
    "tokens-after-finish": ["ENG-OUT-1"],
    "no-generate-task": ["ENG-HS-7"],
    "error-not-finished": ["ENG-OUT-8"],
    "finish-reason-out-of-range": ["ENG-OUT-7", "ENG-REQ-1"],
    "short-output-arrays": ["ENG-OUT-6"],
    "outputs-wrapped": ["ENG-OUT-5"],
    "truncated-request-ids": ["ENG-REQ-8"],
    "paused-add-not-retryable": ["ENG-REQ-9"],
    "abort-immediately-paused-error": ["ENG-REJECT-3"],
    "ignore-stamped-wave": ["ENG-DP-6"],
    "wave-complete-from-every-rank": ["ENG-DP-5"],
    "tensor-shape-mismatch": ["ENG-OUT-9"],
    "tensors-inline": ["ENG-OUT-10"],
    "no-logprobs": ["ENG-OUT-9", "ENG-OUT-10"],
    "no-stop-reason": ["ENG-REQ-2"],
    "length-before-stop": ["ENG-REQ-2"],
    "keep-pause-refuses": ["ENG-REQ-14"],
    "no-parallel-config-hash": ["ENG-DP-1"],
    "ready-flags-differ": ["ENG-HS-1"],
    "local-and-headless": ["ENG-HS-1"],
    "sleep-default-keep": ["ENG-UTIL-6"],
    "drop-adds-while-asleep": ["ENG-UTIL-4"],
    "refused-utility-succeeds": ["ENG-ROB-2", "ENG-ROB-4", "ENG-SEC-2"],
    "pause-default-keep": ["ENG-UTIL-6"],
    "duplicate-error-finished": ["ENG-REQ-4"],
    "rejected-add-retryable": ["ENG-REQ-4", "ENG-REQ-5", "ENG-REQ-6", "ENG-ROB-7"],
    "negative-token-ids": ["ENG-REQ-1"],
    "error-on-input-socket": ["ENG-ROB-4", "ENG-ROB-7"],
}


def test_a_declared_missing_capability_is_unsupported_an_undeclared_one_fails(run_ecp, tmp_path):
    """An engine that never returns logprobs fails the tensor cases unless it declares that it lacks them."""
    base = ["conformance", "engine", "--adapter", "reference_adapters:bug_no-logprobs", "--case", "ENG-OUT-9",
            "--case", "ENG-OUT-10", "--case-timeout", "5", *FAST]
    code, stdout = run_ecp(*base, "--json", str(tmp_path / "undeclared.json"))
    _, cases = _results(tmp_path / "undeclared.json")
    assert code == 1, stdout
    for cid in ("ENG-OUT-9", "ENG-OUT-10"):
        assert cases[cid]["outcome"] == "FAIL", stdout
        assert "--engine-lacks logprobs" in cases[cid]["message"], stdout
    code, stdout = run_ecp(*base, "--engine-lacks", "logprobs", "--json", str(tmp_path / "declared.json"))
    _, cases = _results(tmp_path / "declared.json")
    assert code == 0, stdout
    for cid in ("ENG-OUT-9", "ENG-OUT-10"):
        assert cases[cid]["outcome"] == "UNSUPPORTED", stdout
        assert "--engine-lacks logprobs was given" in cases[cid]["message"], stdout
    # the flag only declares: an engine that has logprobs is not judged on them, it does not fail
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:paced", "--case", "ENG-OUT-9",
                           "--engine-lacks", "logprobs", *FAST)
    assert code == 0 and re.search(r"^UNSUPPORTED ENG-OUT-9: ", stdout, re.M), stdout


def _results(path):
    data = json.loads(path.read_text())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    return data, {c["id"]: c for c in data["cases"]}


def test_reference_engine_passes_every_case(run_ecp, tmp_path):
    out = tmp_path / "ref.json"
    # a correct engine always comes up: 30 s for its launches, which share the cores with the other
    # test workers (5 s ran out once for a two-rank launch under -n 3)
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:paced",
                           "--json", str(out), *FAST, "--startup-timeout", "30")
    data, cases = _results(out)
    assert code == 0, stdout
    assert sorted(cases) == sorted(c.id for c in load_role("engine"))
    # graceful shutdown needs a process to signal: an in-process adapter cannot be judged on it
    assert cases.pop("ENG-ROB-8")["outcome"] == "UNSUPPORTED", stdout
    assert {c["outcome"] for c in cases.values()} == {"PASS"}, stdout
    assert "42 PASS" in stdout or f"{len(cases)} PASS" in stdout


#: scripted-engine knob -> cases that catch it, for cases that need the engine as a process (COMMAND)
COMMAND_KNOBS: dict[str, list[str]] = {
    "sigterm-drops-requests": ["ENG-ROB-8"],
}


@pytest.mark.parametrize("knob", sorted(COMMAND_KNOBS))
def test_command_knob_is_caught(knob, run_ecp):
    args = ["conformance", "engine", *FAST]
    for cid in COMMAND_KNOBS[knob]:
        args += ["--case", cid]
    code, stdout = run_ecp(*args, "--", *SCRIPTED, "--bug", knob)
    assert code == 1, stdout
    for cid in COMMAND_KNOBS[knob]:
        assert re.search(rf"^(FAIL|TIMEOUT|CRASH) {cid} ", stdout, re.M), stdout


#: knobs caught only by silence (an ABORTed request must go quiet within the quiet window): with the
#: engine in the harness's own process, a loaded machine can stall its thread for longer than FAST's
#: 0.2 s window, and the still-running request then looks stopped. A 1 s window outlasts such a stall,
#: and the ignored ABORT's request (512 tokens at 1 ms a step) reaches its LENGTH terminal within it.
SILENCE_JUDGED = {"ignore-abort": ["--quiet-window", "1.0"]}


def test_every_reference_knob_is_mapped():
    assert sorted(REFERENCE_KNOBS) == sorted(REFERENCE_BUGS)


@pytest.mark.parametrize("knob", sorted(REFERENCE_KNOBS))
def test_reference_knob_is_caught(knob, run_ecp, tmp_path):
    out = tmp_path / "r.json"
    # --strict: a SHOULD case that catches its knob fails the run too
    args = ["conformance", "engine", "--adapter", f"reference_adapters:bug_{knob}", "--json", str(out),
            "--case-timeout", "3", "--strict", *FAST, *SILENCE_JUDGED.get(knob, [])]
    for cid in REFERENCE_KNOBS[knob]:
        args += ["--case", cid]
    code, stdout = run_ecp(*args)
    _, cases = _results(out)
    assert code == 1, stdout
    for cid in REFERENCE_KNOBS[knob]:
        assert cases[cid]["outcome"] in ("FAIL", "TIMEOUT", "CRASH"), stdout
        assert cases[cid]["clause"] in stdout


def test_an_ignored_abort_is_caught_whatever_the_quiet_window(run_ecp, tmp_path):
    """A quiet window shorter than the engine's gaps between tokens (a loaded machine) lets an ignored
    ABORT look obeyed; the fence ADD behind the ABORT catches it all the same (ECP-ABORT-2.2)."""
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:bug_ignore-abort",
                           "--json", str(out), "--case", "ENG-ABORT-1", "--case", "ENG-ABORT-3",
                           "--quiet-window", "0.001", "--startup-timeout", "5")
    _, cases = _results(out)
    assert code == 1, stdout
    for cid in ("ENG-ABORT-1", "ENG-ABORT-3"):
        assert cases[cid]["outcome"] == "FAIL", stdout
    assert "ECP-ABORT-2.2" in stdout, stdout


def test_command_template_over_tcp_and_reports(run_ecp, tmp_path):
    """The launched-command form ("Done when"): the reference engine as a subprocess, tcp transport."""
    paths = {k: tmp_path / f"report.{k}" for k in ("json", "xml", "md", "html")}
    code, stdout = run_ecp(
        "conformance", "engine", "--transport", "tcp", "--case", "ENG-HS-*", "--case", "ENG-REQ-1", "--case", "ENG-ROB-8",
        "--json", str(paths["json"]), "--junit-xml", str(paths["xml"]), "--markdown", str(paths["md"]),
        "--html", str(paths["html"]), *FAST, "--",
        sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
        "--engine-count", "{engine_count}", "--engine-start-index", "{engine_start_index}", *PACED)
    assert code == 0, stdout
    data, cases = _results(paths["json"])
    assert len(cases) == 9 and data["target"].startswith(sys.executable)
    assert cases["ENG-ROB-8"]["outcome"] == "PASS"  # SIGTERM: in-flight requests ended, exit 0
    suite = ET.parse(paths["xml"]).getroot()
    assert suite.get("tests") == "9" and suite.get("failures") == "0"
    assert "ENG-HS-6" in paths["md"].read_text() and "<table" in paths["html"].read_text()
    # the reference engine speaks the release under test: no release line, and the JSON says it fits
    assert "speaks vLLM" not in stdout and data["release"]["mismatch"] is None
    assert "0.33" in data["release"]["fits"]


def test_failure_report_names_clause_and_carries_a_transcript(run_ecp, tmp_path):
    paths = {"json": tmp_path / "r.json", "xml": tmp_path / "r.xml", "tr": tmp_path / "tr"}
    code, stdout = run_ecp("conformance", "engine", "--adapter", "scripted_engine:bug_bare-utility-result",
                           "--case", "ENG-UTIL-1", "--json", str(paths["json"]), "--junit-xml", str(paths["xml"]),
                           "--transcripts", str(paths["tr"]), *FAST)
    assert code == 1
    assert "FAIL ENG-UTIL-1 [ECP-UTIL-2 MUST]" in stdout
    _, cases = _results(paths["json"])
    entries = cases["ENG-UTIL-1"]["transcript"]
    assert any(e["direction"] == "sent" and e["channel"] == "input[0]" for e in entries)
    assert any(e["direction"] == "recv" and e["frames_hex"] for e in entries)
    text = (paths["tr"] / "ENG-UTIL-1.txt").read_text()
    assert "is_sleeping" in text and "<--" in text
    failure = ET.parse(paths["xml"]).getroot().find("testcase/failure")
    assert failure is not None and "ECP-UTIL-2" in failure.text


def test_expected_failures_file(run_ecp, tmp_path):
    xf = tmp_path / "xf.txt"
    base = ["conformance", "engine", "--adapter", "scripted_engine:bug_duplicate-output",
            "--case", "ENG-OUT-1", "--case", "ENG-HS-1", "--expected-failures", str(xf), *FAST]
    xf.write_text("ENG-OUT-1  sends terminal outputs twice (tracked)\n")
    code, stdout = run_ecp(*base)
    assert code == 0 and "XFAIL" in stdout, stdout
    xf.write_text("ENG-OUT-1  tracked\nENG-HS-1  stale entry\n")
    code, stdout = run_ecp(*base)
    assert code == 1 and "XPASS" in stdout, stdout
    xf.write_text("ENG-OUT-1  tracked\nENG-NOPE-*  typo\n")
    code, stdout = run_ecp(*base)
    assert code == 1 and "matches no case" in stdout, stdout
    xf.write_text("ENG-OUT-1\n")
    assert run_ecp(*base)[0] == 2
    xf.write_text("ENG-HS-1  stale entry\n")
    code, _ = run_ecp(*base, "--update-expected-failures")
    assert code == 0
    assert [line.split()[0] for line in xf.read_text().splitlines() if not line.startswith("#")] == ["ENG-OUT-1"]
    assert run_ecp(*base)[0] == 0


def test_should_violations_are_non_strict_unless_strict(run_ecp):
    base = ["conformance", "engine", "--adapter", "scripted_engine:bug_no-recover-id", "--case", "ENG-ROB-7", *FAST]
    code, stdout = run_ecp(*base)
    assert code == 0 and "FAIL (non-strict SHOULD) ENG-ROB-7" in stdout, stdout
    assert run_ecp(*base, "--strict")[0] == 1


def test_attach_mode_runs_what_it_can(run_ecp, tmp_path):
    import scripted_engine

    address = f"ipc://{tmp_path}/attach-hs"
    engines = []
    starter = threading.Thread(target=lambda: engines.append(scripted_engine.ScriptedEngines(address, 1)))
    starter.start()  # connects and retries until the harness binds
    try:
        code, stdout = run_ecp("conformance", "engine", "--attach", address, "--case", "ENG-HS-*",
                               "--case", "ENG-UTIL-3", *FAST)
    finally:
        starter.join(5)
        for e in engines:
            e.stop()
    assert code == 0, stdout
    assert re.search(r"ENG-HS-6 +multiple-clients +MUST +UNSUPPORTED", stdout), stdout
    assert re.search(r"ENG-UTIL-3 +unknown-method-failure +MUST +PASS", stdout), stdout


def test_timeout_and_usage_errors(run_ecp):
    code, stdout = run_ecp("conformance", "engine", "--startup-timeout", "0.3", "--case", "ENG-HS-1",
                           "--case", "ENG-OUT-2", "--", sys.executable, "-c", "import time; time.sleep(30)")
    assert code == 1 and stdout.count("TIMEOUT") >= 2, stdout
    assert run_ecp("conformance", "engine")[0] == 2
    assert run_ecp("conformance", "engine", "--attach", "ipc:///tmp/x", "--", "true")[0] == 2
    assert run_ecp("conformance", "engine", "--case", "ENG-HS-1", "--", "/nonexistent/engine")[0] == 2
    assert run_ecp("conformance", "engine", "--case", "ENG-NOPE-*", "--", "true")[0] == 2


def test_scripted_engine_subprocess_crash_is_reported(run_ecp):
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-ROB-1", *FAST, "--",
                           *SCRIPTED, "--bug", "crash-on-bad-frame")
    assert code == 1
    assert "CRASH ENG-ROB-1" in stdout, stdout


def test_a_crash_whose_process_exits_after_its_sockets_close_is_a_crash(run_ecp):
    """The engine closes its connections, then its process exits a second later (past the quiet
    window): still a CRASH, not an engine that stopped reading."""
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-ROB-1", *FAST, "--",
                           *SCRIPTED, "--bug", "crash-on-bad-frame", "--bug", "slow-exit")
    assert code == 1
    assert "CRASH ENG-ROB-1" in stdout, stdout


def test_declared_missing_feature_is_unsupported(run_ecp):
    """An engine whose ready payload says enable_sleep_mode=false is not failed on sleep cases."""
    code, stdout = run_ecp("conformance", "engine", "--adapter", "scripted_engine:bug_no-sleep-mode",
                           "--case", "ENG-UTIL-4", "--case", "ENG-UTIL-6", "--case", "ENG-DP-3", *FAST)
    assert code == 0, stdout
    assert stdout.count("UNSUPPORTED") >= 3 and "enable_sleep_mode" in stdout, stdout


def test_engine_count_and_start_index_reach_the_shared_engine(run_ecp):
    code, stdout = run_ecp("conformance", "engine", "--adapter", "scripted_engine:start", "--engine-count", "2",
                           "--engine-start-index", "5", "--case", "ENG-HS-*", "--case", "ENG-OUT-2",
                           "--case", "ENG-DP-1", *FAST)
    assert code == 0, stdout
    assert "9 PASS" in stdout, stdout


def test_reference_engine_process_crash_is_caught(run_ecp):
    """The "Done when" form with a knob: `ecp engine --bug crash-on-bad-frame` as a subprocess."""
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-ROB-1", "--case", "ENG-UTIL-1", *FAST, "--",
                           sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
                           "--engine-count", "{engine_count}", "--bug", "crash-on-bad-frame")
    assert code == 1, stdout
    # the knob sends ENGINE_CORE_DEAD before exiting: reported as fail-closed, a FAIL of the hardened clause
    assert "FAIL ENG-ROB-1 [ECP-ROB-1 MUST hardened]" in stdout and "fail-closed" in stdout, stdout
    assert re.search(r"ENG-UTIL-1 +result-envelope +MUST +PASS", stdout), stdout


def test_an_engine_that_stops_reading_is_a_fail_at_once_not_a_timeout(run_ecp, tmp_path):
    """vLLM 0.33's engine core ends its input thread on bad input: no ENGINE_CORE_DEAD, process alive.
    The harness sees the input connection close and reports that evidence without waiting out a timeout."""
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-ROB-3", "--case", "ENG-UTIL-1", "--json",
                           str(out), *FAST, "--", *SCRIPTED, "--bug", "deaf-on-bad-frame")
    _, cases = _results(out)
    assert code == 1, stdout
    rob = cases["ENG-ROB-3"]
    assert rob["outcome"] == "FAIL" and rob["conformance_level"] == "hardened", stdout
    assert "closed its connection to input[0]" in rob["message"] and "no ENGINE_CORE_DEAD" in rob["message"]
    assert rob["duration_s"] < 4.0, rob  # not the 5 s probe budget: the closed connection ends the wait
    assert cases["ENG-UTIL-1"]["outcome"] == "PASS", stdout  # a fresh engine serves the next case


def test_level_interop_reports_hardened_failures_without_failing_the_run(run_ecp, tmp_path):
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    code, stdout = run_ecp("conformance", "engine", "--level", "interop", "--case", "ENG-ROB-1", "--case",
                           "ENG-SEC-1", "--case", "ENG-UTIL-1", "--json", str(out), "--markdown", str(md), *FAST,
                           "--adapter", "reference_adapters:bug_crash-on-bad-frame")  # fails closed
    doc, cases = _results(out)
    assert code == 0, stdout
    assert doc["conformance_level"] == "interop"
    assert "FAIL (not required at level interop) ENG-ROB-1 [ECP-ROB-1 MUST hardened]" in stdout, stdout
    assert "fail-closed: the engine sent ENGINE_CORE_DEAD" in stdout, stdout
    # the pickle was refused (never executed): ECP-SEC-1 held; that the engine then stopped is ECP-ROB-1
    assert cases["ENG-SEC-1"]["clause"] == "ECP-ROB-1" and cases["ENG-SEC-1"]["conformance_level"] == "hardened"
    assert all(not cases[c]["blocking"] for c in ("ENG-ROB-1", "ENG-SEC-1"))
    assert "| hardened |" in md.read_text()
    # the same run at the default level (hardened) fails
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-ROB-1", *FAST,
                           "--adapter", "reference_adapters:bug_crash-on-bad-frame")
    assert code == 1 and "at level hardened -> exit 1" in stdout, stdout


def test_replacement_engines_are_launched_ahead_once_engines_keep_dying(run_ecp, tmp_path):
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--case", "ENG-ROB-1", "--case", "ENG-ROB-2", "--case",
                           "ENG-ROB-3", "--json", str(out), "--quiet-window", "0.2", "--startup-timeout", "60",
                           "--", *SCRIPTED, "--bug", "deaf-on-bad-frame")  # spares start side by side: be patient
    _, cases = _results(out)
    assert code == 1 and all(cases[c]["outcome"] == "FAIL" for c in cases), stdout
    # ROB-1's engine stopped reading: its replacement started as a spare, with the next one beside it
    assert "started ahead in the background" not in cases["ENG-ROB-1"]["transcript_text"]
    assert "started ahead in the background" in cases["ENG-ROB-2"]["transcript_text"], cases["ENG-ROB-2"]
    assert "started ahead in the background" in cases["ENG-ROB-3"]["transcript_text"], cases["ENG-ROB-3"]


def test_a_launch_without_rank_0_at_a_slow_token_pace_passes_the_wave_and_pace_cases(run_ecp, tmp_path):
    """The reference engine at ranks 2..3 (no rank 0: no wave_complete is due, ECP-DP-5.5) and at 60 ms a
    token (ENG-REJECT-2's 100-token neighbour takes 6 s; the wait follows the tokens as they come, within the
    case budget that follows the measured pace) passes ENG-DP-6 and ENG-REJECT-2."""
    out = tmp_path / "r.json"
    code, stdout = run_ecp(
        "conformance", "engine", "--engine-start-index", "2", "--case", "ENG-DP-6", "--case", "ENG-REJECT-2",
        "--json", str(out), "--quiet-window", "0.2", "--startup-timeout", "30", "--",
        sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
        "--engine-count", "{engine_count}", "--engine-start-index", "{engine_start_index}", "--step-time-ms", "60")
    _, cases = _results(out)
    assert code == 0, stdout
    assert {cid: c["outcome"] for cid, c in cases.items()} == {"ENG-DP-6": "PASS", "ENG-REJECT-2": "PASS"}, stdout


def test_token_ids_beyond_the_stated_vocabulary_fail(run_ecp, tmp_path):
    """The reference engine's synthetic ids lie in [16, 32000): told the model has 16 tokens, the harness
    fails the first output (ECP-OUT-3.2); told 32000, it passes."""
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:paced", "--case", "ENG-REQ-1",
                           "--engine-vocab-size", "16", "--json", str(out), *FAST)
    _, cases = _results(out)
    assert code == 1 and cases["ENG-REQ-1"]["outcome"] == "FAIL", stdout
    assert "[ECP-OUT-3" in stdout and "V = 16" in stdout, stdout
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:paced", "--case", "ENG-REQ-1",
                           "--engine-vocab-size", "32000", *FAST)
    assert code == 0, stdout


def test_an_error_sent_on_the_input_socket_is_named_for_the_rule_it_breaks(run_ecp, tmp_path):
    """An engine that answers an undecodable ADD on the input socket it came in on (the old reading of
    ECP-ROB-2.2's "the socket the ADD came in on") fails ENG-ROB-4 with ECP-HS-3, and the message says
    where the ERROR belongs; it used to read "[ECP-HS-4] Expected `object`, got `array`; [ECP-HS-11]
    duplicate registration"."""
    out = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:bug_error-on-input-socket",
                           "--case", "ENG-ROB-4", "--json", str(out), *FAST)
    _, cases = _results(out)
    assert code == 1 and cases["ENG-ROB-4"]["outcome"] == "FAIL", stdout
    assert cases["ENG-ROB-4"]["clause"] == "ECP-HS-3", cases["ENG-ROB-4"]
    message = cases["ENG-ROB-4"]["message"]
    assert "ECP-ROB-2.2" in message and "outputs[0]" in message and "ECP-HS-11" not in message, message
