"""``ecp serve --vllm``: the reference client speaks an older release to its engines (a scripted engine
of that release, ``ecp.conformance.frontend``), and a dev route whose utility method the release lacks
answers 501 naming the release without sending anything."""

from __future__ import annotations

import asyncio

import pytest
import zmq.asyncio

from ecp.conformance.frontend.engine_release import engine_release
from ecp.conformance.frontend.scripted_engines import ScriptedEngine
from ecp.reference.client import ClientConfig, EngineCoreClient
from ecp.reference.client.release import ClientRelease, NotInRelease
from ecp.spec import codec as codec_033

from .harness import run, served

T = 10.0


def test_033_is_the_client_s_own_codec_and_checks_nothing():
    release = ClientRelease("0.33")
    assert release.codec is codec_033 and release.profile is None
    args = (True, None, None, None, {"x": 1})
    assert release.fit("profile", args) is args
    assert release.fit("no_such_method", ()) == ()   # 0.33's own table is the engine's business


def test_a_method_the_release_lacks_is_refused_naming_it():
    with pytest.raises(NotInRelease) as info:
        ClientRelease("0.32").fit("pause_generation", ("abort", True))
    assert info.value.message == "pause_generation: not in vLLM 0.32" and info.value.clause == "ECP-COMPAT-1"


def test_profile_arity_per_release():
    five = (True, None, None, None, None)   # what vLLM 0.33's profile wrapper sends
    assert list(ClientRelease("0.32").fit("profile", five)) == [True, None, None, None]
    assert list(ClientRelease("0.31").fit("profile", five)) == [True, None]
    with pytest.raises(NotInRelease, match="profile takes 0..4 argument"):
        ClientRelease("0.32").fit("profile", (True, None, None, None, {"with_stack": True}))


def test_serve_speaks_032_and_answers_501_for_pause():
    async def body() -> None:
        client = EngineCoreClient(ClientConfig(engine_count=1, transport="tcp", vllm="0.32"))
        await client.bind()
        ctx = zmq.asyncio.Context()
        engine = ScriptedEngine(ctx, 0, 1, client.handshake_address, release=engine_release("0.32"))
        engine.script.hello_local, engine.script.hello_headless = True, False
        engine.start(T)
        try:
            await asyncio.wait_for(client.wait_ready(), T)
            # the engine's ready payload is 0.32's: 25 keys, its vllm_version
            assert client.ready_responses[0].vllm_version == "0.32.0"
            async with served(client, dev_mode=True) as (http, _):
                reply = await http.post("/v1/completions", json={"model": "ecp-synthetic", "prompt": "hi",
                                                                 "max_tokens": 3})
                assert reply.status_code == 200, reply.text
                assert reply.json()["choices"][0]["finish_reason"] == "length"
                reply = await http.post("/pause")
                assert reply.status_code == 501, reply.text
                assert reply.json()["error"]["message"] == "pause_generation: not in vLLM 0.32"
                assert not engine.recorder.utilities("pause_generation")
                reply = await http.get("/is_sleeping")
                assert reply.status_code == 200 and engine.recorder.utilities("is_sleeping")
        finally:
            await engine.stop()
            await client.shutdown()
            ctx.term()

    run(body, timeout=30)
