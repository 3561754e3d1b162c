"""The in-process coordinator: startup gate (ECP-HS-6) and waves (ECP-DP-5)."""

import asyncio
import time

from ecp.spec import (
    EngineCoreOutputs, EngineCoreRequest, SamplingParams, decode_input, encode_outputs,
)
from ecp.spec.peer import Step
from ecp_client_testkit import ScriptedEngine, run, stop


async def gated_handshake(engine: ScriptedEngine, address: str, gate_seen: list):
    await engine.handshake(address, until=Step.READY)  # READY only after the coordinator's gate
    gate_seen.append(engine.rank)
    await engine.send_ready()


def test_gate_then_wave_rebroadcast_and_stamping():
    async def main():
        from ecp.reference.client import ClientConfig, EngineCoreClient

        client = EngineCoreClient(ClientConfig(engine_count=2, coordinator=True, handshake_timeout_s=10,
                                               ready_timeout_s=10))
        await client.bind()
        engines = [ScriptedEngine(0), ScriptedEngine(1)]
        gate_seen: list = []
        try:
            await asyncio.gather(client.wait_ready(),
                                 *(gated_handshake(e, client.handshake_address, gate_seen) for e in engines))
            assert sorted(gate_seen) == [0, 1]
            init = engines[0].init.addresses
            assert init.coordinator_input and init.coordinator_output and init.frontend_stats_publish_address is None
            await engines[1].coord_push.send_multipart(encode_outputs(EngineCoreOutputs(engine_index=1,
                                                                                        wave_complete=3)))
            await engines[1].coord_push.send_multipart(encode_outputs(EngineCoreOutputs(engine_index=1,
                                                                                        start_wave=4)))
            for e in engines:
                frames = await asyncio.wait_for(e.xsub.recv_multipart(), 10)
                wave = decode_input(frames)
                assert (wave.new_wave, wave.exclude_eng_index) == (4, 1)
            assert client.current_wave == 4
            stream = await client.add(EngineCoreRequest("w", [1], None, SamplingParams(), None, time.time(), None,
                                                        None, 0))
            got = await engines[0].recv()
            assert got.message.current_wave == 4
            await stream.aclose()
        finally:
            await stop(client, engines)

    run(main())


def test_missing_subscription_times_out_naming_the_gate():
    async def main():
        from ecp.reference.client import ClientConfig, EngineCoreClient, HandshakeTimeout

        client = EngineCoreClient(ClientConfig(engine_count=1, coordinator=True, handshake_timeout_s=5,
                                               ready_timeout_s=0.5))
        await client.bind()
        engine = ScriptedEngine(0)
        waiter = asyncio.ensure_future(client.wait_ready())
        try:
            await engine.handshake(client.handshake_address, until=Step.SUBSCRIBE)  # never subscribes
            try:
                await asyncio.wait_for(waiter, 5)
            except HandshakeTimeout as exc:
                assert exc.stage == "coordinator subscriptions" and exc.missing_ranks == [0]
            else:
                raise AssertionError("wait_ready() returned without the coordinator gate")
        finally:
            await stop(client, [engine])

    run(main())
