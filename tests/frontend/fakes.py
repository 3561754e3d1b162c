"""An in-memory stand-in for the engine-core client, for HTTP-layer tests.

It implements what the frontend uses of an engine-core client
(``ecp.reference.frontend.engine_client.EngineClient``: ``add`` → stream, ``abort``,
``call_utility`` and the typed utility wrappers, the rejection notice,
``healthy``/``error``) and records every call, so tests can assert what the
frontend asked of the client. Engines are simulated: each request produces
``max_tokens`` tokens spelling ``text`` (byte tokenizer ids); with
``hold_after=k`` a request stops after ``k`` tokens until :meth:`release`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from ecp.reference.tokenizer import ByteTokenizer
from ecp.spec import EngineCoreOutput, EngineCoreRequest, FinishReason, RequestError


class FakeUtilityError(Exception):
    def __init__(self, message: str, clause: str, values: dict[int, Any]) -> None:
        super().__init__(message)
        self.clause = clause
        self.values = values


class FakeEngineDead(Exception):
    clause = "ECP-OUT-8"


class FakeStream:
    """The part of ``RequestStream`` the frontend uses: ``wait``/``take_nowait``/``finished``,
    push mode (``listen``) and ``aclose``. Items are outputs; an exception ends it with that error."""

    def __init__(self, client: "FakeClient", request: EngineCoreRequest) -> None:
        self.client = client
        self.request = request
        self.request_id = request.request_id
        self.engine_rank = request.data_parallel_rank or 0
        self.items: deque[EngineCoreOutput] = deque()
        self.ended = False  # no more outputs will be pushed
        self.error: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.listener: Any = None

    @property
    def finished(self) -> bool:
        return self.ended

    def push(self, item: Any) -> None:
        if isinstance(item, BaseException):
            self.error = item
        else:
            self.items.append(item)
        self.wake()

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        if self.listener is not None:
            asyncio.get_running_loop().call_soon(self._call_listener)

    def _call_listener(self) -> None:
        if self.listener is not None:
            self.listener()

    def listen(self, callback: Any) -> None:
        self.listener = callback
        if callback is not None and (self.items or self.ended or self.error):
            asyncio.get_running_loop().call_soon(self._call_listener)

    def take_nowait(self) -> list[EngineCoreOutput]:
        if self.items:
            items = list(self.items)
            self.items.clear()
            return items
        if self.error is not None:
            raise self.error
        return []

    async def wait(self) -> None:
        if self.items or self.ended or self.error is not None:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        except asyncio.CancelledError:
            self._drop("dropped_stream")
            raise
        finally:
            self.waiter = None

    def _drop(self, cause: str) -> None:
        if self.ended:
            return
        self.client._end(self)
        self.client.auto_aborts.append((self.request_id, cause))
        self.client.auto_abort_event.set()

    async def aclose(self, cause: str = "dropped_stream") -> None:
        self._drop(cause)


class FakeClient:
    def __init__(self, text: str = "hello world. ", hold_after: int | None = None,
                 engine_ranks: tuple[int, ...] = (0, 1), max_model_len: int = 256) -> None:
        self.tok = ByteTokenizer()
        self.token_cycle = self.tok.encode(text)
        self.hold_after = hold_after
        self.engine_ranks = engine_ranks
        self.max_model_len = max_model_len
        self.healthy = True
        self.error: BaseException | None = None
        self.added: list[EngineCoreRequest] = []
        self.active: dict[str, FakeStream] = {}
        self.auto_aborts: list[tuple[str, str]] = []
        self.auto_abort_event = asyncio.Event()
        self.explicit_aborts: list[list[str]] = []
        self.notices: list[tuple[str, dict, int | None]] = []
        self.utility_calls: list[tuple] = []
        self.sleeping: dict[int, bool] = {r: False for r in engine_ranks}
        self.reset_results: dict[int, bool] = {r: True for r in engine_ranks}
        self.paused = False
        self.reject_next: RequestError | None = None
        self._release = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    @property
    def ready_responses(self) -> dict[int, None]:
        return {r: None for r in self.engine_ranks}  # empty ready payloads

    # -- requests ---------------------------------------------------------
    async def add(self, request: EngineCoreRequest) -> FakeStream:
        if not self.healthy:
            raise self.error or FakeEngineDead("dead")
        self.added.append(request)
        stream = FakeStream(self, request)
        self.active[request.request_id] = stream
        if self.reject_next is not None:
            err, self.reject_next = self.reject_next, None
            stream.push(EngineCoreOutput(request.request_id, [], finish_reason=FinishReason.ERROR, error=err))
            self._end(stream)
            return stream
        task = asyncio.ensure_future(self._produce(stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return stream

    async def _produce(self, stream: FakeStream) -> None:
        max_tokens = stream.request.sampling_params.max_tokens or 16
        for i in range(max_tokens):
            if stream.ended:
                return
            if self.hold_after is not None and i == self.hold_after:
                await self._release.wait()
                if stream.ended:
                    return
            last = i == max_tokens - 1
            stream.push(EngineCoreOutput(stream.request_id, [self.token_cycle[i % len(self.token_cycle)]],
                                         finish_reason=FinishReason.LENGTH if last else None))
            if last:
                self._end(stream)
            await asyncio.sleep(0)  # let the consumer run (simulated engine step)

    def _end(self, stream: FakeStream) -> None:
        stream.ended = True
        self.active.pop(stream.request_id, None)
        stream.wake()

    def release(self) -> None:
        self._release.set()

    async def abort(self, ids: list[str]) -> None:
        self.explicit_aborts.append(list(ids))
        for i in ids:
            stream = self.active.get(i)
            if stream is not None:
                # Local finalisation, as the reference client does (spec/PROTOCOL.md ECP-ABORT-8).
                stream.push(EngineCoreOutput(i, [], finish_reason=FinishReason.ABORT))
                self._end(stream)

    def die(self) -> None:
        self.healthy = False
        self.error = FakeEngineDead("an engine core sent ENGINE_CORE_DEAD")
        for stream in list(self.active.values()):
            stream.push(self.error)
            self._end(stream)

    # -- utilities --------------------------------------------------------
    async def is_sleeping(self) -> bool:
        self.utility_calls.append(("is_sleeping",))
        values = set(self.sleeping.values())
        if len(values) > 1:
            raise FakeUtilityError("engines returned different is_sleeping results", "ECP-UTIL-4",
                                   dict(self.sleeping))
        return values.pop()

    async def sleep(self, level: int, mode: str) -> None:
        self.utility_calls.append(("sleep", level, mode))
        for r in self.sleeping:
            self.sleeping[r] = True

    async def wake_up(self, tags: list[str] | None) -> bool:
        self.utility_calls.append(("wake_up", tags))
        for r in self.sleeping:
            self.sleeping[r] = False
        return True

    async def call_utility(self, method: str, *args: Any, each: bool = False) -> Any:
        self.utility_calls.append((method, *args))
        if method == "reset_prefix_cache":
            assert each, "the fake answers reset_prefix_cache per engine only"
            return all(self.reset_results.values()), dict(self.reset_results)
        return None

    async def pause_generation(self, mode: str, clear_cache: bool) -> None:
        self.utility_calls.append(("pause_generation", mode, clear_cache))
        self.paused = True

    async def resume_scheduler(self) -> None:
        self.utility_calls.append(("resume_scheduler",))
        self.paused = False

    async def is_scheduler_paused(self) -> bool:
        self.utility_calls.append(("is_scheduler_paused",))
        return self.paused

    async def collective_rpc(self, method: str, timeout: float | None, args: list[Any],
                             kwargs: dict[str, Any] | None) -> list[Any]:
        self.utility_calls.append(("collective_rpc", method, timeout, args, kwargs))
        return [{"engine": r, "method": method, "args": args} for r in self.engine_ranks]

    async def notify_kv_transfer_request_rejected(self, request_id: str, params: dict,
                                                  data_parallel_rank: int | None = None) -> None:
        self.notices.append((request_id, params, data_parallel_rank))

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
