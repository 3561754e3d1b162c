"""Frontend-role budgets follow the measured launch time: a slow-starting frontend is not a TIMEOUT.

FE-HS-6 starts three frontends side by side and judges each handshake itself; their start-up
(until the frontend answers a HELLO) must not eat the case's budget, whatever that budget is.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

#: seconds each launch of the frontend sleeps before it starts: longer than the case budget below
SLOW_START_S = 2.5
SERVE = ["-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
         "--data-parallel-rpc-port", "{handshake_port}", "--data-parallel-size", "{engine_count}",
         "--port", "{http_port}", "--dev-mode"]


def test_side_by_side_launches_do_not_eat_the_case_budget(tmp_path):
    out = tmp_path / "results.json"
    slow = ["bash", "-c", f'sleep {SLOW_START_S}; exec "$0" "$@"', sys.executable, *SERVE]
    proc = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend", "--json", str(out),
                           "--case", "FE-HS-6", "--case-timeout", "1.5", "--", *slow],
                          capture_output=True, text=True, timeout=240)
    doc = json.loads(out.read_text())
    [case] = doc["cases"]
    assert case["outcome"] == "PASS", proc.stdout[-3000:]
    launches = doc["launches"]["launches"]
    # the shared launch measures the refusal window, then one launch per handshake fault
    assert len(launches) == 4, launches
    # a launch whose handshake fault makes the frontend refuse the HELLO never answers one: it is
    # recorded as failed, with no start-up time; every launch that answered took the slow start
    served = [r for r in launches if r["startup_s"] is not None]
    assert len(served) >= 2, launches
    assert all(r["startup_s"] >= SLOW_START_S for r in served), launches
    assert all(r["state"].startswith("failed: ") for r in launches if r["startup_s"] is None), launches
    assert [r["what"] for r in launches[1:]] == ["2 engine(s), judged by the case"] * 3
    assert "launches: 4;" in proc.stdout
