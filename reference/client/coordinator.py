"""A minimal in-process DP coordinator (``ECP-HS-6``, ``ECP-DP-5``).

It binds the coordinator XPUB (engines' XSUB connect to ``coordinator_input``)
and PULL (engines' PUSH connect to ``coordinator_output``). Startup gate: the
client's handshake loop reads the subscriptions (``0x01``) on the XPUB and
publishes the single frame ``READY`` once every engine subscribed. Serving: ``wave_complete = w`` (``w >= current``) advances the
wave to ``w + 1``; ``start_wave = w`` from an engine is rebroadcast as
START_DP_WAVE ``[current, exclude = sender]``; stats-only messages are
ignored. Coordinator counts are not published (the client routes on its own
counts, section 10 of the fact sheet).
"""

from __future__ import annotations

import logging

import zmq
import zmq.asyncio

from ecp.spec import (
    EngineCoreOutputs, ProtocolError, decode_outputs, encode_start_dp_wave,
)

log = logging.getLogger("ecp.reference.client")


class Coordinator:
    def __init__(self, ctx: zmq.asyncio.Context, engine_count: int, input_bind: str, output_bind: str) -> None:
        self.engine_count = engine_count
        self.xpub = ctx.socket(zmq.XPUB)
        self.xpub.setsockopt(zmq.XPUB_VERBOSE, 1)  # see every engine's subscription, not just the first
        self.xpub.setsockopt(zmq.LINGER, 0)
        self.xpub.setsockopt(zmq.SNDHWM, 0)
        self.xpub.bind(input_bind)
        self.input_address = self.xpub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.RCVHWM, 0)
        self.pull.bind(output_bind)
        self.output_address = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self.current_wave = 0
        self.waves_started = 0

    def on_engine_message(self, msg: EngineCoreOutputs) -> list[list[bytes]]:
        """Wave bookkeeping; return START_DP_WAVE messages to publish."""
        if msg.wave_complete is not None and msg.wave_complete >= self.current_wave:
            self.current_wave = msg.wave_complete + 1
        if msg.start_wave is not None:
            self.current_wave = max(self.current_wave, msg.start_wave)
            self.waves_started += 1
            return [encode_start_dp_wave(self.current_wave, msg.engine_index)]
        return []

    async def serve(self) -> None:
        poller = zmq.asyncio.Poller()
        poller.register(self.pull, zmq.POLLIN)
        poller.register(self.xpub, zmq.POLLIN)
        while True:
            for sock, _ in await poller.poll():
                frames = await sock.recv_multipart()
                if sock is self.xpub:
                    continue  # late (un)subscriptions: nothing to do
                try:
                    msg = decode_outputs(frames)
                except ProtocolError as exc:
                    log.warning("coordinator dropped an undecodable engine message: %s", exc)
                    continue
                if isinstance(msg, EngineCoreOutputs):
                    for out in self.on_engine_message(msg):
                        await self.xpub.send_multipart(out)

    def close(self) -> None:
        self.xpub.close(linger=0)
        self.pull.close(linger=0)
