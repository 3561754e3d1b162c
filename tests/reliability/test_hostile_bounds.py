"""Short seeded variants of ``campaigns/hostile_bounds.py``: the producer allow-list under
address-choosing requests with decoys listening, slow-header connections beside a normal client,
and the monitor fed more engine identities than its bound."""

from __future__ import annotations

import asyncio

import pytest

from campaigns import hostile_bounds as hb

pytestmark = pytest.mark.slow


def test_address_choosing_requests_connect_nowhere():
    r = asyncio.run(asyncio.wait_for(hb.addresses(60, seed=1), 90))
    assert r["decoy_connections"] == 0 and r["wrong_answers"] == [], r
    assert set(r["forms"]) == set(hb.Decoys.FORMS), r  # every form drawn at least once with this seed
    assert r["refused_by_frontend"] == 30 and r["refused_by_engine"] == 30, r
    assert r["allowed_answer"] == 200 and r["allowed_notice"] and r["passed"], r


def test_slow_header_connections_are_bounded_and_a_normal_client_is_served():
    r = asyncio.run(asyncio.wait_for(hb.slow_headers(100, seed=1, seconds=2.5, header_timeout_s=1.0,
                                                     unloaded_requests=30, per_client=64), 90))
    assert r["loaded"]["statuses"] == {"200": r["loaded"]["requests"]} and r["loaded"]["requests"] > 0, r
    assert r["slow_outcomes"].get("408", 0) > 0 and r["slow_outcomes"].get("503", 0) > 0, r  # deadline and cap
    assert set(r["slow_outcomes"]) <= {"408", "503"}, r
    base, after = r["serve_fds_baseline_after"]
    assert after <= base and r["passed"], r


def test_the_monitor_fed_more_identities_than_its_bound_relays_only_the_bound():
    r = hb.monitor_identities(1024, seed=1, max_engines=8, batch=128)
    assert r["relayed_identities"] == 8 and r["refusal_log_lines"] == 1 and r["relayed_after_flood"], r
    base, after = r["monitor_fds_at_bound_after"]
    assert after <= base + 32 and r["passed"], r
