"""The frontend role's small pieces: command template helpers, the coalescing bound,
the catalogue, the scripted engines' utility answers, and the SSE client against a scripted
HTTP server."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from ecp.conformance.frontend.catalog import CASES
from ecp.conformance.frontend import launcher
from ecp.conformance.frontend.launcher import Placeholders, free_port, has_kv_connector, without_kv_connector
from ecp.conformance.frontend.cases._burst import coalescing_bound
from ecp.conformance.frontend.sse import SseStream
from ecp.conformance.launch import fill_template
from ecp.conformance.registry import validate_cases


def test_placeholders_fill_the_vllm_style_command():
    p = Placeholders(handshake_port=41000, http_port=42000, engine_count=2)
    argv = fill_template(["serve", "--data-parallel-rpc-port", "{handshake_port}", "--port", "{http_port}",
                          "-dp", "{engine_count}", "--at", "{handshake_address}", '{"kv_role": "kv_both"}'],
                         p.values())
    assert argv == ["serve", "--data-parallel-rpc-port", "41000", "--port", "42000", "-dp", "2",
                    "--at", "tcp://127.0.0.1:41000", '{"kv_role": "kv_both"}']


def test_ports_for_the_peer_are_drawn_below_the_kernels_ephemeral_range_and_free():
    # A port the kernel numbers itself (a bind to port 0, the local end of a connection) could be
    # taken by another process before the peer binds it; ports below that range cannot.
    low, _ = launcher.ephemeral_range()
    ports = [free_port() for _ in range(20)]
    assert all(launcher.PORT_FLOOR <= p < low for p in ports), ports
    assert len(set(ports)) > 10  # drawn, not a fixed sequence
    for port in ports[:3]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_taken_is_not_drawn_and_without_room_the_kernel_picks(monkeypatch):
    real_low, real_high = launcher.ephemeral_range()
    with socket.socket() as taken, socket.socket() as spare:
        taken.bind(("127.0.0.1", 0))
        spare.bind(("127.0.0.1", 0))
        port, other = taken.getsockname()[1], spare.getsockname()[1]
        spare.close()  # free again: the second draw
        drawn: list[int] = []

        class Draw:
            def randrange(self, a, b):
                drawn.append(port if not drawn else other)
                return drawn[-1]

        monkeypatch.setattr(launcher, "_draw", Draw())
        monkeypatch.setattr(launcher, "ephemeral_range", lambda: (65000, 65535))
        assert free_port() == other and drawn == [port, other]  # the taken one was skipped
    # no room below the range: the kernel's own pick, from its range
    monkeypatch.setattr(launcher, "ephemeral_range", lambda: (launcher.PORT_FLOOR + 10, 65535))
    assert real_low <= free_port() <= real_high


def test_kv_connector_options_are_found_and_removed():
    argv = ["serve", "--kv-connector", "reference", "--dev-mode", "--kv-transfer-config={\"a\": 1}", "--x"]
    assert has_kv_connector(argv)
    assert without_kv_connector(argv) == ["serve", "--dev-mode", "--x"]
    assert not has_kv_connector(["serve", "--dev-mode"])


@pytest.mark.parametrize("argv, rest", [
    (["serve", "--kv-connector", "reference", "--x"], ["serve", "--x"]),
    (["serve", "--kv-connector=reference", "--x"], ["serve", "--x"]),
    (["vllm", "--kv-transfer-config", '{"kv_connector": "NixlConnector"}', "--x"], ["vllm", "--x"]),
    (["vllm", '--kv-transfer-config={"kv_connector": "NixlConnector"}', "--x"], ["vllm", "--x"]),
])
def test_the_two_kv_connector_options_in_both_forms(argv, rest):
    """The exact options the harness knows (docs/conformance.md): each with one value, given as the next
    argument or after '='."""
    assert has_kv_connector(argv) and without_kv_connector(argv) == rest


def test_other_spellings_are_not_a_kv_connector():
    for argv in (["serve", "--kv-connector-extra", "x"], ["serve", "--kv_transfer_config", "{}"],
                 ["serve", "--kv-config", "{}"]):
        assert not has_kv_connector(argv) and without_kv_connector(argv) == argv


def test_every_frontend_case_cites_the_http_clauses_it_relies_on():
    """Every frontend-role case drives the frontend over HTTP: each cites at least one ECP-HTTP clause
    (the run itself checks that the routes it drove are cited: a harness ERROR otherwise)."""
    assert [c.id for c in CASES if not c.http] == []


@pytest.mark.parametrize("k_total, k_engine, bound", [(3, 2, 2), (64, 32, 2), (2000, 1000, 3), (1, 1, 2),
                                                      (5000, 5000, 6)])
def test_coalescing_bound(k_total, k_engine, bound):
    assert coalescing_bound(k_total, k_engine) == bound


def test_catalogue_is_valid_and_frontend_only():
    cases = validate_cases(CASES, "frontend")
    assert all(c.id.startswith("FE-") for c in cases)
    assert {"FE-ABORT-3", "FE-REJECT-1", "FE-UTIL-1", "FE-ROB-1"} <= {c.id for c in cases}


async def _serve_once(response: bytes) -> tuple[asyncio.AbstractServer, int, list[bytes]]:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lengths = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
        length = int(lengths[0]) if lengths else 0
        seen.append(head + await reader.readexactly(length))
        writer.write(response)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def chunked(*pieces: bytes, end: bool = True) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + body + (b"0\r\n\r\n" if end else b""))


def test_default_utility_answers_are_spec_methods_with_their_result_types():
    from ecp.conformance.frontend.script import DEFAULT_UTILITY_ANSWERS, EngineScript
    from ecp.spec.layout.types import value_matches
    from ecp.spec.utility_methods import UTILITY_METHODS

    assert set(DEFAULT_UTILITY_ANSWERS) <= set(UTILITY_METHODS), set(DEFAULT_UTILITY_ANSWERS) - set(UTILITY_METHODS)
    for method, value in DEFAULT_UTILITY_ANSWERS.items():
        assert value_matches(UTILITY_METHODS[method].result, value), (method, value)
        assert EngineScript().answer(method, []) == (None, value)


def test_sse_stream_reads_chunked_events_split_across_chunks():
    async def main():
        event = b'data: {"id": "cmpl-1", "choices": [{"text": "a", "finish_reason": null}]}\n\n'
        last = b'data: {"id": "cmpl-1", "choices": [{"text": "", "finish_reason": "length"}]}\n\n'
        server, port, seen = await _serve_once(chunked(event[:10], event[10:] + last[:5], last[5:],
                                                       b"data: [DONE]\n\n"))
        async with server:
            stream = await SseStream.open("127.0.0.1", port, "/v1/completions", {"stream": True},
                                          {"X-Request-Id": "abc"})
            first = await stream.first_token(5)
            end = await stream.read_to_end(5)
        return stream, first, end, seen
    stream, first, end, seen = asyncio.run(main())
    assert stream.status_code == 200 and stream.response_id == "cmpl-1"
    assert first["choices"][0]["text"] == "a"
    assert end.done and end.finish_reasons == ["length"] and not end.ended_with_error
    assert b"X-Request-Id: abc" in seen[0] and json.loads(seen[0].split(b"\r\n\r\n", 1)[1]) == {"stream": True}


def test_sse_stream_cut_mid_body_ends_with_error_and_error_status_keeps_its_body():
    async def main():
        server, port, _ = await _serve_once(chunked(b'data: {"choices": [{"text": "a"}]}\n\n', end=False))
        async with server:
            stream = await SseStream.open("127.0.0.1", port, "/v1/completions", {})
            cut = await stream.read_to_end(5)
        body = b'{"error": {"message": "no such model"}}'
        server, port, _ = await _serve_once(b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s"
                                            % (len(body), body))
        async with server:
            refused = await SseStream.open("127.0.0.1", port, "/v1/completions", {})
        return cut, refused
    cut, refused = asyncio.run(main())
    assert cut.transport_error and not cut.done and cut.ended_with_error
    assert refused.status_code == 404 and "no such model" in refused.text


def _burst(k, **engines):
    from ecp.conformance.frontend.cases._burst import BurstResult, EngineBurst

    return BurstResult(k, {int(rank[1:]): EngineBurst(**fields) for rank, fields in engines.items()})


def test_burst_judges_accept_exact_ids_and_late_aborts_of_earlier_requests():
    from ecp.conformance.frontend.cases._burst import judge_coalesced, judge_exact_ids

    result = _burst(3, e0=dict(expected={"a", "b"}, finished={"f0"}, earlier={"old"},
                               aborted=["a", "old", "b"], messages=2),
                    e1=dict(expected={"c"}, finished={"f1"}, aborted=["c"], messages=1))
    judge_exact_ids(result)
    judge_coalesced(result)


@pytest.mark.parametrize("aborted, words", [
    (["a", "b", "f0"], "already finished"),          # an ABORT for a request that had finished
    (["a"], "never aborted"),                        # a dropped stream left running
    (["a", "b", "x"], "was not running"),            # an id this engine was never sent (e.g. the other's)
])
def test_burst_exact_ids_judge_catches(aborted, words):
    from ecp.conformance.outcomes import CaseFailure
    from ecp.conformance.frontend.cases._burst import judge_exact_ids

    result = _burst(2, e0=dict(expected={"a", "b"}, finished={"f0"}, aborted=aborted, messages=1))
    with pytest.raises(CaseFailure, match=words):
        judge_exact_ids(result)


def test_burst_coalescing_judge_catches_one_abort_per_request():
    from ecp.conformance.outcomes import CaseFailure
    from ecp.conformance.frontend.cases._burst import judge_coalesced

    ids = [f"r{i}" for i in range(32)]
    ok = _burst(64, e0=dict(expected=set(ids), finished=set(), aborted=ids, messages=2))
    judge_coalesced(ok)
    bad = _burst(64, e0=dict(expected=set(ids), finished=set(), aborted=ids, messages=3))
    with pytest.raises(CaseFailure, match="cost 3 ABORT messages"):
        judge_coalesced(bad)


def test_a_connection_closed_without_a_response_is_a_violation_not_a_harness_error():
    """vLLM's frontend once closed the connection of GET /is_sleeping: that is the peer's doing (FAIL)."""
    from ecp.conformance.frontend.http_driver import HttpDriver
    from ecp.conformance.outcomes import CaseFailure

    async def main():
        server, port, _ = await _serve_once(b"")  # reads the request, closes without a status line
        async with server:
            driver = HttpDriver(f"http://127.0.0.1:{port}", timeout=5.0)
            try:
                with pytest.raises(CaseFailure, match="closed the connection without an HTTP response"):
                    await driver.request("GET", "/is_sleeping")
            finally:
                await driver.aclose()
    asyncio.run(main())


def test_sse_stream_answered_with_garbage_is_a_violation():
    """Bytes that are not HTTP (read by h11) are the frontend's doing: a FAIL, not a harness error."""
    from ecp.conformance.frontend.sse import HttpProtocolError
    from ecp.conformance.outcomes import CaseFailure

    async def main():
        server, port, _ = await _serve_once(b"\x00garbage that is not HTTP\r\n\r\n")
        async with server:
            with pytest.raises(HttpProtocolError, match="not a valid HTTP response") as caught:
                await SseStream.open("127.0.0.1", port, "/v1/completions", {})
        assert isinstance(caught.value, CaseFailure)
    asyncio.run(main())


def test_http_lines_interleave_with_frames_in_the_transcript():
    from ecp.conformance.transcript import Transcript, render

    t = Transcript()
    t.start_case("FE-ABORT-9")
    t.http("sent", 'POST /abort_requests {"request_ids": []}')
    t.record("recv", "engine0/input[0]", [b"\x01", b"\x91\xa1x"], lambda: ["x"])
    t.http("recv", 'HTTP 200 POST /abort_requests: {"status":"aborted"}')
    lines = render(t.case_entries()).splitlines()
    assert lines[1].endswith('--> http POST /abort_requests {"request_ids": []}')
    assert "<-- engine0/input[0]" in lines[2] and lines[5] == "    decoded: ['x']"
    assert lines[6].endswith('<-- http HTTP 200 POST /abort_requests: {"status":"aborted"}')
    assert [e.to_dict()["channel"] for e in t.case_entries()][1:] == ["http", "engine0/input[0]", "http"]
