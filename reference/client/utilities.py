"""The client's UTILITY calls (``ECP-UTIL-*``): the calls in flight, each engine's reply awaited by
call id (:class:`UtilityCalls`), and the typed wrappers, one line per wire method
(:class:`UtilityMethods`): each takes the parameters of the spec's method table
(:data:`ecp.spec.utility_methods.UTILITY_METHODS`: names, order, defaults) and sends them all
(``tests/client/test_utility.py`` checks every wrapper against the table).

:class:`UtilityCalls` sends through the client's protocol machine (which owns the rules: pending call
ids, reserved ids, the result envelope) and keeps only the futures the callers wait on; which engines
a call goes to and how their answers combine is :mod:`.aggregation`'s, applied by the client.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import logging
import uuid
from typing import Any, Awaitable, Callable, Sequence

from ecp.spec import ProtocolError, UtilityOutput, UtilityRequest
from ecp.spec.machine import Event, UtilityCall

from .errors import UtilityTimeout
from .stats import ClientStats

log = logging.getLogger("ecp.reference.client")


class UtilityCalls:
    """The client's UTILITY calls in flight: call id → (engine rank, the future its reply completes).

    ``send`` puts an event on the wire through the client's protocol machine. The receiver must hand
    every utility reply to :meth:`on_reply` and, when the client fails or closes, end every waiter
    with :meth:`fail_all`.
    """

    def __init__(self, *, client_index: int, timeout_s: float, send: Callable[[Event], Awaitable[None]],
                 stats: ClientStats) -> None:
        self._client_index = client_index
        self._timeout_s = timeout_s
        self._send = send
        self._stats = stats
        #: call id -> (the engine it went to, the future its reply completes)
        self.pending: dict[int, tuple[int, asyncio.Future[UtilityOutput]]] = {}
        self._call_ids = itertools.count((uuid.uuid1().int >> 64) & 0x7FFF_FFFF_FFFF_FFFF)

    def _next_call_id(self) -> int:
        while True:
            call_id = next(self._call_ids) & 0xFFFF_FFFF_FFFF_FFFF
            if call_id not in self.pending:
                return call_id

    def expect(self, rank: int) -> tuple[int, asyncio.Future[UtilityOutput]]:
        """A fresh call id for a call to engine ``rank`` and the future its reply completes. The
        caller must :meth:`forget` the call id once it stops waiting."""
        call_id = self._next_call_id()
        fut: asyncio.Future[UtilityOutput] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = (rank, fut)
        return call_id, fut

    def forget(self, call_id: int) -> None:
        """Stop waiting for ``call_id`` (a reply that still comes is then an unknown call id)."""
        self.pending.pop(call_id, None)

    async def call(self, method: str, args: Sequence[Any], targets: Sequence[int]) -> dict[int, UtilityOutput]:
        """Send ``method(*args)`` to each engine in ``targets`` and wait for every reply
        (``ECP-UTIL-7``), bounded by the client's ``utility_timeout_s``; returns the replies by rank.
        An engine the call cannot reach answers with a failure message. Raises
        :class:`UtilityTimeout` naming the engines that did not answer, or the error that ended
        the waiters (:meth:`fail_all`)."""
        calls = {rank: self.expect(rank) for rank in targets}
        self._stats.utility_calls += 1
        try:
            for rank, (call_id, fut) in calls.items():
                try:
                    await self._send(UtilityCall(rank, UtilityRequest(self._client_index, call_id, method,
                                                                      list(args)), 0))
                except ProtocolError:
                    raise
                except Exception as exc:  # that engine's failure; still wait for the others
                    self.unsent(call_id, exc, method)
            futures = [fut for _, fut in calls.values()]
            done, pending = await asyncio.wait(futures, timeout=self._timeout_s)
            errors = [fut.exception() for fut in done]  # retrieve every one: none is left unobserved
            for error in errors:
                if error is not None:
                    raise error.with_traceback(None)
            if pending:
                missing = [rank for rank, (_, fut) in calls.items() if fut in pending]
                raise UtilityTimeout(method, missing, self._timeout_s)
        finally:
            for call_id, fut in calls.values():
                self.pending.pop(call_id, None)
                if not fut.done():
                    fut.cancel()
        return {rank: fut.result() for rank, (_, fut) in calls.items()}

    def unsent(self, call_id: int, error: BaseException, method: str | None = None) -> None:
        """The call ``call_id`` could not be sent (``error``): its engine answers with a failure
        message, so the caller still waits for the others (a send queued for the end of the
        event-loop turn reports here when it finds its engine gone)."""
        pending = self.pending.get(call_id)
        if pending is None:
            return
        rank, fut = pending
        if not fut.done():
            what = method or "the call"
            fut.set_result(UtilityOutput(call_id, f"could not send {what} to engine {rank}: {error}"))

    def on_reply(self, engine_index: int, reply: UtilityOutput) -> None:
        """Complete the waiter of ``reply.call_id``; a reply nobody waits for is dropped (``ECP-UTIL-10``)."""
        pending = self.pending.pop(reply.call_id, None)
        if pending is None:  # ECP-UTIL-10
            self._stats.unknown_utility_replies += 1
            log.warning("dropping utility reply with unknown call id %s from engine %d", reply.call_id,
                        engine_index)
            return
        rank, fut = pending
        if rank != engine_index:
            log.warning("utility reply for engine %d arrived from engine %d", rank, engine_index)
        if not fut.done():
            fut.set_result(reply)

    def fail_all(self, error: BaseException) -> None:
        """End every waiter with ``error`` (the client failed or closed)."""
        for _, fut in list(self.pending.values()):
            if not fut.done():
                fut.set_exception(error)
        self.pending.clear()


class UtilityMethods(abc.ABC):
    """The typed wrappers, one line per wire method, over :meth:`call_utility`: the one method a
    class that has them must provide."""

    @abc.abstractmethod
    async def call_utility(self, method: str, *args: Any) -> Any:
        """Call ``method(*args)`` on the engines and return the aggregated result."""

    async def is_sleeping(self) -> bool:
        return await self.call_utility("is_sleeping")

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        await self.call_utility("sleep", level, mode)

    async def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        return await self.call_utility("wake_up", None if tags is None else list(tags))

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        return await self.call_utility("reset_prefix_cache", reset_running_requests, reset_connector)

    async def reset_mm_cache(self) -> None:
        await self.call_utility("reset_mm_cache")

    async def reset_encoder_cache(self) -> None:
        await self.call_utility("reset_encoder_cache")

    async def release_kv_cache_memory(self) -> None:
        await self.call_utility("release_kv_cache_memory")

    async def is_scheduler_paused(self) -> bool:
        return await self.call_utility("is_scheduler_paused")

    async def pause_generation(self, mode: str = "abort", clear_cache: bool = True) -> None:
        await self.call_utility("pause_generation", mode, clear_cache)

    async def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> None:
        await self.call_utility("pause_scheduler", mode, clear_cache)

    async def resume_scheduler(self) -> None:
        await self.call_utility("resume_scheduler")

    async def get_weight_version(self) -> str:
        return await self.call_utility("get_weight_version")

    async def profile(self, is_start: bool = True, profile_prefix: str | None = None,
                      delay_iterations: int | None = None, max_iterations: int | None = None,
                      profiler_kwargs: dict[str, Any] | None = None) -> None:
        # all 5 arguments, as vLLM 0.33 sends them (an engine older than 0.33 takes only the first 2)
        await self.call_utility("profile", is_start, profile_prefix, delay_iterations, max_iterations,
                                profiler_kwargs)

    async def collective_rpc(self, method: str, timeout: float | None = None, args: Sequence[Any] = (),
                             kwargs: dict[str, Any] | None = None) -> list[Any]:
        return await self.call_utility("collective_rpc", method, timeout, list(args), kwargs)

    async def get_supported_tasks(self) -> tuple[str, ...]:
        """Tasks every engine supports, in the first engine's order."""
        per_engine: dict[int, list[str]] = await self.call_utility("get_supported_tasks")
        lists = list(per_engine.values())
        common = set(lists[0]).intersection(*lists[1:]) if lists else set()
        return tuple(t for t in lists[0] if t in common) if lists else ()
