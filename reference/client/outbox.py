"""The client's input sends (the wire below the protocol machine), batched per event-loop turn.

Each message put on the input ROUTER wakes ZeroMQ's I/O thread, and on a loaded machine the
sending thread often loses its core to the thread it woke. A wave of requests admitted in one
event-loop turn therefore paid for a wake-up per ADD (docs/frontend.md, "How the serving path is built").
The outbox queues the messages of a turn and puts them on the socket together: at the end of
the turn that queued them, or as soon as :data:`SEND_BATCH` wait, so the first requests of a
long wave are not held back for the whole wave. Order is kept: a message never overtakes one
queued before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable

import zmq

from ecp.spec import engine_identity

from .errors import EngineDisconnected

log = logging.getLogger("ecp.reference.client")

#: Messages queued before they go out without waiting for the end of the turn.
SEND_BATCH = 32

#: Told when a queued message could not be sent: (engine rank, what the caller attached, error).
Lost = Callable[[int, Any, BaseException], None]


class Outbox:
    """Sends input messages on the input ROUTER (``ROUTER_MANDATORY``) in order:
    ``send_now(message, zmq.NOBLOCK, copy=False)`` is the socket's plain send (raises
    ``zmq.Again`` when the socket cannot take it now), ``send_awaited(message, copy=False)``
    its asyncio send (waits until it can).

    :meth:`put` queues; the queue goes out at the end of the event-loop turn or once
    :data:`SEND_BATCH` messages wait, with plain non-blocking sends. When the socket cannot
    take a message now, it and everything behind it are sent by a task that waits for the
    socket. A message that cannot reach its engine (not connected: the peer is gone) is
    reported to ``lost`` with :class:`EngineDisconnected`, and every later :meth:`put` to
    that engine raises it at once: an engine that left does not come back.

    ``sent`` is called after each run of plain sends that put at least one message on the
    socket. A plain send can take the socket's signal that something arrived to be read (ZeroMQ
    signals its descriptor once, and any call into the socket may consume it), which an
    awaited read of the same socket would then miss: the owner of the socket checks for input
    there.
    """

    def __init__(self, send_now: Callable[..., Any], send_awaited: Callable[..., Awaitable[Any]], lost: Lost,
                 sent: Callable[[], None] | None = None) -> None:
        self._send_now = send_now
        self._send_awaited = send_awaited
        self._lost = lost
        self._sent = sent
        self._queue: deque[tuple[int, list[Any], Any]] = deque()
        self._flush_scheduled = False
        self._waiting: asyncio.Task[None] | None = None  # sending what the socket could not take
        self._unreachable: set[int] = set()

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, rank: int, frames: list[Any], tag: Any = None) -> None:
        """Queue ``frames`` for engine ``rank``; ``tag`` is given back to ``lost`` if it cannot be
        sent. Raises :class:`EngineDisconnected` (nothing queued) for an engine already known
        to be gone."""
        if rank in self._unreachable:
            raise EngineDisconnected(f"engine {rank} is not connected (an earlier send to it failed)")
        self._queue.append((rank, [engine_identity(rank), *frames], tag))
        if self._waiting is not None:  # behind a message that waits for the socket
            return
        if len(self._queue) >= SEND_BATCH:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def flush(self) -> None:
        """Send what is queued now; what the socket cannot take now goes out from a task."""
        if self._waiting is None and not self._send_queued():
            self._waiting = asyncio.get_running_loop().create_task(self._send_when_writable())

    def close(self) -> None:
        """Send what the socket takes now (best effort) and forget the rest; stop the waiting task."""
        if self._waiting is None:
            try:
                self._send_queued()
            except zmq.ZMQError:
                pass
        else:
            self._waiting.cancel()
            self._waiting = None
        self._queue.clear()

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        if self._queue:
            self.flush()

    def _send_queued(self) -> bool:
        """Send from the head of the queue until it is empty (True) or the socket cannot take
        the next message now (False)."""
        queue, send = self._queue, self._send_now
        sent = 0
        try:
            while queue:
                rank, message, tag = queue[0]
                try:
                    send(message, zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    return False
                except zmq.ZMQError as exc:
                    queue.popleft()
                    self._failed(rank, tag, exc)
                    continue
                queue.popleft()
                sent += 1
            return True
        finally:
            if sent and self._sent is not None:
                self._sent()

    async def _send_when_writable(self) -> None:
        try:
            while self._queue:
                rank, message, tag = self._queue[0]
                try:
                    await self._send_awaited(message, copy=False)
                except zmq.ZMQError as exc:
                    self._queue.popleft()
                    self._failed(rank, tag, exc)
                    continue
                self._queue.popleft()
                if self._send_queued():
                    return
        finally:
            self._waiting = None

    def _failed(self, rank: int, tag: Any, exc: zmq.ZMQError) -> None:
        if exc.errno == zmq.EHOSTUNREACH:
            self._unreachable.add(rank)
            error: BaseException = EngineDisconnected(f"engine {rank} is not connected (send failed: {exc})")
        else:
            error = exc
        log.debug("an input message to engine %d was not sent: %s", rank, error)
        self._lost(rank, tag, error)
