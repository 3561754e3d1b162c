"""Driven (a coroutine run without a task) and DisconnectWatch (the per-request disconnect watch built on it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ecp.reference.frontend.driven import Driven
from ecp.reference.frontend.generate import DisconnectWatch

TIMEOUT_S = 5.0


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


def test_a_coroutine_that_never_waits_finishes_in_place():
    async def main() -> list[Any]:
        seen: list[Any] = []

        async def quick() -> int:
            return 7

        d = Driven(quick(), lambda result, exc: seen.append((result, exc)))
        assert not d.running
        return seen

    assert run(main()) == [(7, None)]


def test_it_resumes_when_the_awaited_future_is_done_and_reports_a_failure():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        ended = loop.create_future()

        async def waits() -> int:
            value = await fut
            await asyncio.sleep(0)  # a bare yield: resumed on the next turn
            raise ValueError(value)

        d = Driven(waits(), lambda result, exc: ended.set_result((result, exc)))
        assert d.running and not ended.done()
        fut.set_result(3)
        result, exc = await ended
        assert result is None and isinstance(exc, ValueError) and exc.args == (3,)
        assert not d.running

    run(main())


def test_close_abandons_it_without_calling_done():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        seen: list[Any] = []
        cleaned = []

        async def waits() -> None:
            try:
                await fut
            finally:
                cleaned.append(True)

        d = Driven(waits(), lambda result, exc: seen.append(result))
        d.close()
        fut.set_result(None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert seen == [] and cleaned == [True] and not d.running

    run(main())


class _Receive:
    """ASGI receive: each call waits for the next message put."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return await self.queue.get()


@pytest.mark.parametrize("close_first", [False, True])
def test_disconnect_watch_calls_back_only_for_a_disconnect_before_close(close_first: bool):
    async def main() -> None:
        receive = _Receive()
        left = asyncio.Event()
        watch = DisconnectWatch(receive, left.set)
        await receive.queue.put({"type": "http.request", "body": b"", "more_body": False})
        for _ in range(3):  # let the watch take the message and wait again
            await asyncio.sleep(0)
        assert receive.calls == 2 and not left.is_set() and not watch.dropped
        if close_first:
            watch.close()
        await receive.queue.put({"type": "http.disconnect"})
        if close_first:
            for _ in range(3):
                await asyncio.sleep(0)
            assert not left.is_set() and not watch.dropped
        else:
            await asyncio.wait_for(left.wait(), TIMEOUT_S)
            assert watch.dropped

    run(main())
