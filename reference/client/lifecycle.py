"""The client's request lifecycle (``ECP-REQ-*``, ``ECP-ABORT-*``): ADD with its stream, explicit
and automatic ABORT (coalesced per engine), the rejection notice (``ECP-REJECT-2``).

A mixin of :class:`~ecp.reference.client.client.EngineCoreClient`. The rules (an id in flight at an
engine cannot be added again, an ABORT names only ids the engine may still answer) live in the
client's protocol machine; this module keeps the streams the callers read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterable

import msgspec

from ecp.spec import EngineCoreOutput, EngineCoreRequest, FinishReason, LocalProtocolError, SamplingParams
from ecp.spec.machine import Abort, Add

from .abort_coalescer import MAX_DRAIN, AbortCause
from .errors import DuplicateRequestId
from .registry import InFlight, group_by_engine
from .stream import RequestStream, StreamSink

log = logging.getLogger("ecp.reference.client")


def _abort_output(request_id: str) -> EngineCoreOutput:
    return EngineCoreOutput(request_id=request_id, new_token_ids=[], finish_reason=FinishReason.ABORT)


class RequestLifecycle:
    """``add``, ``abort``, ``abort_all``, ``notify_kv_transfer_request_rejected`` and the abort worker."""

    async def add(self, request: EngineCoreRequest) -> RequestStream:
        """Send ADD and return the request's stream.

        Raises :class:`DuplicateRequestId` (nothing sent) for an id already in
        flight, :class:`InvalidDataParallelRank` for a pinned rank that is not
        connected, or the client's sticky error. ``client_index`` and
        ``current_wave`` are stamped here (``ECP-REQ-6``, ``ECP-DP-5``).
        """
        self._check_ready()
        if request.request_id in self._registry:  # ECP-REQ-8: before routing, encoding or sending
            raise DuplicateRequestId(request.request_id)
        rank = self._router.choose(self._registry.counts(), request.data_parallel_rank)
        stamped = msgspec.structs.replace(request, client_index=self.config.client_index,
                                          current_wave=self.current_wave)
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
        # Called from RequestStream (possibly from a finaliser): only queue work.
        entry = self._registry.get(sink.request_id)
        if self._closed or entry is None or entry.sink is not sink:
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

    async def _abort_worker(self) -> None:
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
        for rank, ids in grouped.items():
            assert self._machine is not None
            # only ids the engine may still answer (ECP-ABORT-6): a terminal output that crossed
            # the drop on the wire has already ended the request
            ids = self._machine.abortable(rank, ids)
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
        """Abort requests explicitly (``ECP-ABORT-8``).

        Each id still in flight is finalised locally first (its stream gets
        an ABORT terminal output), then one ABORT per owning engine is sent;
        unknown or finished ids are never sent. Returns the aborted ids.
        """
        self._check_ready()
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

    async def abort_all(self) -> list[str]:
        """Abort every in-flight request."""
        return await self.abort(self._registry.ids())

    async def notify_kv_transfer_request_rejected(self, request_id: str, kv_transfer_params: dict[str, Any],
                                                  data_parallel_rank: int | None = None) -> int:
        """Send vLLM's rejection notice (``ECP-REJECT-2``): an ``abort_immediately``
        ADD with prompt ``[0]``, ``max_tokens`` 1 and the request's
        ``kv_transfer_params``, to the pinned or least-loaded engine, without
        registering a stream. Returns the engine rank it went to."""
        self._check_ready()
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
            client_index=self.config.client_index,
            current_wave=self.current_wave,
            abort_immediately=True,
        )
        await self._send(Add(rank, notice, 0))
        self._stats.rejection_notifications += 1
        return rank
