"""A frontend's HTTP misbehaviour is a finding with evidence, never a harness ERROR (issue: a frontend
that closed the connection of GET /is_sleeping once got ``ERROR ... harness error: ReadError('')``).

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


@pytest.mark.parametrize("behaviour", sorted(EXPECTED))
def test_http_misbehaviour_is_a_finding_not_a_harness_error(tmp_path, behaviour):
    out = tmp_path / "results.json"
    argv = [sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend", "--case", "FE-UTIL-1",
            "--case-timeout", "3", "--startup-timeout", "30", "--json", str(out), "--",
            sys.executable, str(SCRIPT), "--behaviour", behaviour, "--handshake-port", "{handshake_port}",
            "--engine-count", "{engine_count}", "--port", "{http_port}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    [result] = json.loads(out.read_text())["cases"]
    outcome, words = EXPECTED[behaviour]
    assert (result["outcome"], proc.returncode) == (outcome, 1), (result, proc.stdout[-2000:])
    assert words in result["message"] and "Traceback" not in proc.stdout + proc.stderr, result["message"]
