"""The reproducers of real vLLM 0.33 defects found by ``ecp conformance explore`` (docs/reproducers/)
replay against the reference peer of their role without the violation: what vLLM breaks there the
reference keeps."""

import sys
from pathlib import Path

import pytest

from ecp.conformance.explore.reproducer import read

REPRODUCERS = sorted((Path(__file__).resolve().parents[2] / "docs" / "reproducers").rglob("*.json"))
ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process"]
SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}", "--dev-mode"]


def test_the_reproducers_are_there():
    assert REPRODUCERS, "docs/reproducers/ holds no reproducer file"


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_a_vllm_reproducer_shows_no_violation_against_the_reference(path, run_ecp):
    doc = read(path)
    assert doc["session"].steps, "a reproducer with no step replays nothing of vLLM's defect"
    command = SERVE if doc["role"] == "frontend" else ENGINE
    code, out = run_ecp("conformance", "replay", str(path), "--runs", "2", "--step-timeout", "3s", "--", *command)
    assert code == 0 and out.count("no violation") == 2, out
