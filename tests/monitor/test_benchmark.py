"""The short seeded variant of ``python -m benchmarks.monitor_latency``: it runs all three ways and the
monitor relays (and judges conforming) every message. Figures are not asserted."""

from __future__ import annotations

import pytest

from benchmarks import monitor_latency as bench

pytestmark = pytest.mark.slow


def test_monitor_latency_benchmark_short_run():
    summary = bench.main(["--requests", "300", "--idle-requests", "50", "--window", "16", "--seed", "1", "--json"])
    rows = {r["way"]: r for r in summary["rows"]}
    assert list(rows) == ["direct", "monitor-codec", "monitor-machines"]
    for way in ("monitor-codec", "monitor-machines"):
        r = rows[way]
        assert r["violations"] == 0
        # handshake (4) + warm-up, idle and loaded requests (2 messages each) + the stop ABORT
        assert r["relayed"] == 4 + 2 * (300 + 50 + 300) + 1
        assert r["messages_per_s"] > 0 and r["throughput_vs_direct"] > 0
