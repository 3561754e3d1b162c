"""The client's receiving side: the output loop, each output message read and judged by the
client's protocol machine, then routed to its stream or utility waiter (``ECP-OUT-*``).

What the client does about a rule an engine broke is its policy here: an unreadable message,
``ENGINE_CORE_DEAD`` or DP control on its socket fails the client closed (``ECP-ROB-3``,
``ECP-OUT-6``); late outputs and replies to unknown call ids are dropped (``ECP-OUT-9``,
``ECP-UTIL-10``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import zmq
import zmq.asyncio

from ecp.spec import UtilityOutput
from ecp.spec.machine import EngineDead, FrontendConnection, Outputs, Violation

from .errors import EngineDeadError, RequestStreamClosed, UnexpectedDPControl
from .registry import RequestRegistry
from .router import Router
from .stats import ClientStats
from .stream import StreamSink

log = logging.getLogger("ecp.reference.client")

#: Longest run of back-to-back output frames handled before the event loop gets a turn.
OUTPUT_SLICE_S = 0.002


class OutputDispatch:
    """Reads the client's output socket (:meth:`run`) and hands each output to its stream, each
    utility reply to ``on_utility_reply``, each engine's ``scheduler_stats`` to ``router``.

    ``machine`` returns the client's protocol machine (the one that ran the handshake: it judges
    every message); ``fail`` fails the client closed. :attr:`last_output_at` and
    :attr:`last_output_from` (per engine rank) are the loop times of the last output message, the
    client's evidence of life. Streams in push mode are notified through :meth:`listener_due`.
    """

    def __init__(self, *, registry: RequestRegistry[StreamSink], router: Router, stats: ClientStats,
                 machine: Callable[[], FrontendConnection], fail: Callable[[BaseException], None],
                 on_utility_reply: Callable[[int, UtilityOutput], None]) -> None:
        self._registry = registry
        self._router = router
        self._stats = stats
        self._machine = machine
        self._fail = fail
        self._on_utility_output = on_utility_reply
        self.last_output_at = 0.0
        self.last_output_from: dict[int, float] = {}  # engine rank -> loop time of its last output
        #: listened-to streams with something new, and whether a flush of them is scheduled
        self._listeners_due: dict[StreamSink, None] = {}
        self._listener_flush_scheduled = False

    async def run(self, sock: zmq.asyncio.Socket) -> None:
        """Read ``sock`` (the output PULL) until cancelled."""
        # The same zmq socket without asyncio's futures: queued frames are taken with a plain
        # non-blocking read, which costs a fraction of an awaited one (a future, event
        # registration and flag arithmetic per frame). Only an empty socket is awaited, for
        # readability: ZeroMQ signals its descriptor once when frames arrive on an empty socket,
        # so the loop reads until the socket is empty again before it waits. Nothing else reads
        # this socket: an ADD does not take outputs, so a wave of requests admitted in one
        # event-loop turn is all sent before the outputs queued meanwhile are read (measured:
        # first tokens sooner for the wave as a whole than when each ADD took them, docs/client.md).
        recv_queued = zmq.Socket.shadow(sock.underlying).recv_multipart
        loop = asyncio.get_running_loop()
        yielded_at = loop.time()
        while True:
            try:
                frames = recv_queued(zmq.NOBLOCK)
            except zmq.Again:
                self._flush_listeners()
                # (yielded_at stays: the first frame after a wait of a slice or more is
                # flushed at once, as a lone step's should be)
                await sock.poll(flags=zmq.POLLIN)
                continue
            self.last_output_at = loop.time()
            self.on_frames(frames)
            # A backlog would otherwise be drained in one go while the streams it woke and new
            # requests wait (every token of a request then reaches its client in one write).
            # Yield after OUTPUT_SLICE_S of back-to-back frames: streams flush and requests are
            # admitted at least that often, and a deep backlog is still taken a few steps at a
            # time, which each stream then writes as one delta.
            if self.last_output_at - yielded_at >= OUTPUT_SLICE_S:
                self._flush_listeners()
                await asyncio.sleep(0)
                yielded_at = loop.time()

    # Push-mode streams (RequestStream.listen): their listeners run once per slice of frames,
    # with everything that slice brought, instead of one task wake-up per output.
    def listener_due(self, sink: StreamSink) -> None:
        self._listeners_due[sink] = None
        if not self._listener_flush_scheduled:  # outside the output loop (an abort, a failure)
            self._listener_flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._listener_flush_scheduled = False
        self._flush_listeners()

    def _flush_listeners(self) -> None:
        due, self._listeners_due = self._listeners_due, {}
        for sink in due:
            listener = sink.listener
            if listener is not None:
                try:
                    listener()
                except Exception:  # the consumer's bug: it must not stop the output loop
                    log.exception("a stream listener of %s failed", sink.request_id)

    def on_frames(self, frames: list[bytes]) -> None:
        """Judge one output message and route what it carries."""
        self._stats.output_messages += 1
        machine = self._machine()
        events = machine.receive("output[0]", frames)
        if machine.violations:
            violations, machine.violations = machine.violations, []
            if not events:  # the message could not be read: the output stream can no longer be trusted
                self._fail(violations[0].error)
                return
            for v in violations:
                self._on_violation(v)
        if not events:
            return
        event = events[0]
        if isinstance(event, EngineDead):
            self._fail(EngineDeadError())
            return
        assert isinstance(event, Outputs)
        msg = event.outputs
        self.last_output_from[msg.engine_index] = self.last_output_at
        if msg.is_dp_control:
            self._fail(UnexpectedDPControl(msg.engine_index))
            return
        if msg.scheduler_stats is not None:
            self._router.on_stats(msg.engine_index, msg.scheduler_stats)
        registry = self._registry
        get = registry.get
        dispatched = dropped = 0
        for out in msg.outputs:
            entry = get(out.request_id)
            if entry is None:  # ECP-OUT-9: finished, aborted or unknown
                dropped += 1
                continue
            sink = entry.sink
            finished = out.finish_reason is not None
            if finished:
                registry.take(out.request_id)
            if sink.dropped:  # waiting for its auto-abort: nobody listens
                dropped += 1
                continue
            sink.push(out)
            dispatched += 1
            if finished:
                sink.end()
        stats = self._stats
        stats.outputs_dispatched += dispatched
        stats.outputs_dropped += dropped
        if msg.finished_requests:
            for request_id in msg.finished_requests:
                entry = registry.take(request_id)
                if entry is not None and not entry.sink.dropped:
                    entry.sink.end(RequestStreamClosed(request_id, msg.engine_index))
        if msg.utility_output is not None:
            self._on_utility_output(msg.engine_index, msg.utility_output)

    def _on_violation(self, violation: Violation) -> None:
        """A rule an engine broke that the client survives: an output for an id it no longer
        waits for is dropped (``ECP-OUT-9``), a reply to an unknown call id too (``ECP-UTIL-10``);
        the machine names the clause."""
        self._stats.protocol_violations += 1
        err = violation.error
        log.debug("[%s] engine %s broke a rule on %s: %s", err.clause, violation.rank, violation.socket, err)
