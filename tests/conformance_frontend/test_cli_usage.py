"""``ecp conformance frontend`` usage errors and a COMMAND that never comes up.

A bad command must be reported quickly: a missing port placeholder is a usage
error (exit 2) before anything is launched, and a frontend that never finishes
its handshake costs one ``--startup-timeout``, not one per case.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

ECP = [sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend"]


@pytest.mark.parametrize("command, missing", [
    (["serve", "--port", "{http_port}"], "{handshake_port}"),
    (["serve", "--data-parallel-rpc-port", "{handshake_port}"], "{http_port}"),
])
def test_a_command_without_port_placeholders_is_a_usage_error(command, missing):
    proc = subprocess.run([*ECP, "--", *command], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert missing in proc.stderr and "COMMAND does not use" in proc.stderr


def test_no_kv_connector_is_only_for_attach():
    proc = subprocess.run([*ECP, "--no-kv-connector", "--", "serve", "{handshake_port}", "{http_port}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--no-kv-connector is for --attach" in proc.stderr


def test_a_frontend_that_never_comes_up_costs_one_startup_timeout(tmp_path):
    out = tmp_path / "results.json"
    # Alive, uses both placeholders, but never binds anything: every launch would time out.
    hang = "import sys, time; time.sleep(60)"
    cases = ["FE-REQ-1", "FE-REQ-2", "FE-REQ-3", "FE-ROB-1"]   # in run order; FE-ROB-1 launches its own
    argv = [*ECP, "--json", str(out), "--startup-timeout", "2"]
    for c in cases:
        argv += ["--case", c]
    started = time.monotonic()
    proc = subprocess.run([*argv, "--", sys.executable, "-c", hang, "{handshake_port}", "{http_port}"],
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    results = {r["id"]: r for r in json.loads(out.read_text())["cases"]}
    assert {cid: r["outcome"] for cid, r in results.items()} == {cid: "TIMEOUT" for cid in cases}, proc.stdout
    later = [results[cid]["message"] for cid in cases[1:]]
    assert all("without trying again" in m for m in later), later
    assert proc.returncode == 1
    assert elapsed < 2 * 2 + 15, f"{elapsed:.1f} s: later cases waited out the startup timeout again"


def test_help_shows_the_frontend_roles_own_case_timeout():
    proc = subprocess.run([*ECP, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "time budget per case (30)" in " ".join(proc.stdout.split())
