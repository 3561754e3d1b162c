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

The cleanup is bounded: a peer's stop is (``CommandPeer.stop``), and should anything else hold the
harness, the first signal also arms a last resort: :data:`LAST_RESORT_S` later, every peer still
running and every process it started get SIGKILL (the callbacks registered with
:func:`on_last_resort`) and the process exits with 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

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


#: seconds from the first signal after which a harness still running kills its peers and exits
LAST_RESORT_S = 20.0

_last_resort: list[Callable[[], None]] = []


def on_last_resort(callback: Callable[[], None]) -> None:
    """Call ``callback`` (from a timer thread; it must not block) when a run is still going
    :data:`LAST_RESORT_S` after its first signal, just before the process exits."""
    _last_resort.append(callback)


def _give_up(name: str) -> None:
    """The last resort: the cleanup after ``name`` did not end in time."""
    for callback in _last_resort:
        with contextlib.suppress(Exception):
            callback()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"ecp: still stopping {LAST_RESORT_S:g} s after {name}: the peers it started were "
                         "killed (SIGKILL); exiting\n")
        sys.stderr.flush()
    os._exit(128 + signal.Signals[name].value)


_depth = 0                     # nesting of deferred() sections in the main thread
_pending: str | None = None    # an interrupt that arrived inside one, raised when the outermost ends


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interruptible() -> Iterator[Caught]:
    """Within the block, the first of :data:`SIGNALS` raises :class:`Interrupted` in the main thread
    (at the end of a :func:`deferred` section if one is running) and is recorded in the
    :class:`Caught` the block gets, for a caller whose callee swallows the exception (pytest);
    later ones are ignored. The first also arms the last resort (:data:`LAST_RESORT_S`), disarmed when
    the block ends. The previous handlers come back at the end. In another thread nothing changes."""
    caught = Caught()
    if not _main_thread():
        yield caught
        return
    timer: list[threading.Timer] = []

    def handler(signum: int, frame: object) -> None:  # noqa: ARG001
        global _pending
        if caught.name is not None:
            return
        caught.name = signal.Signals(signum).name
        timer.append(threading.Timer(LAST_RESORT_S, _give_up, args=(caught.name,)))
        timer[0].daemon = True
        timer[0].start()
        if _depth:
            _pending = caught.name
        else:
            raise Interrupted(caught.name)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield caught
    finally:
        for t in timer:
            t.cancel()
        for sig, old in previous.items():
            signal.signal(sig, old)


def ignore_further() -> None:
    """Ignore :data:`SIGNALS` from now on: for a command that was interrupted and is only saying so on
    its way out, so that an impatient second Ctrl-C does not end it in a traceback (its peers are
    stopped by then). Only in the main thread."""
    if _main_thread():
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


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
