"""SIGTERM, SIGINT and SIGHUP as an exception, and the sections an interrupt does not cut.

:func:`interruptible` turns the first SIGTERM, SIGINT or SIGHUP (the terminal went away) into
:class:`Interrupted`, raised in the main thread at whatever Python line it is running, as
``KeyboardInterrupt`` is; later signals are ignored, so that stopping the peers is not cut short. The harness's cleanup (``finally`` blocks,
``except BaseException``, pytest's fixture teardown in a conformance run) then stops the peers it
holds. The conformance runs and the explorer run under it.

A peer it does not hold yet cannot be stopped: one started a moment before, whose handle had not
reached its owner when the exception was raised, would outlive the harness. Code that starts or
stops a peer runs under :func:`deferred`: an interrupt that arrives inside is raised when the
outermost section ends, once the handle is held (or the stop is done). Sections in other threads
defer nothing; signal handlers run only in the main thread, so nothing is raised there.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from typing import Iterator

#: the signals that end a run (SIGHUP where the platform has it): its peers run in sessions of their
#: own, so a closed terminal reaches only the harness, which must stop them
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """One of :data:`SIGNALS` arrived (``args[0]``: its name). A KeyboardInterrupt: the handlers that
    turn a failed launch or step into a finding must not take it for one, and pytest (which runs
    the conformance cases) stops the run and tears its fixtures down, the peers with them."""


@dataclass
class Caught:
    """What :func:`interruptible` caught: the first signal's name, or None."""

    name: str | None = None

    @property
    def exit_code(self) -> int:
        """The shell's code for a process that the signal ended: 128 + its number."""
        assert self.name is not None
        return 128 + signal.Signals[self.name].value


_depth = 0                     # nesting of deferred() sections in the main thread
_pending: str | None = None    # an interrupt that arrived inside one, raised when the outermost ends


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interruptible() -> Iterator[Caught]:
    """Within the block, the first of :data:`SIGNALS` raises :class:`Interrupted` in the main thread
    (at the end of a :func:`deferred` section if one is running) and is recorded in the
    :class:`Caught` the block gets, for a caller whose callee swallows the exception (pytest);
    later ones are ignored. The previous handlers come back at the end. In another thread nothing
    changes."""
    caught = Caught()
    if not _main_thread():
        yield caught
        return

    def handler(signum: int, frame: object) -> None:  # noqa: ARG001
        global _pending
        if caught.name is not None:
            return
        caught.name = signal.Signals(signum).name
        if _depth:
            _pending = caught.name
        else:
            raise Interrupted(caught.name)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield caught
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run the block whole: an interrupt that arrives inside it is raised when the outermost such
    section ends, in place of any exception the block raised (that one stays as its context).
    Sections nest; outside the main thread this does nothing."""
    global _depth, _pending
    if not _main_thread():
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _pending is not None:
            name, _pending = _pending, None
            raise Interrupted(name)
