"""benchmarks/engine_throughput.py runs end to end, one engine and two (a tiny variant; no timing is asserted)."""

from __future__ import annotations


import pytest

from benchmarks import engine_throughput


@pytest.mark.parametrize("engines", [1, 2])
def test_requests_finish_and_every_engine_steps(engines, tmp_path):
    r = engine_throughput._drive(8, 0.5, str(tmp_path), engines)
    assert r["engines"] == engines and r["output_tokens"] > 0 and r["requests_per_s"] > 0
    assert r["steps_per_s"] > 0 and r["engines_counted"] == engines  # each answered both step-counter calls
