"""``ecp bench serve``: the load generator measures what it claims."""

from __future__ import annotations

import argparse

import pytest

from ecp.reference.frontend.bench import format_report, main, percentile, run_bench

from .fakes import FakeClient
from .harness import run, served


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99)) == (50.0, 90.0, 99.0)
    assert percentile([], 50) is None and percentile([7.0], 99) == 7.0


def test_bench_reports_throughput_tokens_ttft_and_itl_against_a_server():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            report = await run_bench(str(h.base_url).rstrip("/"), model=None, concurrency=4, num_requests=10,
                                     prompt_len=20, max_tokens=6, timeout=20, progress=False,
                                     extra_body={"ignore_eos": None, "seed": 1})
        assert report["completed"] == 10 and report["failed"] == 0 and report["model"] == "ecp-synthetic"
        assert report["output_tokens"] == 60  # from the usage chunk
        assert report["request_throughput"] > 0 and report["output_tokens_per_s"] > 0
        assert all(v is not None for v in report["ttft_ms"].values())
        assert all(v is not None for v in report["itl_ms"].values())
        assert all(not r.sampling_params.ignore_eos and r.sampling_params.seed == 1 for r in client.added)
        assert "req/s" in format_report(report)
    run(body)


def test_bench_exits_2_when_the_server_is_unreachable(capsys):
    args = argparse.Namespace(url="http://127.0.0.1:9", model=None, concurrency=1, num_requests=1, prompt_len=8,
                              max_tokens=2, timeout=2.0, json=False, no_progress=True, extra_body=None)
    assert main(args) == 2
    assert "ecp bench serve" in capsys.readouterr().err


def test_bench_serve_help_says_what_it_measures(capsys):
    from ecp.spec.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "serve", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "TTFT" in text and "requests in flight at once" in text and "Exit 0" in text


def test_bench_counts_an_http_error_as_a_failed_request_with_its_status():
    async def body():
        async with served(FakeClient()) as (h, _):
            report = await run_bench(str(h.base_url).rstrip("/"), model="no-such-model", concurrency=2,
                                     num_requests=3, prompt_len=8, max_tokens=2, timeout=20, progress=False)
        assert report["completed"] == 0 and report["failed"] == 3
        assert any(e.startswith("HTTP 404") and "no-such-model" in e for e in report["errors"])
    run(body)
