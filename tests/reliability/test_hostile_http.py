"""The hostile-HTTP campaign (``campaigns/hostile_http.py``): a short seeded run against a real
``ecp serve``, and a property over the same request generator with hypothesis choosing (and
shrinking) the seeds, against the app in this process."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns import hostile_http as hh

# one xdist worker runs the module, so its module fixture (a served app) starts once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile-http-app")]


def test_a_short_seeded_campaign_meets_every_criterion():
    # dev mode on: the dev routes are generated and served too
    r = asyncio.run(asyncio.wait_for(hh.campaign(1000, seed=7, concurrency=16, bursts_n=2, burst_streams=8, slow=5,
                                                  slow_s=2.0, idle=300, max_seconds=60, dev_mode=True), 120))
    assert r["dev_mode"] and any(path.startswith(("/sleep", "/pause", "/collective_rpc"))
                                 for _, path in hh.route_table(True)), r
    assert r["requests_sent"] == 1000 and r["violations"] == [] and r["status_500"] == 0, r
    assert set(r["statuses"]) <= hh.DOCUMENTED and r["completions"] > 0 and r["streams_ended_once"] > 0, r
    assert r["bursts"]["bursts"] == 2 and r["bursts"]["aborted"] > 0, r
    assert (r["health_after"], r["completion_after"], r["load_after"]) == (200, 200, 0), r
    assert r["engine_alive"] and r["serve_exit_code"] == 0
    base, after = r["serve_fds_baseline_after"]
    assert after <= base, r  # 300 idle, 5 slow and 1,000 closed connections leave no descriptor behind
    assert r["slow_idle"]["idle_connections"] == 300 and r["passed"], r


class _App:
    """The app over a fake client, served from a thread of its own, for hypothesis's examples."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> str:
        from frontend.fakes import FakeClient
        from frontend.harness import served

        self._cm = served(FakeClient(max_model_len=256))
        h, _ = await self._cm.__aenter__()
        return str(h.base_url).rstrip("/")

    def send(self, data: bytes, half: bool) -> tuple[int, dict, bytes]:
        host, port = self.url.split("//")[1].rsplit(":", 1)
        return asyncio.run_coroutine_threadsafe(hh.exchange(host, int(port), data, half_close=half),
                                                self.loop).result(hh.IO_TIMEOUT_S + 5)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._cm.__aexit__(None, None, None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def app():
    served_app = _App()
    yield served_app
    served_app.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_every_generated_request_gets_a_documented_answer(app, seed):
    tally = hh.Tally()
    data, half, label = hh.one_request(random.Random(seed), hh.route_table())
    try:
        status, headers, body = app.send(data, half)
    except (ConnectionError, asyncio.IncompleteReadError):
        status, headers, body = 0, {}, b""
    if status == 0:
        assert half, f"{label}: closed without an answer"  # only a half-closed client loses its answer
        return
    tally.judge(label, status, headers, body)
    assert tally.violations == [] and 500 not in tally.statuses
