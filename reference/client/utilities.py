"""The client's UTILITY calls (``ECP-UTIL-*``): one call per engine, the replies awaited by call id
and aggregated, and the typed wrappers, one line per wire method.

A mixin of :class:`~ecp.reference.client.client.EngineCoreClient`: it sends through the client's
protocol machine (which owns the rules: pending call ids, reserved ids, the result envelope) and
keeps only the futures the callers wait on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

from ecp.spec import ProtocolError, UtilityOutput, UtilityRequest
from ecp.spec.machine import UtilityCall

from .errors import EngineDisconnected, UtilityTimeout

log = logging.getLogger("ecp.reference.client")


class UtilityCalls:
    """``call_utility`` and the typed wrappers; the client owns the state they use
    (``_pending_utility``: call id → (rank, future), ``_call_ids``, ``_aggregation``)."""

    def _next_call_id(self) -> int:
        while True:
            call_id = next(self._call_ids) & 0xFFFF_FFFF_FFFF_FFFF
            if call_id not in self._pending_utility:
                return call_id

    async def call_utility(self, method: str, *args: Any, each: bool = False) -> Any:
        """Call ``method(*args)`` on every engine and aggregate (see :mod:`.aggregation`);
        with ``each``, ``(result, {rank: value})``.

        Waits for every engine (``ECP-UTIL-7``), bounded by
        ``utility_timeout_s``. Raises :class:`UtilityCallFailed`,
        :class:`UtilityResultDecode`, :class:`InconsistentUtilityResults`,
        :class:`UtilityTimeout` or the client's sticky error.
        """
        self._check_ready()
        loop = asyncio.get_running_loop()
        targets = self._aggregation.targets(method, self._ranks)
        calls: dict[int, tuple[int, asyncio.Future[UtilityOutput]]] = {}
        for rank in targets:
            call_id = self._next_call_id()
            fut: asyncio.Future[UtilityOutput] = loop.create_future()
            self._pending_utility[call_id] = (rank, fut)
            calls[rank] = (call_id, fut)
        self._stats.utility_calls += 1
        try:
            for rank, (call_id, fut) in calls.items():
                try:
                    await self._send(UtilityCall(rank, UtilityRequest(self.config.client_index, call_id, method,
                                                                      list(args)), 0))
                except EngineDisconnected as exc:  # that engine's failure; still wait for the others
                    if not fut.done():
                        fut.set_result(UtilityOutput(call_id, f"could not send {method} to engine {rank}: {exc}"))
                except ProtocolError:
                    raise
                except Exception as exc:  # count it as that engine's failure; still wait for the others
                    if not fut.done():
                        fut.set_result(UtilityOutput(call_id, f"could not send {method} to engine {rank}: {exc}"))
            futures = [fut for _, fut in calls.values()]
            done, pending = await asyncio.wait(futures, timeout=self.config.utility_timeout_s)
            errors = [fut.exception() for fut in done]  # retrieve every one: none is left unobserved
            for error in errors:
                if error is not None:
                    raise error.with_traceback(None)
            if pending:
                missing = [rank for rank, (_, fut) in calls.items() if fut in pending]
                raise UtilityTimeout(method, missing, self.config.utility_timeout_s)
        finally:
            for call_id, fut in calls.values():
                self._pending_utility.pop(call_id, None)
                if not fut.done():
                    fut.cancel()
        self._check_open()
        return self._aggregation.aggregate(method, {rank: fut.result() for rank, (_, fut) in calls.items()},
                                           each=each)

    async def is_sleeping(self) -> bool:
        return await self.call_utility("is_sleeping")

    async def sleep(self, level: int = 1, mode: str = "abort") -> None:
        await self.call_utility("sleep", level, mode)

    async def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        return await self.call_utility("wake_up", None if tags is None else list(tags))

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_external: bool = False) -> bool:
        return await self.call_utility("reset_prefix_cache", reset_running_requests, reset_external)

    async def reset_mm_cache(self) -> None:
        await self.call_utility("reset_mm_cache")

    async def reset_encoder_cache(self) -> None:
        await self.call_utility("reset_encoder_cache")

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

    async def profile(self, is_start: bool = True, prefix: str | None = None, delay_iterations: int | None = None,
                      max_iterations: int | None = None, profiler_kwargs: dict[str, Any] | None = None) -> None:
        # all 5 arguments, as vLLM 0.33 sends them (an engine older than 0.33 takes only the first 2)
        await self.call_utility("profile", is_start, prefix, delay_iterations, max_iterations, profiler_kwargs)

    async def collective_rpc(self, method: str, timeout: float | None = None, args: Sequence[Any] = (),
                             kwargs: dict[str, Any] | None = None) -> list[Any]:
        return await self.call_utility("collective_rpc", method, timeout, list(args), kwargs)

    async def get_supported_tasks(self) -> tuple[str, ...]:
        """Tasks every engine supports, in the first engine's order."""
        per_engine: dict[int, list[str]] = await self.call_utility("get_supported_tasks")
        lists = list(per_engine.values())
        common = set(lists[0]).intersection(*lists[1:]) if lists else set()
        return tuple(t for t in lists[0] if t in common) if lists else ()

    def _on_utility_output(self, engine_index: int, reply: UtilityOutput) -> None:
        pending = self._pending_utility.pop(reply.call_id, None)
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
