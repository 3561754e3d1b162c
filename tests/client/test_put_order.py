"""The client puts input messages on the wire in order, also when the socket cannot take one now."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import zmq

from ecp.reference.client.client import EngineCoreClient


class _Full:
    """A non-blocking send that refuses while ``full`` (as zmq does at the high-water mark)."""

    def __init__(self, wire: list) -> None:
        self.full = True
        self.wire = wire

    def send_multipart(self, message, flags=0, copy=True):
        assert flags == zmq.NOBLOCK
        if self.full:
            raise zmq.Again()
        self.wire.append(message[1])


class _Awaited:
    """An awaited send that completes once ``room`` is set."""

    def __init__(self, wire: list) -> None:
        self.room = asyncio.Event()
        self.wire = wire

    async def send_multipart(self, message, copy=True):
        await self.room.wait()
        self.wire.append(message[1])


def test_a_message_the_socket_cannot_take_now_is_awaited_and_nothing_overtakes_it():
    async def body():
        wire: list = []
        now, awaited = _Full(wire), _Awaited(wire)
        client = SimpleNamespace(_input=awaited, _input_now=now, _sends_waiting=0)
        first = asyncio.ensure_future(EngineCoreClient._put(client, 0, [b"first"]))
        await asyncio.sleep(0)
        now.full = False  # room for a plain send again, but the first message still waits
        second = asyncio.ensure_future(EngineCoreClient._put(client, 0, [b"second"]))
        await asyncio.sleep(0)
        assert wire == [] and client._sends_waiting == 2
        awaited.room.set()
        await asyncio.wait_for(asyncio.gather(first, second), 5)
        assert wire == [b"first", b"second"] and client._sends_waiting == 0
        await EngineCoreClient._put(client, 0, [b"third"])  # nothing waits: the plain send
        assert wire[-1] == b"third"

    asyncio.run(body())
