"""``ecp serve``'s app against real reference engines (thread mode) through the real client."""

from __future__ import annotations

import asyncio
import math

from .harness import deployment, run, sse_events

PROMPT = "The reference frontend streams tokens. "


def test_streaming_and_non_streaming_completions_and_chat():
    async def body():
        async with deployment(2) as d:
            r = await d.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12, "seed": 5})
            s = await d.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12, "seed": 5,
                                                           "stream": True, "stream_options": {"include_usage": True}})
            c = await d.http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True})
            pinned = await d.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2},
                                       headers={"X-data-parallel-rank": "1"})
            bad_rank = await d.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2},
                                         headers={"X-data-parallel-rank": "7"})
            await d.wait_engines_idle()
        out = r.json()
        assert r.status_code == 200 and out["choices"][0]["finish_reason"] == "length"
        assert out["usage"]["completion_tokens"] == 12
        events = sse_events(s.text)
        assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] == 12
        # Same seed, same tokens: the streamed text equals the non-streamed text.
        assert "".join(e["choices"][0]["text"] for e in events[:-2]) == out["choices"][0]["text"]
        chat = sse_events(c.text)
        assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert chat[-2]["choices"][0]["finish_reason"] == "length"
        assert pinned.status_code == 200 and bad_rank.status_code == 400
    run(body)


def test_stop_string_cuts_text_and_aborts_the_engine_request():
    async def body():
        async with deployment(1, step_time_ms=5) as d:  # slow enough to still be running at the match
            full = (await d.http.post("/v1/completions", json={
                "prompt": PROMPT, "max_tokens": 40, "seed": 11, "temperature": 0.5})).json()["choices"][0]["text"]
            stop = full[20:23]
            cut = full.find(stop)
            before = d.client.stats.aborts_sent
            r = (await d.http.post("/v1/completions", json={
                "prompt": PROMPT, "max_tokens": 40, "seed": 11, "temperature": 0.5, "stop": [stop]})).json()
            await d.wait_engines_idle()
            aborted = d.client.stats.aborts_sent - before
        choice = r["choices"][0]
        assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == (full[:cut], "stop", stop)
        assert aborted == 1  # the engine request was auto-aborted (cause stop_string_matched)
    run(body)


async def _open_streams(d, n: int, max_tokens: int, first_chunks: int = 0, prefix: str = "s"):
    """Start ``n`` SSE streams; return (tasks, per-stream events, an event set when each saw
    ``first_chunks`` chunks)."""
    events: dict[str, list] = {}
    ready: dict[str, asyncio.Event] = {}

    async def one(rid: str) -> list:
        got: list = []
        events[rid] = got
        async with d.http.stream("POST", "/v1/completions", json={
                "prompt": PROMPT, "max_tokens": max_tokens, "stream": True}, headers={"X-Request-Id": rid}) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    got.append(sse_events(line)[0])
                    if len(got) >= first_chunks:
                        ready[rid].set()
        return got

    rids = [f"{prefix}{i}" for i in range(n)]
    for rid in rids:
        ready[rid] = asyncio.Event()
    tasks = {rid: asyncio.ensure_future(one(rid)) for rid in rids}
    return tasks, events, ready


def test_disconnect_of_one_and_of_200_streams_aborts_at_the_engines_coalesced():
    async def body():
        async with deployment(2, step_time_ms=20, max_num_seqs=4) as d:
            tasks, _, ready = await _open_streams(d, 1, 1000, first_chunks=2, prefix="one")
            await asyncio.wait_for(ready["one0"].wait(), 10)
            tasks["one0"].cancel()
            states = await d.wait_engines_idle()
            assert d.client.stats.aborts_sent == 1

            n = 200
            tasks, _, _ = await _open_streams(d, n, 1000, prefix="many")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while sum(d.client.in_flight().values()) < n:  # every request admitted at an engine
                assert loop.time() < deadline, d.client.in_flight()
                await asyncio.sleep(0.02)
            messages_before, ids_before = d.client.stats.abort_messages, d.client.stats.aborts_sent
            for t in tasks.values():
                t.cancel()  # all clients go away at once
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            states = await d.wait_engines_idle()
            assert sum(d.client.in_flight().values()) == 0
            messages = d.client.stats.abort_messages - messages_before
            assert d.client.stats.aborts_sent - ids_before == n
            assert len(d.frontend.index) == 0
        assert all(s["num_running"] == s["num_waiting"] == 0 for s in states.values())
        assert messages <= 2 * math.ceil(n / 1024), messages  # one ABORT per engine per drain
    run(body, timeout=60)


def test_abort_apis_by_id_and_for_all_return_partial_results_and_end_streams():
    async def body():
        async with deployment(2, step_time_ms=10) as d:
            tasks, events, ready = await _open_streams(d, 4, 1000, first_chunks=2, prefix="ab")
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready.values())), 15)
            by_base = (await d.http.post("/abort_requests", json={"request_ids": ["ab0", "nope"]})).json()
            by_resp = (await d.http.post("/v1/abort_requests", json={"req_ids": ["cmpl-ab1"]})).json()
            by_ext = (await d.http.post("/v1/abort_requests", json={"req_ids": ["cmpl-ab2-0"]})).json()
            all_ = (await d.http.post("/v1/abort_requests", json={"abort_all": True})).json()
            done = {rid: await asyncio.wait_for(t, 10) for rid, t in tasks.items()}
            await d.wait_engines_idle()
        assert by_base["aborted"] == 1 and by_base["not_found"] == ["nope"]
        results = {"ab0": by_base["results"], "ab1": by_resp["results"], "ab2": by_ext["results"],
                   "ab3": all_["results"]}
        for rid, (part,) in results.items():
            stream = done[rid]
            assert stream[-1] == "[DONE]" and stream[-2]["choices"][0]["finish_reason"] == "abort"
            # The partial result is exactly what the stream showed.
            assert part["text"] == "".join(e["choices"][0]["text"] for e in stream[:-1])
            assert part["num_tokens"] >= 2 and part["finish_reason"] == "abort"
            assert part["response_id"] == f"cmpl-{rid}"
    run(body, timeout=60)


def test_dev_endpoints_across_two_engines():
    async def body():
        async with deployment(2, dev_mode=True) as d:
            h = d.http
            assert (await h.get("/is_sleeping")).json() == {"is_sleeping": False}
            assert (await h.post("/sleep", params={"level": 1, "mode": "abort"})).json()["status"] == "sleeping"
            slept = (await h.get("/is_sleeping")).json()
            woke = (await h.post("/wake_up")).json()
            awake = (await h.get("/is_sleeping")).json()
            reset = (await h.post("/reset_prefix_cache")).json()
            paused = [(await h.post("/pause", params={"mode": "keep"})).json(), (await h.get("/is_paused")).json(),
                      (await h.post("/resume")).json(), (await h.get("/is_paused")).json()]
            rpc = await h.post("/collective_rpc", json={"method": "no_such_method"})
            known = await h.post("/collective_rpc", json={"method": "ping"})
        assert slept == {"is_sleeping": True} and woke["status"] == "awake" and awake == {"is_sleeping": False}
        assert reset == {"success": True, "engines": {"0": True, "1": True}}
        assert paused == [{"status": "paused"}, {"is_paused": True}, {"status": "resumed"}, {"is_paused": False}]
        # an unknown worker method is the client's mistake: a 400 naming it, not a server error
        assert rpc.status_code == 400, rpc.text
        err = rpc.json()["error"]
        assert err["param"] == "method" and "no_such_method" in err["message"], err
        assert known.json() == {"results": ["pong", "pong"]}

        bad = {1: {"bugs": ["inconsistent-is-sleeping", "reset-prefix-cache-fails"]}}
        async with deployment(2, per_rank=bad, dev_mode=True) as d:
            disagree = await d.http.get("/is_sleeping")
            failed = (await d.http.post("/reset_prefix_cache")).json()
        assert disagree.status_code == 500
        assert disagree.json()["error"]["values"] == {"0": False, "1": True}
        assert failed == {"success": False, "engines": {"0": True, "1": False}}  # the failing engine named
    run(body, timeout=60)


def test_rejection_notice_reaches_the_producer_and_frees_its_pinned_blocks():
    async def body():
        import tempfile

        from ecp.reference.client import ClientConfig, EngineCoreClient
        from ecp.reference.engine import launch
        from ecp.spec import EngineCoreRequest, SamplingParams

        with tempfile.TemporaryDirectory(prefix="ecp-pd-") as tmp:
            side = f"ipc://{tmp}/side"
            producer_client = EngineCoreClient(ClientConfig(handshake_address=f"ipc://{tmp}/p-hs",
                                                            handshake_timeout_s=20, ready_timeout_s=20))
            await producer_client.bind()
            producer = launch(producer_client.handshake_address, 1, 0, mode="thread", kv_connector="reference",
                              kv_role="producer", kv_side_channel=side, log_level="WARNING")
            try:
                await producer_client.wait_ready()
                stream = await producer_client.add(EngineCoreRequest(
                    "pre-1", list(range(20, 60)), None,
                    SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": {"do_remote_decode": True}}),
                    None, 0.0, None, None, None))
                outs = [o async for o in stream]
                params = outs[-1].kv_transfer_params
                pinned = (await producer_client.call_utility("get_kv_connector_stats"))[0]
                assert params["do_remote_prefill"] and pinned["pinned_blocks"] > 0

                # ECP-SEC-4: the consumer may notify the producer's side channel, nothing else
                async with deployment(1, kv_connector="reference", kv_role="consumer", kv_producers=[side]) as d:
                    r = await d.http.post("/v1/completions", json={
                        "prompt": PROMPT, "temperature": 9.0, "kv_transfer_params": params},
                        headers={"X-Request-Id": "decode-1"})
                    assert r.status_code == 400  # the HTTP client sees only its own error
                    assert d.client.stats.rejection_notifications == 1
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + 10
                    while True:
                        stats = (await producer_client.call_utility("get_kv_connector_stats"))[0]
                        if stats["pinned_blocks"] == 0:
                            break
                        assert loop.time() < deadline, stats
                        await asyncio.sleep(0.02)
                # Freed by the notice (counted in blocks), not by the 480 s lease expiry.
                assert stats["freed_by_notice"] == pinned["pinned_blocks"] == stats["freed_blocks_total"]
                assert stats["freed_by_expiry"] == 0
            finally:
                await producer_client.shutdown()
                await asyncio.to_thread(producer.stop, 5.0)
    run(body, timeout=60)


def test_engine_death_turns_health_503_and_ends_open_streams_with_an_error_event():
    async def body():
        async with deployment(1, step_time_ms=10, bugs=(), per_rank={0: {"bugs": ["crash-on-bad-frame"]}}) as d:
            assert (await d.http.get("/health")).status_code == 200
            tasks, events, ready = await _open_streams(d, 1, 1000, first_chunks=2, prefix="dead")
            await asyncio.wait_for(ready["dead0"].wait(), 10)
            # A malformed input frame makes this (deliberately buggy) engine die with ENGINE_CORE_DEAD.
            await d.client._put(0, [b"\x09", b"\xc1"])
            stream = await asyncio.wait_for(tasks["dead0"], 10)
            health = await d.http.get("/health", follow_redirects=False)
            after = await d.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
        assert stream[-1] == "[DONE]" and "error" in stream[-2]
        assert health.status_code == 503 and after.status_code == 503
    run(body, timeout=60)


def test_aborting_while_requests_finish_never_raises():
    async def body():
        async with deployment(2) as d:
            async def short(i: int):
                return await d.http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3 + i % 5,
                                                                  "stream": i % 2 == 0})

            requests = [asyncio.ensure_future(short(i)) for i in range(60)]
            aborts = []
            for i in range(30):
                route, payload = (("/v1/abort_requests", {"abort_all": True}) if i % 2
                                  else ("/abort_requests", {}))
                aborts.append(await d.http.post(route, json=payload))
            responses = await asyncio.gather(*requests)
            await d.wait_engines_idle()
            assert len(d.frontend.index) == 0 and sum(d.client.in_flight().values()) == 0
        assert all(a.status_code == 200 for a in aborts)
        for r in responses:
            assert r.status_code == 200
            if r.headers["content-type"].startswith("text/event-stream"):
                events = sse_events(r.text)
                assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] in ("length", "abort")
            else:
                assert r.json()["choices"][0]["finish_reason"] in ("length", "abort")
    run(body, timeout=60)
