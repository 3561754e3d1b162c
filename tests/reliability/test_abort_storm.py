"""A seeded short abort storm (``campaigns/abort_storm.py``): 2,000 streams dropped at once."""

from __future__ import annotations

import asyncio
import math

import pytest

from campaigns.abort_storm import storm

pytestmark = pytest.mark.slow


def test_2000_dropped_streams_coalesce_into_few_aborts_and_leave_the_engines_idle_promptly():
    r = asyncio.run(asyncio.wait_for(storm(2000, 2), 90))
    bound = math.ceil(2000 / 1024) + 1
    assert r["abort_message_bound_per_engine"] == bound
    assert set(r["abort_messages_per_engine"]) == {0, 1}
    assert all(1 <= n <= bound for n in r["abort_messages_per_engine"].values()), r
    assert r["ids_aborted"] == 2000 and r["ids_aborted_twice"] == 0 and r["ids_per_message_max"] <= 1024
    assert r["idle_after_last_abort_ms"] is not None and r["idle_after_last_abort_ms"] <= 200, r
