"""A short seeded interrupt storm (``campaigns/interrupt_storm.py``): real conformance runs of both
roles and an exploration, each signalled at a random moment, end within their bound and leave no
process behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_interrupted_runs_end_within_their_bound_and_leave_no_process(tmp_path):
    out = tmp_path / "rounds.json"
    # the storm makes itself the subreaper of what the runs leave: it runs as a process of its own
    proc = subprocess.run([sys.executable, "-m", "campaigns.interrupt_storm", "--count", "3", "--seed", "4", "--min-delay", "1.5",
                           "--max-delay", "3", "--second", "0.5", "--json", str(out)],
                          capture_output=True, text=True, timeout=100, cwd=REPO)
    rounds = json.loads(out.read_text())
    assert [r["mode"] for r in rounds] == ["engine", "frontend", "explore"]
    interrupted = [r for r in rounds if not r["ended_before"]]
    assert len(interrupted) == 3, proc.stdout          # every run was still going at its signal
    assert any(len(r["signals"]) == 2 for r in rounds), rounds  # the seed gives one a second signal
    assert all(r["survivors"] == [] for r in rounds), proc.stdout
    assert all(r["exit_s"] is not None and not r["forced"] for r in rounds), proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
