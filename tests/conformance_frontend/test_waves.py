"""FE-DP-1's coordinator branch (``ECP-DP-5``): ``ecp serve`` runs no DP coordinator, so the frontend
role checks its ADDs for wave 0; here a frontend whose client runs the reference coordinator
(:mod:`scripted_frontend` ``--coordinator``) must adopt the wave the engines' start_wave and
wave_complete move it to, and one that counts waves itself fails.
"""

from __future__ import annotations

import pytest

from test_http_misbehaviour import run_case

pytestmark = pytest.mark.slow


def test_a_frontend_with_a_coordinator_adopts_its_waves(tmp_path):
    result, proc = run_case(tmp_path, "FE-DP-1", "--behaviour", "close", "--coordinator")
    assert (result["outcome"], proc.returncode) == ("PASS", 0), (result, proc.stdout[-2000:])


def test_a_frontend_that_counts_waves_itself_fails(tmp_path):
    result, proc = run_case(tmp_path, "FE-DP-1", "--behaviour", "close", "--coordinator",
                            "--bug", "wave-counted-locally")
    assert (result["outcome"], proc.returncode) == ("FAIL", 1), (result, proc.stdout[-2000:])
    assert "no engine reported it complete" in result["message"], result["message"]


def test_a_coordinator_without_waves_fails_unless_the_frontend_declares_it(tmp_path):
    """ECP-HS-4.3 for frontends: a coordinator that runs no waves leaves FE-DP-1's MUST unexercised, a
    FAIL that says how to declare it; declared (--frontend-lacks dp_waves), the case is UNSUPPORTED."""
    # the case waits EXPECT_S for a rebroadcast that never comes: a case budget above that
    result, proc = run_case(tmp_path, "FE-DP-1", "--behaviour", "close", "--coordinator", "--no-waves",
                            harness_args=("--case-timeout", "20"))
    assert (result["outcome"], proc.returncode) == ("FAIL", 1), (result, proc.stdout[-2000:])
    assert "--frontend-lacks dp_waves" in result["message"], result["message"]
    result, proc = run_case(tmp_path, "FE-DP-1", "--behaviour", "close", "--coordinator", "--no-waves",
                            harness_args=("--frontend-lacks", "dp_waves"))
    assert (result["outcome"], proc.returncode) == ("UNSUPPORTED", 0), (result, proc.stdout[-2000:])
    assert "--frontend-lacks dp_waves was given" in result["message"], result["message"]
