"""HTTP behaviour of ``ecp serve`` against an in-memory client (fakes.FakeClient).

These pin the HTTP layer: OpenAI shapes, SSE, stop strings, the abort APIs,
disconnects, health, dev routes and the rejection-notice gating. The same
behaviours run end to end against real reference engines in test_e2e.py.
"""

from __future__ import annotations

import asyncio

from ecp.spec import RequestError, RequestOutputKind

from .fakes import FakeClient
from .harness import run, served, sse_events


def test_completion_non_streaming_shape_usage_and_engine_request():
    async def body():
        client = FakeClient(text="hello world. ")
        async with served(client) as (h, _):
            r = await h.post("/v1/completions", json={"prompt": "hi", "max_tokens": 5, "temperature": 0,
                                                      "seed": 3, "top_k": 4, "min_tokens": 1,
                                                      "stop_token_ids": [9], "ignore_eos": True},
                             headers={"X-Request-Id": "abc", "X-data-parallel-rank": "1"})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["id"] == "cmpl-abc" and out["object"] == "text_completion"
        assert out["choices"][0]["text"] == "hello" and out["choices"][0]["finish_reason"] == "length"
        assert out["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
        (req,) = client.added
        assert req.request_id.startswith("cmpl-abc-0-") and req.external_req_id == "cmpl-abc-0"
        assert req.data_parallel_rank == 1
        sp = req.sampling_params
        assert (sp.max_tokens, sp.temperature, sp.seed, sp.top_k, sp.min_tokens) == (5, 0.0, 3, 4, 1)
        assert sp.ignore_eos and sp.stop_token_ids == [9] and sp.all_stop_token_ids == {2, 9}
        assert sp.output_kind == RequestOutputKind.FINAL_ONLY
    run(body)


def test_body_request_id_loses_to_header_and_chat_ids():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            r = await h.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "request_id": "body-id"})
            r2 = await h.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "request_id": "body-id"},
                headers={"X-Request-Id": "hdr"})
        assert r.json()["id"] == "chatcmpl-body-id" and r2.json()["id"] == "chatcmpl-hdr"
        assert r.json()["choices"][0]["message"] == {"role": "assistant", "content": "hel"}
        assert client.added[0].external_req_id == "chatcmpl-body-id"
        assert client.added[1].request_id.startswith("chatcmpl-hdr-")
    run(body)


def test_streaming_sse_chunks_usage_and_done():
    async def body():
        client = FakeClient(text="abcdef")
        async with served(client) as (h, _):
            r = await h.post("/v1/completions", json={"prompt": "x", "max_tokens": 4, "stream": True,
                                                      "stream_options": {"include_usage": True}})
        ev = sse_events(r.text)
        assert r.headers["content-type"].startswith("text/event-stream")
        assert ev[-1] == "[DONE]"
        chunks = ev[:-2]
        assert "".join(c["choices"][0]["text"] for c in chunks) == "abcd"
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert ev[-2]["usage"]["completion_tokens"] == 4 and ev[-2]["choices"] == []
        assert client.added[0].sampling_params.output_kind == RequestOutputKind.DELTA
    run(body)


def test_n_and_multiple_prompts_fan_out_to_separate_engine_requests():
    async def body():
        client = FakeClient(text="xy")
        async with served(client) as (h, _):
            r = await h.post("/v1/completions", json={"prompt": ["a", "b"], "n": 2, "max_tokens": 2, "seed": 10})
        out = r.json()
        assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
        assert {a.external_req_id for a in client.added} == {"cmpl-" + out["id"][5:] + "-0",
                                                           "cmpl-" + out["id"][5:] + "-1"}
        assert sorted(a.sampling_params.seed for a in client.added) == [10, 10, 11, 11]
        assert len({a.request_id for a in client.added}) == 4
    run(body)


def test_stop_string_ends_the_choice_and_auto_aborts_with_its_cause():
    async def body():
        client = FakeClient(text="hello world. ")
        async with served(client) as (h, fe):
            r = await h.post("/v1/completions", json={"prompt": "x", "max_tokens": 12, "stop": ["o w"]})
            s = await h.post("/v1/completions", json={"prompt": "x", "max_tokens": 12, "stop": "wor",
                                                      "stream": True, "include_stop_str_in_output": True})
            await asyncio.wait_for(client.auto_abort_event.wait(), 5)
            await fe.wait_background()
            metrics = (await h.get("/metrics")).text
        c = r.json()["choices"][0]
        assert (c["text"], c["finish_reason"], c["stop_reason"]) == ("hell", "stop", "o w")
        chunks = sse_events(s.text)[:-1]
        assert "".join(x["choices"][0]["text"] for x in chunks) == "hello wor"
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert [cause for _, cause in client.auto_aborts] == ["stop_string_matched"] * 2
        assert 'ecp:aborted_requests_total{cause="stop_string_matched",model_name="ecp-synthetic"} 2.0' in metrics
    run(body)


def test_validation_errors_are_openai_style_with_status():
    async def body():
        client = FakeClient(max_model_len=64)
        async with served(client) as (h, _):
            cases = {
                "bad json": (await h.post("/v1/completions", content=b"{nope")),
                "type": (await h.post("/v1/completions", json={"prompt": "x", "max_tokens": "many"})),
                "range": (await h.post("/v1/completions", json={"prompt": "x", "temperature": 9})),
                "model": (await h.post("/v1/completions", json={"prompt": "x", "model": "other"})),
                "too long": (await h.post("/v1/completions", json={"prompt": "x" * 60, "max_tokens": 10})),
                "rank": (await h.post("/v1/completions", json={"prompt": "x"},
                                      headers={"X-data-parallel-rank": "two"})),
            }
        statuses = {k: v.status_code for k, v in cases.items()}
        assert statuses == {"bad json": 400, "type": 400, "range": 400, "model": 404, "too long": 400, "rank": 400}
        assert "$.max_tokens" in cases["type"].json()["error"]["message"]
        assert "maximum context length is 64" in cases["too long"].json()["error"]["message"]
        assert all(set(v.json()["error"]) >= {"message", "type", "param", "code"} for v in cases.values())
        assert client.added == []
    run(body)


def test_abort_apis_by_every_id_form_and_for_all_with_partial_results():
    async def body():
        client = FakeClient(text="abcdefgh", hold_after=3)
        async with served(client) as (h, fe):
            async def stream(rid):
                async with h.stream("POST", "/v1/completions", json={"prompt": "x", "max_tokens": 8,
                                                                     "stream": True},
                                    headers={"X-Request-Id": rid}) as resp:
                    return sse_events((await resp.aread()).decode())

            tasks = {rid: asyncio.ensure_future(stream(rid)) for rid in ("r1", "r2", "r3", "r4")}
            while len(client.added) < 4 or any(len(c.token_ids) < 3 for c in fe.index.all()):
                await asyncio.sleep(0.005)
            r_base = (await h.post("/abort_requests", json={"request_ids": ["r1", "unknown"]})).json()
            r_resp = (await h.post("/v1/abort_requests", json={"req_ids": ["cmpl-r2"]})).json()
            r_ext = (await h.post("/v1/abort_requests", json={"req_ids": ["cmpl-r3-0"]})).json()
            r_all = (await h.post("/abort_requests", json={})).json()
            again = (await h.post("/v1/abort_requests", json={"abort_all": True})).json()
            bad = await h.post("/v1/abort_requests", json={})
            r_inference = (await h.post("/inference/v1/abort_requests", json={"request_ids": ["nope"]})).json()
            results = {rid: await asyncio.wait_for(t, 5) for rid, t in tasks.items()}
        assert r_base["status"] == "aborted" and r_base["aborted"] == 1 and r_base["not_found"] == ["unknown"]
        for resp in (r_base, r_resp, r_ext, r_all):
            (part,) = resp["results"]
            assert part["text"] == "abc" and part["num_tokens"] == 3 and part["finish_reason"] == "abort"
        assert r_resp["aborted"] == [r_resp["results"][0]["request_id"]]
        assert r_ext["results"][0]["external_id"] == "cmpl-r3-0"
        assert r_all["results"][0]["response_id"] == "cmpl-r4"
        assert again == {"aborted": [], "results": [], "not_found": []}
        assert bad.status_code == 400 and bad.json() == {"error": {
            "message": "must provide abort_all=true or req_ids", "type": "invalid_request_error",
            "param": "req_ids", "code": 400}}
        assert r_inference["aborted"] == 0 and r_inference["not_found"] == ["nope"]
        for events in results.values():
            assert events[-1] == "[DONE]"
            assert events[-2]["choices"][0]["finish_reason"] == "abort"
            assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "abc"
        assert len(client.explicit_aborts) == 4 and client.auto_aborts == []
    run(body)


def test_stream_disconnect_auto_aborts_through_the_client():
    async def body():
        client = FakeClient(hold_after=2)
        async with served(client) as (h, fe):
            async with h.stream("POST", "/v1/completions", json={"prompt": "x", "max_tokens": 8, "stream": True},
                                headers={"X-Request-Id": "gone"}) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        break  # first chunk seen; leave without reading the rest
            await asyncio.wait_for(client.auto_abort_event.wait(), 5)
            assert len(fe.index) == 0
            # A non-streaming request whose client goes away is aborted the same way.
            client.auto_abort_event.clear()
            task = asyncio.ensure_future(h.post("/v1/completions", json={"prompt": "x", "max_tokens": 8},
                                                headers={"X-Request-Id": "gone2"}))
            while len(client.added) < 2:
                await asyncio.sleep(0.005)
            task.cancel()
            await asyncio.wait_for(client.auto_abort_event.wait(), 5)
        assert [(rid.split("-")[1], cause) for rid, cause in client.auto_aborts] == [
            ("gone", "dropped_stream"), ("gone2", "dropped_stream")]
        assert client.explicit_aborts == []
    run(body)


def test_health_turns_503_on_engine_death_and_open_streams_get_an_error_event():
    async def body():
        client = FakeClient(hold_after=2)
        async with served(client) as (h, fe):
            assert (await h.get("/health")).status_code == 200
            async with h.stream("POST", "/v1/completions", json={"prompt": "x", "max_tokens": 8,
                                                                 "stream": True}) as resp:
                lines = resp.aiter_lines()
                async for line in lines:
                    if line.startswith("data: "):
                        break
                client.die()
                rest = [line async for line in lines]
            health = await h.get("/health", follow_redirects=False)
            after = await h.post("/v1/completions", json={"prompt": "x"})
            abort = await h.post("/abort_requests", json={})
        events = sse_events("\n".join(rest))
        assert events[-1] == "[DONE]" and "error" in events[-2]
        assert health.status_code == 503 and "error" in health.json()
        assert after.status_code == 503
        assert abort.status_code == 200 and abort.json()["aborted"] == 0  # nothing left in flight
    run(body)


def test_a_stream_that_fails_before_its_first_token_is_an_http_error_not_a_200():
    async def body():
        client = FakeClient(hold_after=0)  # admitted, then nothing
        async with served(client) as (h, _):
            request = asyncio.ensure_future(h.post("/v1/completions",
                                                   json={"prompt": "x", "max_tokens": 8, "stream": True}))
            for _ in range(400):  # until the request is in flight (bounded: 2 s)
                if client.added:
                    break
                await asyncio.sleep(0.005)
            client.die()
            resp = await asyncio.wait_for(request, 10)
        assert resp.status_code == 503 and "error" in resp.json(), resp.text
    run(body)


def test_info_routes_and_dev_routes_404_without_dev_mode():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            models = (await h.get("/v1/models")).json()
            version = (await h.get("/version")).json()
            load = (await h.get("/load")).json()
            metrics = await h.get("/metrics")
            dev = [(await h.request(m, p)).status_code for m, p in
                   [("GET", "/is_sleeping"), ("POST", "/sleep"), ("POST", "/wake_up"),
                    ("POST", "/reset_prefix_cache"), ("GET", "/is_paused"), ("POST", "/collective_rpc")]]
            unknown = await h.get("/no/such/route")
            wrong_method = await h.get("/v1/completions")
        assert models["data"][0]["id"] == "ecp-synthetic" and models["data"][0]["max_model_len"] == 256
        assert version["version"] == "0.33.0"
        assert load == {"server_load": 0}
        assert "vllm:time_to_first_token_seconds_bucket" in metrics.text
        assert "vllm:num_requests_running" in metrics.text
        assert dev == [404] * 6
        # unknown routes and wrong methods answer OpenAI-style JSON errors too
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == 404 and "/no/such/route" in unknown.json()["error"]["message"]
        assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == 405
        assert "POST" in wrong_method.headers["allow"]
    run(body)


def test_dev_routes_sleep_wake_consensus_and_reset():
    async def body():
        client = FakeClient()
        async with served(client, dev_mode=True) as (h, _):
            assert (await h.get("/is_sleeping")).json() == {"is_sleeping": False}
            s = await h.post("/sleep", params={"level": 2, "mode": "wait"})
            bad = await h.post("/sleep", params={"mode": "nap"})
            slept = (await h.get("/is_sleeping")).json()
            w = await h.post("/wake_up", params=[("tags", "weights"), ("tags", "kv_cache")])
            client.sleeping[1] = True
            disagree = await h.get("/is_sleeping")
            ok = (await h.post("/reset_prefix_cache", params={"reset_running_requests": "true"})).json()
            client.reset_results[1] = False
            failed = (await h.post("/reset_prefix_cache")).json()
        assert s.json() == {"status": "sleeping", "level": 2} and bad.status_code == 400
        assert slept == {"is_sleeping": True}
        assert w.json() == {"status": "awake", "tags": ["weights", "kv_cache"]}
        assert disagree.status_code == 500
        assert disagree.json()["error"]["values"] == {"0": False, "1": True}
        assert ok == {"success": True, "engines": {"0": True, "1": True}}
        assert failed == {"success": False, "engines": {"0": True, "1": False}}  # the failing engine named
        assert ("sleep", 2, "wait") in client.utility_calls
        assert ("wake_up", ["weights", "kv_cache"]) in client.utility_calls
        assert ("reset_prefix_cache", True, False) in client.utility_calls
    run(body)


def test_dev_routes_pause_resume_caches_and_collective_rpc_reach_the_client():
    async def body():
        client = FakeClient()
        async with served(client, dev_mode=True) as (h, _):
            paused = (await h.post("/pause", params={"mode": "keep", "clear_cache": "false"})).json()
            is_paused = (await h.get("/is_paused")).json()
            resumed = (await h.post("/resume")).json()
            after = (await h.get("/is_paused")).json()
            mm = (await h.post("/reset_mm_cache")).json()
            enc = (await h.post("/reset_encoder_cache")).json()
            rpc = (await h.post("/collective_rpc", json={"method": "echo", "args": [1], "timeout": 2.5})).json()
        assert (paused, is_paused, resumed, after) == (
            {"status": "paused"}, {"is_paused": True}, {"status": "resumed"}, {"is_paused": False})
        assert mm == {"success": True} and enc == {"success": True}
        assert rpc == {"results": [{"engine": 0, "method": "echo", "args": [1]},
                                   {"engine": 1, "method": "echo", "args": [1]}]}
        assert client.utility_calls == [
            ("pause_generation", "keep", False), ("is_scheduler_paused",), ("resume_scheduler",),
            ("is_scheduler_paused",), ("reset_mm_cache",), ("reset_encoder_cache",),
            ("collective_rpc", "echo", 2.5, [1], None)]
    run(body)


def test_rejection_notice_gating():
    kv = {"do_remote_prefill": True, "remote_engine_id": "p0", "remote_request_id": "x"}

    async def rejected(client, headers=None, **kw):
        async with served(client, **kw) as (h, _):
            return await h.post("/v1/completions", headers=headers or {},
                                json={"prompt": "x", "temperature": 7, "kv_transfer_params": kv})

    async def body():
        c1 = FakeClient()
        r = await rejected(c1, {"X-Request-Id": "rj", "X-data-parallel-rank": "1"}, kv_connector="reference")
        assert r.status_code == 400  # the client still gets its error
        assert c1.notices == [("cmpl-rj", kv, 1)]
        c2 = FakeClient()
        await rejected(c2)  # no connector: nothing is sent
        assert c2.notices == []
        c3 = FakeClient()
        async with served(c3, kv_connector="reference") as (h, _):
            await h.post("/v1/completions", json={"prompt": "x", "temperature": 7,
                                                  "kv_transfer_params": {"do_remote_prefill": False}})
            await h.post("/v1/completions", json={"prompt": "x", "model": "nope", "kv_transfer_params": kv})
            # An engine that rejects before admission (paused) counts as a rejection too.
            c3.reject_next = RequestError("engine_paused", "Generation is paused.", True)
            paused = await h.post("/v1/completions", json={"prompt": "x", "kv_transfer_params": kv})
        assert paused.status_code == 503
        assert [n[1] for n in c3.notices] == [kv, kv]
        c4, c5 = FakeClient(), FakeClient()
        await rejected(c4, kv_connector="reference", bugs=("no-rejection-notification",))
        await rejected(c5, bugs=("notify-without-connector",))
        assert c4.notices == [] and len(c5.notices) == 1
    run(body)


def test_n_below_one_is_a_400_not_an_empty_answer():
    async def body():
        client = FakeClient()
        async with served(client) as (h, _):
            plain = await h.post("/v1/completions", json={"prompt": "x", "n": 0})
            chat = await h.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                              "n": -1, "stream": True})
        for r in (plain, chat):
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "n" and "n must be at least 1" in r.json()["error"]["message"]
        assert client.added == []
    run(body)
