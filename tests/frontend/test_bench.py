"""``ecp bench serve``: the load generator measures what it claims."""

from __future__ import annotations

import argparse

import pytest

from ecp.reference.frontend.bench import format_report, main, percentile, run_bench

from .fakes import FakeClient
from .harness import run, served


def test_percentile_interpolates_like_numpy():
    values = [float(v) for v in range(1, 101)]
    # numpy.percentile(range(1, 101), [50, 90, 99]) == [50.5, 90.1, 99.01]
    got = (percentile(values, 50), percentile(values, 90), percentile(values, 99))
    assert got == pytest.approx((50.5, 90.1, 99.01))
    assert percentile([3.0, 1.0], 50) == 2.0 and percentile([], 50) is None and percentile([7.0], 99) == 7.0


def test_bench_reports_throughput_tokens_ttft_and_itl_against_a_server():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            report = await run_bench(str(h.base_url).rstrip("/"), model=None, concurrency=4, num_requests=10,
                                     prompt_len=20, max_tokens=6, timeout=20, progress=False,
                                     extra_body={"ignore_eos": None, "seed": 1})
        assert report["completed"] == 10 and report["failed"] == 0 and report["model"] == "ecp-synthetic"
        assert report["output_tokens"] == 60  # from the usage chunk
        assert report["connections"] == 4  # one kept-alive connection per request in flight, reused
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
        assert report["connections"] == 2  # an error answer with a body does not end the connection
        assert any(e.startswith("HTTP 404") and "no-such-model" in e for e in report["errors"])
    run(body)


def test_one_connection_reads_consecutive_responses_split_anywhere():
    """Chunked SSE responses on one kept-alive connection, cut at awkward places: every event
    of each response reaches its own callback, the trailer's CRLF arriving late is skipped."""
    import asyncio

    from ecp.reference.frontend.bench_http import _Stream

    def response(n: int) -> bytes:
        body = b"".join(b"data: {\"i\": %d}\n\n" % i for i in range(n)) + b"data: [DONE]\n\n"
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7]) for i in range(0, len(body), 7))
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n"

    async def body():
        loop = asyncio.get_running_loop()
        proto = _Stream()
        for n, cut in ((3, 5), (4, 11)):
            events: list[bytes] = []
            done = loop.create_future()
            proto.expect(lambda data, t: events.append(data), done)
            wire = response(n) + b"\r\n"
            for i in range(0, len(wire), cut):
                proto.data_received(wire[i:i + cut])
            assert done.done() and done.exception() is None
            assert events == [b'{"i": %d}' % i for i in range(n)] + [b"[DONE]"]
            assert proto.status == 200 and proto.keep_alive
    asyncio.run(body())
