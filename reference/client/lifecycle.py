"""The client's request lifecycle (``ECP-REQ-*``, ``ECP-ABORT-*``): ADD with its stream, explicit
and automatic ABORT (coalesced per engine), the rejection notice (``ECP-REJECT-2``).

The rules (an id in flight at an engine cannot be added again, an ABORT names only ids the engine
may still answer) live in the client's protocol machine; this module keeps the streams the callers
read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Iterable

import msgspec

from ecp.spec import EngineCoreOutput, EngineCoreRequest, FinishReason, LocalProtocolError, SamplingParams
from ecp.spec.machine import Abort, Add, Event, FrontendConnection

from .abort_coalescer import MAX_DRAIN, AbortCause, AbortCoalescer
from .errors import DuplicateRequestId
from .registry import InFlight, RequestRegistry, group_by_engine
from .router import Router
from .stats import ClientStats
from .stream import NotifyCallback, RequestStream, StreamSink

log = logging.getLogger("ecp.reference.client")


def _abort_output(request_id: str) -> EngineCoreOutput:
    return EngineCoreOutput(request_id=request_id, new_token_ids=[], finish_reason=FinishReason.ABORT)


class RequestLifecycle:
    """ADD with its stream, explicit ABORT, the rejection notice, and the auto-abort queue with its
    worker (:meth:`run_abort_worker`).

    Given at construction what it touches: the client's ``client_index``, its request ``registry``
    (shared with the output dispatch, which ends the streams), ``router``, auto-abort ``coalescer``
    and ``stats``; ``send`` puts an event on the wire through the client's protocol machine, which
    ``machine`` returns; ``listener_due`` notifies a stream in push mode. The client checks that it
    is ready before each call and must :meth:`clear` the queue when it fails or closes.
    """

    def __init__(self, *, client_index: int, registry: RequestRegistry[StreamSink], router: Router,
                 coalescer: AbortCoalescer, stats: ClientStats, send: Callable[[Event], Awaitable[None]],
                 machine: Callable[[], FrontendConnection], listener_due: NotifyCallback) -> None:
        self._client_index = client_index
        self._registry = registry
        self._router = router
        self._coalescer = coalescer
        self._stats = stats
        self._send = send
        self._machine = machine
        self._listener_due = listener_due
        self._abort_wakeup = asyncio.Event()
        #: the loop the client runs on (a stream may be dropped from a finaliser, in any thread)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def add(self, request: EngineCoreRequest, current_wave: int) -> RequestStream:
        """Send ADD, stamped with this client's index and ``current_wave``, and return its stream."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if request.request_id in self._registry:  # ECP-REQ-8: before routing, encoding or sending
            raise DuplicateRequestId(request.request_id)
        rank = self._router.choose(self._registry.counts(), request.data_parallel_rank)
        stamped = msgspec.structs.replace(request, client_index=self._client_index, current_wave=current_wave)
        sink = StreamSink(request.request_id, rank, self._listener_due)
        self._registry.add(request.request_id, rank, sink)
        try:
            # on input 0, the only one this client has; outputs come on outputs[client_index]
            await self._send(Add(rank, stamped, 0))
        except BaseException as exc:
            self._registry.take(request.request_id)
            sink.end()
            if isinstance(exc, LocalProtocolError) and exc.clause == "ECP-REQ-8":
                # the engine has not answered an earlier ADD of this id yet (the machine knows)
                raise DuplicateRequestId(request.request_id) from None
            raise
        self._router.admitted(rank)
        self._stats.requests_added += 1
        return RequestStream(sink, self._on_stream_dropped)

    def _on_stream_dropped(self, sink: StreamSink, cause: AbortCause) -> None:
        # Called from RequestStream (possibly from a finaliser): only queue work. A client that
        # failed or closed has taken every entry out of the registry: nothing is queued then.
        entry = self._registry.get(sink.request_id)
        if entry is None or entry.sink is not sink:
            return
        self._coalescer.push(sink.request_id, cause, sink)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._abort_wakeup.set)

    def _take_owner(self, request_id: str, sink: StreamSink) -> int | None:
        entry = self._registry.get(request_id)
        if entry is None or entry.sink is not sink:  # finished (and maybe reused) since the drop
            return None
        self._registry.take(request_id)
        return entry.engine_rank

    def clear(self) -> None:
        """Forget every queued auto-abort (the client failed or closed: nothing goes out any more)."""
        self._coalescer.drain(lambda _id, _token: None, max_items=len(self._coalescer))

    async def run_abort_worker(self) -> None:
        """Send the queued auto-aborts, coalesced per engine, until cancelled."""
        while True:
            await self._abort_wakeup.wait()
            self._abort_wakeup.clear()
            await self._settle_burst()
            while len(self._coalescer):
                grouped = self._coalescer.drain(self._take_owner, max_items=MAX_DRAIN)
                await self._send_aborts(grouped)

    async def _settle_burst(self, quiet_iterations: int = 2, max_iterations: int = 16) -> None:
        """Let a burst of drops that started in the same event-loop turn finish
        queueing before the drain (``ECP-ABORT-5``): HTTP disconnects reach their
        streams a few loop iterations apart, depending on where each handler
        was suspended. Waits until the queue stops growing for
        ``quiet_iterations`` iterations (bounded), so a lone drop still goes out
        at once."""
        size, quiet = len(self._coalescer), 0
        for _ in range(max_iterations):
            await asyncio.sleep(0)
            now = len(self._coalescer)
            quiet = quiet + 1 if now == size else 0
            size = now
            if quiet >= quiet_iterations:
                return

    async def _send_aborts(self, grouped: dict[int, list[str]]) -> None:
        machine = self._machine()
        for rank, ids in grouped.items():
            # only ids the engine may still answer (ECP-ABORT-6): a terminal output that crossed
            # the drop on the wire has already ended the request
            ids = machine.abortable(rank, ids)
            if not ids:
                continue
            try:
                await self._send(Abort(rank, tuple(ids)))
            except Exception as exc:  # ECP-ABORT-8: one engine's failure does not stop the others
                self._stats.abort_send_errors += 1
                log.warning("failed to send ABORT of %d id(s) to engine %d: %s", len(ids), rank, exc)
                continue
            self._stats.abort_messages += 1
            self._stats.aborts_sent += len(ids)

    async def abort(self, request_ids: Iterable[str]) -> list[str]:
        """Finalise each id still in flight locally, then send one ABORT per owning engine; returns
        those ids."""
        entries: list[InFlight[StreamSink]] = []
        for request_id in dict.fromkeys(request_ids):
            entry = self._registry.take(request_id)
            if entry is None:
                continue
            entries.append(entry)
            if not entry.sink.dropped:
                entry.sink.push(_abort_output(request_id))
            entry.sink.end()
        await self._send_aborts(group_by_engine(entries))
        return [e.request_id for e in entries]

    async def notify_rejected(self, request_id: str, kv_transfer_params: dict[str, Any],
                              data_parallel_rank: int | None, current_wave: int) -> int:
        """Send the rejection notice for ``request_id``; returns the engine rank it went to."""
        rank = self._router.choose(self._registry.counts(), data_parallel_rank)
        notice = EngineCoreRequest(
            request_id=request_id,
            prompt_token_ids=[0],
            mm_features=None,
            sampling_params=SamplingParams(
                max_tokens=1, extra_args={"kv_transfer_params": dict(kv_transfer_params)},
                watermarking=False),
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=data_parallel_rank,
            client_index=self._client_index,
            current_wave=current_wave,
            abort_immediately=True,
        )
        await self._send(Add(rank, notice, 0))
        self._stats.rejection_notifications += 1
        return rank
