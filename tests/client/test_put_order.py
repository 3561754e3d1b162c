"""The client's outbox puts input messages on the wire in order, at the end of the event-loop turn
(or once SEND_BATCH wait), also when the socket cannot take one now; a message whose engine is
gone is reported, and later ones to that engine are refused at once."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from ecp.reference.client.errors import EngineDisconnected
from ecp.reference.client.outbox import SEND_BATCH, Outbox
from ecp.spec import engine_identity

TIMEOUT_S = 5.0


class _Socket:
    """The socket's two sends: the plain one refuses while ``full`` (as zmq does at the high-water
    mark) or for an engine in ``gone`` (EHOSTUNREACH); the awaited one completes once ``room`` is set."""

    def __init__(self) -> None:
        self.wire: list[bytes] = []
        self.full = False
        self.gone: set[bytes] = set()
        self.room = asyncio.Event()

    def send_now(self, message, flags=0, copy=True):
        assert flags == zmq.NOBLOCK
        if message[0] in self.gone:
            raise zmq.ZMQError(zmq.EHOSTUNREACH)
        if self.full:
            raise zmq.Again()
        self.wire.append(message[1])

    async def send_awaited(self, message, copy=True):
        await self.room.wait()
        self.wire.append(message[1])


def _outbox(sock: _Socket, lost: list | None = None) -> Outbox:
    return Outbox(sock.send_now, sock.send_awaited,
                  lambda rank, tag, error: (lost if lost is not None else []).append((rank, tag, error)))


def test_messages_of_a_turn_go_out_together_at_its_end_or_once_a_batch_waits():
    async def body():
        sock = _Socket()
        box = _outbox(sock)
        box.put(0, [b"a"])
        box.put(0, [b"b"])
        assert sock.wire == [] and len(box) == 2  # still this turn
        await asyncio.sleep(0)  # the end of the turn
        assert sock.wire == [b"a", b"b"] and len(box) == 0
        for i in range(SEND_BATCH):  # a long wave in one turn: the first batch leaves at once
            box.put(0, [b"%d" % i])
        assert sock.wire[2:] == [b"%d" % i for i in range(SEND_BATCH)]

    asyncio.run(asyncio.wait_for(body(), TIMEOUT_S))


def test_a_message_the_socket_cannot_take_now_is_awaited_and_nothing_overtakes_it():
    async def body():
        sock = _Socket()
        box = _outbox(sock)
        sock.full = True
        box.put(0, [b"first"])
        await asyncio.sleep(0)  # the end of the turn: the socket refuses, a task waits for it
        sock.full = False  # room for a plain send again, but the first message still waits
        box.put(0, [b"second"])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sock.wire == [] and len(box) == 2
        sock.room.set()
        for _ in range(100):  # bounded: the waiting task sends both
            if not len(box):
                break
            await asyncio.sleep(0)
        assert sock.wire == [b"first", b"second"]
        box.put(0, [b"third"])  # nothing waits: the plain send at the end of the turn
        await asyncio.sleep(0)
        assert sock.wire[-1] == b"third"

    asyncio.run(asyncio.wait_for(body(), TIMEOUT_S))


def test_a_message_to_an_engine_that_is_gone_is_reported_and_later_ones_are_refused():
    async def body():
        sock = _Socket()
        lost: list = []
        box = _outbox(sock, lost)
        sock.gone.add(engine_identity(1))
        box.put(1, [b"x"], tag="add-x")
        box.put(0, [b"y"])
        await asyncio.sleep(0)
        assert sock.wire == [b"y"]  # the other engine's message still went out
        [(rank, tag, error)] = lost
        assert rank == 1 and tag == "add-x" and isinstance(error, EngineDisconnected)
        assert "engine 1 is not connected" in str(error)
        with pytest.raises(EngineDisconnected):
            box.put(1, [b"z"])
        assert len(box) == 0  # nothing queued for it

    asyncio.run(asyncio.wait_for(body(), TIMEOUT_S))


def test_the_owner_is_told_after_each_run_of_plain_sends_that_put_something_on_the_socket():
    async def body():
        sock = _Socket()
        told: list[list[bytes]] = []
        box = Outbox(sock.send_now, sock.send_awaited, lambda *a: None, lambda: told.append(list(sock.wire)))
        box.put(0, [b"a"])
        box.put(0, [b"b"])
        await asyncio.sleep(0)
        assert told == [[b"a", b"b"]]  # once for the run, after its last send
        sock.full = True
        box.put(0, [b"c"])
        await asyncio.sleep(0)
        assert told == [[b"a", b"b"]]  # nothing went out: nothing to tell
        sock.full = False
        sock.room.set()
        for _ in range(100):  # bounded: the waiting task sends it
            if not len(box):
                break
            await asyncio.sleep(0)
        assert sock.wire == [b"a", b"b", b"c"]
        sock.gone.add(engine_identity(1))
        box.put(1, [b"x"])
        await asyncio.sleep(0)
        assert len(told) == 1  # a send that failed put nothing on the socket

    asyncio.run(asyncio.wait_for(body(), TIMEOUT_S))
