"""One coroutine run without a task of its own.

A task costs its creation, a scheduled first step and, to stop it, a cancellation
that is thrown in and handled on a later turn. Per request that is a measurable share
of admitting it (docs/frontend.md), for coroutines that mostly finish at once (an ASGI
``send`` the transport takes) or only wait for one event (the client's disconnect).
:class:`Driven` steps such a coroutine in place: at once, then each time what it
waits for is done.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine

#: called once with (result, None) or (None, exception) when the coroutine ends
Done = Callable[[Any, "BaseException | None"], None]


class Driven:
    """Steps ``coro`` now, and again whenever the asyncio future it awaits is done (a bare
    ``yield``, as in ``sleep(0)``, resumes it on the next loop turn). ``done`` is called
    once, with the result or the exception, unless :meth:`close` abandoned it first.

    The coroutine runs in whatever task or callback steps it, so it must not rely on
    ``asyncio.current_task()`` nor be cancelled through a task: :meth:`close` it instead.
    """

    __slots__ = ("_coro", "_done", "_loop")

    def __init__(self, coro: Coroutine[Any, Any, Any], done: Done) -> None:
        self._coro: Coroutine[Any, Any, Any] | None = coro
        self._done = done
        self._loop = asyncio.get_running_loop()
        self._step(coro)

    @property
    def running(self) -> bool:
        """Neither finished nor abandoned."""
        return self._coro is not None

    def close(self) -> None:
        """Abandon the coroutine (it sees ``GeneratorExit`` where it waits); ``done`` is not called."""
        coro, self._coro = self._coro, None
        if coro is not None:
            coro.close()

    def _step(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            waiting_for = coro.send(None)
        except StopIteration as stop:
            self._coro = None
            self._done(stop.value, None)
            return
        except BaseException as exc:  # the coroutine failed: its owner decides what that means
            self._coro = None
            self._done(None, exc)
            return
        if waiting_for is None:
            self._loop.call_soon(self._resume, coro)
        else:  # an asyncio future: the coroutine reads its outcome itself when resumed
            waiting_for.add_done_callback(lambda _: self._resume(coro))

    def _resume(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self._coro is coro:  # (not abandoned meanwhile)
            self._step(coro)
