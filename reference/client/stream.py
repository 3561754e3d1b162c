"""``RequestStream``: one request's outputs, as an async iterator.

The client keeps only the stream's :class:`StreamSink` in its registry, never
the :class:`RequestStream` itself, so a stream the caller forgets is
garbage-collected and auto-aborted (``ECP-ABORT-5``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable

from ecp.spec import EngineCoreOutput

from .abort_coalescer import AbortCause

DropCallback = Callable[["StreamSink", AbortCause], None]
#: The client's hook that gets a listened-to sink's listener called (``RequestStream.listen``).
NotifyCallback = Callable[["StreamSink"], None]


class StreamSink:
    """The client-side end of a stream: outputs go in, the end is set once."""

    __slots__ = ("request_id", "engine_rank", "items", "ended", "dropped", "error", "waiter", "listener", "notify")

    def __init__(self, request_id: str, engine_rank: int, notify: NotifyCallback | None = None) -> None:
        self.request_id = request_id
        self.engine_rank = engine_rank
        self.items: deque[EngineCoreOutput] = deque()
        self.ended = False      # no more outputs will be pushed
        self.dropped = False    # the consumer closed it before its end
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.listener: Callable[[], None] | None = None
        self.notify = notify

    def push(self, output: EngineCoreOutput) -> None:
        self.items.append(output)
        # _wake, inline: this runs once per output in the output loop
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.listener is not None and self.notify is not None:
            self.notify(self)

    def end(self, error: BaseException | None = None) -> None:
        """End the stream (after the queued outputs), optionally with an error. Idempotent."""
        if self.ended:
            return
        self.ended = True
        self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.listener is not None and self.notify is not None:
            self.notify(self)


class RequestStream:
    """Async iterator of :class:`~ecp.spec.EngineCoreOutput` for one request.

    It yields every output the engine sent for the request, the terminal one
    (``finish_reason`` set) last, then stops. A failure of the client (engine
    dead, undecodable output, shutdown) is raised from the iteration after
    the outputs already received. Closing it early (:meth:`aclose`,
    leaving ``async with``, cancelling the task that awaits it, or dropping
    the last reference) auto-aborts the request at its engine.
    """

    __slots__ = ("_sink", "_on_drop", "__weakref__")

    def __init__(self, sink: StreamSink, on_drop: DropCallback) -> None:
        self._sink = sink
        self._on_drop = on_drop

    @property
    def request_id(self) -> str:
        return self._sink.request_id

    @property
    def engine_rank(self) -> int:
        """The global DP rank of the engine serving the request."""
        return self._sink.engine_rank

    @property
    def finished(self) -> bool:
        """True once no more outputs can arrive (terminal output, error, abort or close)."""
        return self._sink.ended

    def __aiter__(self) -> "RequestStream":
        return self

    def listen(self, callback: Callable[[], None] | None) -> None:
        """Push mode: while ``callback`` is set, the client calls it (synchronously, from its
        output loop, once per batch of frames it read) whenever outputs arrived for this
        request or the stream ended; the callback takes them with :meth:`take_nowait`. A
        consumer that writes each request's outputs out as they come then needs no task
        wake-up per output. ``None`` stops it. If something is already waiting, the callback
        is called soon."""
        sink = self._sink
        sink.listener = callback
        if callback is not None and (sink.items or sink.ended) and sink.notify is not None:
            sink.notify(sink)

    def take_nowait(self) -> list[EngineCoreOutput]:
        """Every output received and not yet taken, in order (``[]``: none now, or the stream
        ended: see :attr:`finished`). Once the outputs are taken, a stream that ended with an
        error raises it."""
        sink = self._sink
        if sink.items:
            items = list(sink.items)
            sink.items.clear()
            return items
        if sink.ended and sink.error is not None:
            raise sink.error.with_traceback(None)
        return []

    async def wait(self) -> None:
        """Until an output is queued or the stream has ended (then :meth:`take_nowait` tells)."""
        sink = self._sink
        if sink.items or sink.ended:
            return
        waiter = asyncio.get_running_loop().create_future()
        sink.waiter = waiter
        try:
            await waiter
        except asyncio.CancelledError:
            self._drop(AbortCause.DROPPED_STREAM)
            raise
        finally:
            sink.waiter = None

    async def _ready(self) -> bool:
        """Wait until an output is queued (True) or the stream has ended (False). An ended stream
        with an error raises it, once the outputs received before it have been taken."""
        sink = self._sink
        while not sink.items:
            if sink.ended:
                if sink.error is not None:
                    # one error instance reaches many streams: keep its traceback short
                    raise sink.error.with_traceback(None)
                return False
            await self.wait()
        return True

    async def __anext__(self) -> EngineCoreOutput:
        if not await self._ready():
            raise StopAsyncIteration
        return self._sink.items.popleft()

    async def next_batch(self) -> list[EngineCoreOutput]:
        """Every output received so far and not yet taken (at least one), in order;
        ``[]`` once the stream ended. Raises like iteration does, after the
        outputs already received. A consumer that falls behind takes its backlog
        in one call instead of one wake-up per output."""
        if not await self._ready():
            return []
        items = list(self._sink.items)
        self._sink.items.clear()
        return items

    def _drop(self, cause: AbortCause) -> None:
        sink = self._sink
        if sink.ended:
            return
        sink.dropped = True
        sink.items.clear()
        sink.end()
        self._on_drop(sink, cause)

    async def aclose(self, cause: AbortCause | str = AbortCause.DROPPED_STREAM) -> None:
        """Stop consuming. If the request is still running it is auto-aborted
        with ``cause`` (``"dropped_stream"`` or ``"stop_string_matched"``)."""
        self._drop(AbortCause(cause))

    async def __aenter__(self) -> "RequestStream":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._drop(AbortCause.DROPPED_STREAM)

    def __del__(self) -> None:
        try:
            self._drop(AbortCause.DROPPED_STREAM)
        except Exception:  # never raise from a finaliser (e.g. the loop is gone)
            pass

    def __repr__(self) -> str:
        return (f"RequestStream({self.request_id!r}, engine_rank={self.engine_rank}, "
                f"finished={self.finished})")
