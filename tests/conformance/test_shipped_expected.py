"""The shipped vLLM expected-failure files and the interop matrix script that uses them."""

import subprocess
import sys
from pathlib import Path

import pytest

from ecp.conformance import expected as xf
from ecp.conformance.registry import load_role
from ecp.spec import clauses

REPO = Path(__file__).resolve().parents[2]
FILES = {"vllm-0.33-engine.txt": "engine", "vllm-0.33-python-frontend.txt": "frontend",
         "vllm-0.33-vllm-rs.txt": "frontend", "vllm-0.32-engine.txt": "engine", "vllm-0.31-engine.txt": "engine",
         "vllm-0.27-engine.txt": "engine", "vllm-0.23-engine.txt": "engine"}


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_entry_matches_cases_and_names_its_decision(name):
    entries = xf.load(REPO / "conformance" / "expected" / name)
    cases = load_role(FILES[name])
    assert entries
    for e in entries:
        matched = [c for c in cases if e.matches(c.id)]
        assert matched, f"{name}:{e.line}: {e.pattern} matches no case"
        assert e.reason.startswith(("(b) ", "(c) ", "(r) ")), f"{name}:{e.line}: the reason must start with its decision"
        # a racy entry accepts its outcomes explicitly, and only a racy one does
        assert (e.outcomes is not None) == e.reason.startswith("(r) "), f"{name}:{e.line}: (r) goes with [outcomes]"
        if e.reason.startswith(("(b) ", "(r) ")):
            # a recorded vLLM deviation points at vLLM's source (vllm-rs ships no source: its measured behaviour)
            assert "vllm/" in e.reason or "measured" in e.reason, f"{name}:{e.line}: no evidence named"
        # no entry excuses an interop-level MUST case without saying which vLLM behaviour it is
        for c in matched:
            if c.level == "MUST" and c.conformance_level == "interop" and e.reason.startswith(("(b) ", "(r) ")):
                assert clauses.get(c.clause).id in e.reason, f"{name}:{e.line}: {c.id} needs its clause named"


def _matrix(*args):
    return subprocess.run([sys.executable, str(REPO / "lab" / "interop_matrix.py"), *args],
                          capture_output=True, text=True, timeout=60)


def test_matrix_lists_its_rows_and_refuses_a_missing_peer(tmp_path):
    listed = _matrix("--list", "--peer", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    for row in ("engine-dp1", "engine-dp2", "python-frontend", "vllm-rs", "ecp-engine-behind-vllm-dp2",
                "ecp-serve-before-vllm-dp2"):
        assert row in listed.stdout
    assert "vllm-0.33-engine.txt" in listed.stdout and "VLLM_USE_RUST_FRONTEND=1" in listed.stdout
    missing = _matrix("--peer", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert missing.returncode == 2 and "no vLLM peer" in missing.stderr


def test_matrix_judges_the_engine_rows_as_the_release_given(tmp_path):
    listed = _matrix("--list", "--release", "0.32", "--peer", str(tmp_path), "--only", "engine-dp1", "engine-dp2")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("--vllm 0.32") == 2 and listed.stdout.count("vllm-0.32-engine.txt") == 2
