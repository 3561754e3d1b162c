"""The frontend role judges a frontend by the HTTP surface of spec/PROTOCOL.md section 14, not by
one implementation's choices: where the text allows two choices, a frontend of each kind passes, and
the choice it forbids fails.

Each frontend is :mod:`scripted_frontend` (the reference client's handshake, a minimal HTTP server)
with the choice under test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("scripted_frontend.py")


def run_case(tmp_path: Path, case: str, *script_args: str) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "results.json"
    argv = [sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend", "--case", case,
            "--startup-timeout", "30", "--json", str(out), "--transcripts", str(tmp_path / "transcripts"), "--",
            sys.executable, str(SCRIPT), "--behaviour", "close", "--completions", *script_args,
            "--handshake-port", "{handshake_port}", "--engine-count", "{engine_count}", "--port", "{http_port}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    [result] = json.loads(out.read_text())["cases"]
    return result, proc


def test_a_frontend_serving_its_model_under_any_name_passes_fe_hs_7(tmp_path):
    """FE-HS-7 once posted model "default": a frontend that refuses unknown models (as FE-REJECT-3/4
    require) and ignores the stranger failed it. The harness names the model /v1/models lists."""
    result, proc = run_case(tmp_path, "FE-HS-7", "--model", "cleanfe-model", "--ignore-strangers")
    assert (result["outcome"], proc.returncode) == ("PASS", 0), (result["message"], proc.stdout[-2000:])


@pytest.mark.parametrize("policy", ["refuse", "lower"])
def test_both_allowed_context_policies_pass_fe_hs_5(tmp_path, policy):
    """ECP-HTTP-8: refusing with a 400 and lowering max_tokens to the room left both keep to the minimum."""
    result, proc = run_case(tmp_path, "FE-HS-5", "--context-policy", policy)
    assert (result["outcome"], proc.returncode) == ("PASS", 0), (result["message"], proc.stdout[-2000:])


def test_sending_a_prompt_that_leaves_no_room_fails_fe_hs_5(tmp_path):
    """ECP-HTTP-8.1: lowering max_tokens to the room left is allowed only while there is room; a prompt
    that fills the minimum on its own is refused with a 400, never sent."""
    result, proc = run_case(tmp_path, "FE-HS-5", "--context-policy", "lower-blindly")
    assert (result["outcome"], proc.returncode) == ("FAIL", 1), result
    assert "it is refused with a 400 and never sent" in result["message"], result["message"]


def test_sending_the_add_unchanged_fails_fe_hs_5_with_the_http_exchange(tmp_path):
    """The forbidden choice fails, and the failing case's transcript shows the HTTP request that failed it
    next to the ADD it caused."""
    result, proc = run_case(tmp_path, "FE-HS-5", "--context-policy", "unchecked")
    assert (result["outcome"], proc.returncode) == ("FAIL", 1), result
    assert "did not use the minimum" in result["message"], result["message"]
    text = result["transcript_text"]
    request = text.index('--> http POST /v1/completions {"model": "scripted", "prompt": ')
    answer = text.index("<-- http HTTP 200 POST /v1/completions", request)
    add = text.index("<-- engine", request)
    assert request < add < answer, text[request:request + 2000]
    assert "decoded: None" not in text   # HELLO, READY, INIT and the ready payload are shown decoded
