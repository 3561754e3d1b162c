"""A seeded short soak (``campaigns/soak.py``): steady load, every request's terminal counted."""

from __future__ import annotations

import asyncio

import pytest

from campaigns.soak import soak

pytestmark = pytest.mark.slow


def test_short_soak_ends_every_request_exactly_once():
    r = asyncio.run(asyncio.wait_for(soak(4.0, engines=2, concurrency=32, sample_s=1.0, seed=7), 90))
    assert r["requests"] > 500 and r["ended_once"] == r["requests"], r["terminals_by_kind"]
    assert r["lost"] == 0 and r["duplicated"] == 0
    assert not any(k.startswith("error:") for k in r["terminals_by_kind"]), r["terminals_by_kind"]
    # the load really dropped and aborted streams, not only ran them to the end
    assert r["terminals_by_kind"].get("dropped", 0) > 0 and r["terminals_by_kind"].get("abort", 0) > 0
    assert r["in_flight_at_end"] == 0 and r["engines_idle_at_end"]
    # bounded, not leaking: a dropped stream frees its slot at once while its abort is still on the
    # way to the engine, so the client may briefly hold more than the load's 32
    assert len(r["samples"]) >= 4 and all(s["client_in_flight"] <= 2 * 32 for s in r["samples"])
