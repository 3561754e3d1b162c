"""A frontend's HTTP misbehaviour is a finding with evidence, never a harness ERROR (a frontend that
closed the connection of GET /is_sleeping once got ``ERROR ... harness error: ReadError('')``), and
a wire rule it breaks outside a case's focus is a finding of that case (recording mode).

Each behaviour is played by :mod:`scripted_frontend` on FE-UTIL-1's route, when the engines disagree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("scripted_frontend.py")

#: behaviour -> (outcome, words the evidence must carry)
EXPECTED = {
    "close": ("FAIL", "closed the connection without an HTTP response"),
    "garbage": ("FAIL", "not a valid HTTP response"),
    "crash": ("CRASH", "the frontend exited with status 3 during the case"),
    "hang": ("TIMEOUT", "GET /is_sleeping: no HTTP response within"),
}


def run_case(tmp_path: Path, case: str, *script_args: str,
             harness_args: tuple[str, ...] = ()) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "results.json"
    argv = [sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend", "--case", case,
            "--case-timeout", "3", "--startup-timeout", "30", "--json", str(out), *harness_args, "--",
            sys.executable, str(SCRIPT), *script_args, "--handshake-port", "{handshake_port}",
            "--engine-count", "{engine_count}", "--port", "{http_port}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    [result] = json.loads(out.read_text())["cases"]
    return result, proc


@pytest.mark.parametrize("behaviour", sorted(EXPECTED))
def test_http_misbehaviour_is_a_finding_not_a_harness_error(tmp_path, behaviour):
    result, proc = run_case(tmp_path, "FE-UTIL-1", "--behaviour", behaviour)
    outcome, words = EXPECTED[behaviour]
    assert (result["outcome"], proc.returncode) == (outcome, 1), (result, proc.stdout[-2000:])
    assert words in result["message"] and "Traceback" not in proc.stdout + proc.stderr, result["message"]


def test_recording_mode_reports_a_rule_broken_outside_the_case_focus(tmp_path):
    """FE-UTIL-2 checks the aggregated answer, which this frontend gets right; it also sends a utility
    call with the reserved call id -1, which the scripted engines' machines record: the case FAILs
    citing ECP-UTIL-12, with the finding and its frames."""
    result, proc = run_case(tmp_path, "FE-UTIL-2", "--behaviour", "close", "--reserved-call-id")
    assert (result["outcome"], result["clause"], proc.returncode) == ("FAIL", "ECP-UTIL-12", 1), result
    assert "own check passed, but the frontend broke other rules" in result["message"], result["message"]
    findings = [f for f in result["findings"] if f["clause"] == "ECP-UTIL-12"]
    assert findings and findings[0]["frames_hex"] and findings[0]["level"] == "MUST", result["findings"]
