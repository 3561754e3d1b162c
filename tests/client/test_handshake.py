"""Handshake owner (ECP-HS-*): stages, timeouts, identities, validation, INIT bytes."""

import asyncio

import pytest

from ecp.spec import HandshakeError, Hello, Ready, encode_handshake
from ecp.reference.client import (
    ClientConfig, EngineCoreClient, HandshakeOwner, HandshakeTimeout, InconsistentEngines,
    UnexpectedEngineIdentity,
)
from ecp.spec import EngineHandshakeMetadata, EngineZmqAddresses
from ecp.spec.peer import Step
from ecp_client_testkit import ScriptedEngine, ready_response, run, start_client, stop

VLLM_INIT_DP1 = bytes.fromhex(  # INIT as vLLM 0.33's Python frontend sends it (DP=1; spec/PROTOCOL.md ECP-HS-2)
    "82a961646472657373657385a6696e7075747391b57463703a2f2f3132372e302e302e313a3430303031a76f75747075747391b574"
    "63703a2f2f3132372e302e302e313a3430303032b1636f6f7264696e61746f725f696e707574c0b2636f6f7264696e61746f725f"
    "6f7574707574c0be66726f6e74656e645f73746174735f7075626c6973685f61646472657373c0af706172616c6c656c5f636f6e"
    "66696780")


def _init(inputs=("tcp://127.0.0.1:40001",), outputs=("tcp://127.0.0.1:40002",)):
    return EngineHandshakeMetadata(EngineZmqAddresses(list(inputs), list(outputs)), {})


def test_owner_sends_vllm_init_bytes_and_tracks_stages():
    owner = HandshakeOwner([0, 1], _init())
    assert owner.stage == "HELLO" and owner.missing("HELLO") == [0, 1]
    hello = encode_handshake(Hello(local=True, headless=False))
    assert owner.on_handshake_frames([b"\x01\x00", hello]) == [[b"\x01\x00", VLLM_INIT_DP1]]
    with pytest.raises(HandshakeError, match="duplicate HELLO"):
        owner.on_handshake_frames([b"\x01\x00", hello])
    with pytest.raises(HandshakeError, match="READY before HELLO") as info:
        owner.on_handshake_frames([b"\x00\x00", encode_handshake(Ready(local=True, headless=False))])
    assert info.value.clause == "ECP-HS-7"
    with pytest.raises(HandshakeError, match="before its HELLO"):
        owner.on_registration([b"\x00\x00", encode_handshake(ready_response(0))])
    owner.on_handshake_frames([b"\x00\x00", hello])
    assert owner.stage == "registration"
    # READY may be seen before the registration (different sockets)
    owner.on_handshake_frames([b"\x00\x00", encode_handshake(Ready(local=True, headless=False))])
    owner.on_registration([b"\x00\x00", encode_handshake(ready_response(0, max_model_len=512))])
    with pytest.raises(HandshakeError, match="duplicate registration"):
        owner.on_registration([b"\x00\x00", encode_handshake(ready_response(0))])
    owner.on_registration([b"\x01\x00", b""])  # empty payload accepted (ECP-HS-12)
    assert owner.stage == "READY" and owner.missing("READY") == [1]
    owner.on_handshake_frames([b"\x01\x00", encode_handshake(Ready(local=True, headless=False))])
    result = owner.result()
    assert owner.done and result.max_model_len == 512 and result.ready_responses[1] is None


def test_owner_rejects_bad_identities_payloads_and_lora_mismatch():
    owner = HandshakeOwner([2, 3], _init())
    hello = encode_handshake(Hello(local=False, headless=True))
    for identity in (b"\x00\x00", b"\x02", b"\x02\x00\x00"):
        with pytest.raises(UnexpectedEngineIdentity) as info:
            owner.on_handshake_frames([identity, hello])
        assert info.value.clause == "ECP-HS-11" and info.value.expected_ranks == [2, 3]
    with pytest.raises(HandshakeError):
        owner.on_handshake_frames([b"\x02\x00", b"\x81\xa6status\xa5HOWDY"])
    with pytest.raises(HandshakeError):
        owner.on_handshake_frames([b"\x02\x00", hello, b"extra"])
    owner.on_handshake_frames([b"\x02\x00", hello])
    owner.on_handshake_frames([b"\x03\x00", hello])
    with pytest.raises(HandshakeError) as info:  # a required key missing
        owner.on_registration([b"\x02\x00", b"\x81\xadmax_model_len\xcd\x01\x00"])
    assert info.value.clause == "ECP-HS-4"
    owner.on_registration([b"\x02\x00", encode_handshake(ready_response(2, supports_lora=True, max_loras=4))])
    with pytest.raises(InconsistentEngines) as info:
        owner.on_registration([b"\x03\x00", encode_handshake(ready_response(3))])
    assert info.value.clause == "ECP-HS-10" and info.value.values == {2: (True, 4), 3: (False, 0)}


def test_bootstrapped_owner_accepts_only_known_ranks():
    owner = HandshakeOwner([0, 1], None, bootstrapped=True)
    assert owner.stage == "registration"
    with pytest.raises(UnexpectedEngineIdentity):
        owner.on_registration([b"\x05\x00", encode_handshake(ready_response(5))])
    owner.on_registration([b"\x01\x00", encode_handshake(ready_response(1, max_model_len=100))])
    owner.on_registration([b"\x00\x00", encode_handshake(ready_response(0))])
    assert owner.done and owner.result().max_model_len == 100


@pytest.mark.parametrize("stage", ["HELLO", "registration", "READY"])
def test_each_stage_times_out_with_its_name(stage):
    async def staged():
        client = EngineCoreClient(ClientConfig(engine_count=2, handshake_timeout_s=0.5, ready_timeout_s=0.5))
        await client.bind()
        engines = [ScriptedEngine(0), ScriptedEngine(1)]
        waiter = asyncio.ensure_future(client.wait_ready())
        try:
            await engines[0].handshake(client.handshake_address)
            if stage == "READY":  # INIT answered, registered, READY withheld
                await engines[1].handshake(client.handshake_address, until=Step.READY)
            elif stage == "registration":  # INIT answered, nothing registered
                await engines[1].handshake(client.handshake_address, until=Step.REGISTRATION)
            with pytest.raises(HandshakeTimeout) as info:
                await asyncio.wait_for(waiter, 5)
            assert info.value.stage == stage and info.value.missing_ranks == [1]
            assert info.value.clause == "ECP-HS-8"
        finally:
            await client.shutdown()
            for e in engines:
                e.close()

    run(staged())


def test_start_with_two_engines_tcp_and_min_max_model_len():
    async def main():
        engines = [ScriptedEngine(0, ready=ready_response(0, max_model_len=300)),
                   ScriptedEngine(1, ready=ready_response(1, max_model_len=200))]
        client, engines = await start_client(2, engines=engines, transport="tcp")
        try:
            assert client.handshake_address.startswith("tcp://127.0.0.1:")
            assert client.max_model_len == 200
            assert set(client.ready_responses) == {0, 1}
            init = engines[0].init
            assert init.addresses.inputs == [client.input_address]
            assert init.addresses.outputs == [client.output_address]
            assert init.addresses.coordinator_input is None and init.parallel_config == {}
        finally:
            await stop(client, engines)

    run(main())


def test_unexpected_identity_fails_start():
    async def main():
        client = EngineCoreClient(ClientConfig(engine_count=1, handshake_timeout_s=5, ready_timeout_s=5))
        await client.bind()
        intruder = ScriptedEngine(7)
        waiter = asyncio.ensure_future(client.wait_ready())
        try:
            await intruder.send_hello(client.handshake_address)
            with pytest.raises(UnexpectedEngineIdentity):
                await asyncio.wait_for(waiter, 5)
        finally:
            await client.shutdown()
            intruder.close()

    run(main())
