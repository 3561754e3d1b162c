"""What one HTTP request may make ``ecp serve`` hold (reference/frontend/limits.py), and the
abort APIs' answer contract: every named id in exactly one list, whatever runs concurrently."""

from __future__ import annotations

import asyncio

import pytest

from .fakes import FakeClient
from .harness import deployment, run, served, sse_events

from ecp.reference.frontend import limits

ERROR_KEYS = {"message", "type", "param", "code"}


def _is_openai_error(resp, status: int) -> bool:
    body = resp.json()
    return resp.status_code == status and set(body) == {"error"} and set(body["error"]) == ERROR_KEYS


async def _raw(url: str, data: bytes, *, read_timeout: float = 10.0) -> tuple[bytes, bool]:
    """Send ``data`` on a fresh connection; the answer, and whether the server closed the connection."""
    host, port = url.split("//")[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), read_timeout)
        closed = await asyncio.wait_for(reader.read(1), read_timeout) == b""
        return answer, closed
    finally:
        writer.close()


def test_bodies_over_the_limit_get_413_and_the_connection_closes():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            url = str(h.base_url).rstrip("/")
            # a declared length over the generate limit is refused before a byte of the body is read
            head, closed = await _raw(url, (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                            b"application/json\r\nContent-Length: %d\r\n\r\n{" %
                                            (limits.MAX_BODY_BYTES + 1)))
            assert head.startswith(b"HTTP/1.1 413") and b'"code":413' in head and closed

            # the server keeps serving
            ok = await h.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            assert ok.status_code == 200
        assert len(client.added) == 1

    run(body)


def test_a_body_without_a_length_is_read_no_further_than_the_limit():
    """A chunked body: read until it passes the limit, then 413 (the rest is never read)."""
    messages = [{"type": "http.request", "body": b"x" * 1000, "more_body": True} for _ in range(10)]
    taken = []

    async def receive():
        taken.append(messages[len(taken)])
        return taken[-1]

    async def body():
        with pytest.raises(limits.BodyRefused) as info:
            await limits.read_body(receive, 2500, None)
        return info.value

    err = run(body)
    assert err.status == 413 and len(taken) == 3 and err.body()["error"]["code"] == 413


def test_a_body_that_does_not_arrive_in_time_gets_408(monkeypatch):
    monkeypatch.setattr(limits, "BODY_TIMEOUT_S", 0.5)

    async def body():
        async with served(FakeClient()) as (h, fe):
            url = str(h.base_url).rstrip("/")
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            head, closed = await _raw(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            assert head.startswith(b"HTTP/1.1 408") and b'"code":408' in head and closed
            assert loop.time() - t0 < 5
            assert len(fe.index) == 0

    run(body)


def test_too_many_choices_or_abort_ids_are_400_naming_the_parameter():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            n = await h.post("/v1/completions", json={"prompt": "x", "n": limits.MAX_CHOICES + 1})
            product = await h.post("/v1/completions", json={"prompt": ["x"] * 20, "n": limits.MAX_CHOICES // 10})
            ids = [f"id{i}" for i in range(limits.MAX_ABORT_IDS + 1)]
            vllm = await h.post("/abort_requests", json={"request_ids": ids})
            fastdeploy = await h.post("/v1/abort_requests", json={"req_ids": ids})
            neither = await h.post("/v1/abort_requests", json={})
            typed = await h.post("/abort_requests", json={"request_ids": "x"})
        for resp in (n, product, vllm, fastdeploy, neither, typed):
            assert _is_openai_error(resp, 400), resp.text
        assert (n.json()["error"]["param"], product.json()["error"]["param"]) == ("n", "n")
        assert vllm.json()["error"]["param"] == "request_ids" and fastdeploy.json()["error"]["param"] == "req_ids"
        assert neither.json()["error"]["param"] == "req_ids"
        assert client.added == [] and client.explicit_aborts == []

    run(body)


def test_collective_rpc_argument_types_are_400_not_500():
    async def body():
        async with served(FakeClient(), dev_mode=True) as (h, _):
            return [await h.post("/collective_rpc", json=b) for b in (
                {"method": "m", "args": 5}, {"method": "m", "kwargs": [1]}, {"method": "m", "timeout": "soon"},
                {"method": "m", "timeout": -1})]

    for resp, param in zip(run(body), ("args", "kwargs", "timeout", "timeout")):
        assert _is_openai_error(resp, 400) and resp.json()["error"]["param"] == param


def test_duplicate_abort_ids_are_listed_once():
    async def body():
        client = FakeClient(hold_after=2)
        async with served(client) as (h, fe):
            task = asyncio.ensure_future(h.post("/v1/completions", json={"prompt": "x", "max_tokens": 8},
                                                headers={"X-Request-Id": "dup"}))
            while len(fe.index) < 1:
                await asyncio.sleep(0.005)
            answer = (await h.post("/v1/abort_requests", json={"req_ids": ["nope", "dup", "nope", "dup"]})).json()
            await asyncio.wait_for(task, 5)
        assert answer["not_found"] == ["nope"] and len(answer["results"]) == 1
        assert client.explicit_aborts == [[answer["aborted"][0]]]

    run(body)


def _lists(answer: dict, rid: str) -> int:
    """In how many of the answer's lists ``rid`` appears (as a named id or a result's id)."""
    named = [r for r in answer["results"] if rid in (r["request_id"], r["external_id"], r["response_id"],
                                                     r["response_id"].split("-", 1)[1])]
    return (1 if named else 0) + answer["not_found"].count(rid)


@pytest.mark.parametrize("form", ["internal", "base"])
def test_concurrent_aborts_of_one_id_each_list_it_exactly_once(form):
    """8 parallel abort calls naming one live stream, 10 times: each answer lists the id in
    exactly one list, and exactly one answer (the one that aborted it) has its partial result."""

    async def body():
        async with deployment(1, step_time_ms=5) as d:
            h = d.http
            for trial in range(10):
                base = f"race{trial}"
                async with h.stream("POST", "/v1/completions", json={
                        "prompt": "x", "max_tokens": 2000, "ignore_eos": True, "stream": True},
                        headers={"X-Request-Id": base}) as resp:
                    lines = resp.aiter_lines()
                    async for line in lines:
                        if line.startswith("data: "):
                            break  # mid-stream
                    (choice,) = d.frontend.index.all()
                    rid = choice.internal_id if form == "internal" else base
                    routes = [("/v1/abort_requests", {"req_ids": [rid]}), ("/abort_requests", {"request_ids": [rid]})]
                    answers = await asyncio.gather(*(h.post(path, json=payload)
                                                     for path, payload in routes * 4))
                    rest = [line async for line in lines]
                bodies = [a.json() for a in answers]
                assert all(a.status_code == 200 for a in answers)
                assert [_lists(b, rid) for b in bodies] == [1] * 8, bodies
                assert sum(len(b["results"]) for b in bodies) == 1, bodies  # aborted by exactly one call
                events = sse_events("\n".join(rest))
                assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "abort"
            await d.wait_engines_idle()

    run(body, timeout=90)


def test_a_value_the_wire_cannot_carry_is_400_not_500():
    """An integer past 64 bits (in ``seed`` or inside ``kv_transfer_params``) cannot be encoded
    in the ADD: the client refuses it before sending (ECP-FRAME-3) and the answer is a 400."""

    async def body():
        async with deployment(1) as d:
            seed = await d.http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "seed": 10**30})
            kv = await d.http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2,
                                                             "kv_transfer_params": {"x": -10**30}})
            ok = await d.http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            assert len(d.frontend.index) == 0
        for resp in (seed, kv):
            assert _is_openai_error(resp, 400), resp.text
        assert ok.status_code == 200

    run(body)
