"""The harness frontend's bounded waits and liveness probes.

A case is a sequential script: it sends, then waits for what it expects. Every wait here is
bounded by its own timeout and by the case's budget (:attr:`Waits.deadline`), and ends early,
with that evidence, when the engine cannot answer any more: its process exited
(:class:`PeerCrashed`, or :class:`FailedClosed` if it said ENGINE_CORE_DEAD first) or it closed
an input connection and went quiet (:class:`EngineStoppedReading`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, NoReturn, Sequence

import zmq

from ecp.spec import FinishReason

from ..outcomes import CaseFailure, CaseTimeout, FailedClosed, PeerCrashed

#: how long an engine that went away is given for its last frames (an ENGINE_CORE_DEAD) to arrive
LAST_WORDS_S = 0.5
#: how long an engine process that closed its input and output connections is given to exit before
#: it is judged to run on without reading (a crashing process closes its sockets first and exits
#: after: on a loaded machine, some hundreds of milliseconds later)
EXIT_GRACE_S = 2.0


class EngineStoppedReading(CaseFailure):
    """The engine closed an input connection after the handshake and went quiet: it will never answer
    what the case waits for. A FAIL of the case's requirement (or of the clause a probe names), with
    that evidence, at once -- not a wait that runs out."""


class Waits:
    """The waits, as a part of :class:`~.harness_frontend.HarnessFrontend` (they pump its sockets
    and read its index of what arrived)."""

    outputs: list
    input_closed: tuple[int, float] | None
    output_closed: tuple[int, float] | None
    read_monitors: Callable[[], None]
    engine_dead: bool
    replies: dict
    sent_call_ids: set
    _last_output_at: float
    pump: Callable[[float], None]
    _on_output: Callable[[int, list], None]
    seen: Callable[[str], list]
    tokens: Callable[[str], list]
    terminals: Callable[[str], list]
    new_id: Callable[[str], str]
    request: Callable[..., Any]
    add: Callable[..., str]
    send_utility: Callable[..., int]

    def __init__(self, quiet_window_s: float) -> None:
        self.quiet_window_s = quiet_window_s
        #: the case's budget: no wait runs past it
        self.deadline: float | None = None
        #: returns False once the engine process is gone (waits then fail fast with PeerCrashed)
        self.alive_check: Callable[[], bool] | None = None
        #: waits at most the given seconds for the engine's process to exit; True once it has (None:
        #: the engine has no process the harness can watch)
        self.exit_wait: Callable[[float], bool] | None = None
        #: why the last liveness probe failed (the engine is not probed again after the case)
        self.stopped_serving: str | None = None

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Pump until ``predicate()`` holds; raise :class:`CaseTimeout` naming ``what`` if it never does."""
        end = time.monotonic() + timeout
        while not predicate():
            self._check_input_open(what)
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                raise CaseTimeout(f"case time budget exhausted while waiting for {what}")
            if now >= end:
                raise CaseTimeout(f"no {what} within {timeout:.1f}s")
            self.pump(min(end, now + 0.1))

    def observe(self, window: float | None = None) -> None:
        """Keep receiving for ``window`` seconds (default: the quiet window) to see what else arrives."""
        end = time.monotonic() + (self.quiet_window_s if window is None else window)
        while time.monotonic() < end and (self.deadline is None or time.monotonic() < self.deadline):
            self.pump(end)

    def wait_finished(self, rid: str, timeout: float = 5.0, max_tokens: int | None = None) -> Any:
        """Wait for the terminal output of ``rid``.

        ``timeout`` bounds the wait for progress, not for the whole request: while
        the request's outputs keep arriving the wait goes on, up to the case's
        budget (which follows the engine's measured pace, docs/conformance.md "Time
        budgets"), so a slow engine that is still producing tokens is waited for;
        one that goes silent for ``timeout`` seconds times out. When ``max_tokens``
        tokens arrived and the engine then stays quiet for the quiet window without
        a terminal output, that is a violation of ``ECP-OUT-1``, not a timeout.
        """
        started = time.monotonic()
        end = started + timeout
        while not self.terminals(rid):
            seen = self.seen(rid)
            if seen:
                end = max(end, seen[-1].t + timeout)
            self._check_input_open(f"end of request {rid}")
            if max_tokens is not None and len(self.tokens(rid)) >= max_tokens:
                last = self.seen(rid)[-1].t
                if time.monotonic() - last >= self.quiet_window_s:
                    raise CaseFailure(f"request {rid} produced {len(self.tokens(rid))} tokens "
                                      f"(max_tokens={max_tokens}) but no terminal output followed",
                                      clause="ECP-OUT-1")
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                raise CaseTimeout(f"case time budget exhausted while waiting for the end of {rid}")
            if now >= end:
                raise CaseTimeout(f"request {rid} did not finish within {now - started:.1f}s "
                                  f"({len(self.tokens(rid))} tokens so far, none in the last {timeout:.1f}s)")
            self.pump(min(end, now + 0.05))
        return self.terminals(rid)[0]

    def call(self, method: str, args: Sequence[Any] = (), *, engine: int = 0, client: int = 0,
             call_id: int | None = None, timeout: float = 5.0) -> Any:
        """Send a UTILITY call and wait for the reply carrying its call id."""
        cid = self.send_utility(method, args, engine=engine, client=client, call_id=call_id)

        def answered() -> bool:
            strays = sorted(k for k in self.replies if k not in self.sent_call_ids)
            if strays and not self.replies.get(cid):
                raise CaseFailure(f"utility {method} (call_id {cid}): a reply carries call_id(s) {strays} "
                                  "that were never sent", clause="ECP-UTIL-1")
            return bool(self.replies.get(cid))

        self.wait(answered, timeout, f"the reply to utility {method}{tuple(args)!r} (call_id {cid})")
        return self.replies[cid][0]

    def serves(self, engine: int = 0, client: int = 0, after: str = "", timeout: float = 5.0,
               clause: str = "ECP-ROB-1") -> None:
        """Liveness probe: a 2-token request completes with LENGTH; a CaseFailure citing ``clause`` if not."""
        rid = self.new_id("probe")
        self.add(self.request(rid, max_tokens=2, client=client), engine)
        try:
            term = self.wait_finished(rid, timeout, max_tokens=2)
        except (CaseTimeout, EngineStoppedReading) as exc:
            self.stopped_serving = str(exc)
            running = self.alive_check is None or self.alive_check()
            state = "" if isinstance(exc, EngineStoppedReading) else (
                f"; it sent no ENGINE_CORE_DEAD and its process {'is still running' if running else 'exited'}")
            raise CaseFailure(f"the engine stopped serving{' after ' + after if after else ''}: {exc}{state}",
                              clause=clause) from None
        if term.output.finish_reason != FinishReason.LENGTH or len(self.tokens(rid)) != 2:
            raise CaseFailure(f"probe request after {after or 'the case'} ended with "
                              f"{term.output.finish_reason!r} and {len(self.tokens(rid))} tokens "
                              "(expected LENGTH after 2)", clause=clause)

    # ------------------------------------------------------------------ the engine is gone
    def _check_alive(self) -> None:
        """Raise once the engine's process is gone (see :meth:`_process_gone`)."""
        if self.alive_check is not None and not self.alive_check():
            self._process_gone()

    def _read_last_words(self) -> None:
        """Read what the engine left in our output sockets before it went away; raise FailedClosed if an
        ENGINE_CORE_DEAD is among it. Frames sent just before an exit can still be in ZeroMQ's I/O
        thread, so this waits on the output sockets (not a sleep) up to LAST_WORDS_S for them."""
        if self.engine_dead:
            raise FailedClosed("the engine sent ENGINE_CORE_DEAD")
        poller = zmq.Poller()
        for sock in self.outputs:
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + LAST_WORDS_S
        while True:
            for client, sock in enumerate(self.outputs):
                for _ in range(1000):
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_output(client, frames)  # raises FailedClosed on ENGINE_CORE_DEAD
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(int(remaining * 1000)):
                return

    def _process_gone(self, what: str = "the engine process exited") -> NoReturn:
        """The engine's process is gone: FailedClosed if it sent ENGINE_CORE_DEAD first, else PeerCrashed."""
        self._read_last_words()
        raise PeerCrashed(f"{what} without sending ENGINE_CORE_DEAD")

    def _check_input_open(self, what: str) -> None:
        """Raise once an engine closed an input connection and nothing arrived for a quiet window
        since: what the case waits for will not come (outputs still in flight were let in)."""
        if self.input_closed is None:
            return
        client, at = self.input_closed
        if time.monotonic() - max(at, self._last_output_at) >= self.quiet_window_s:
            self._connection_closed(f"no {what}: the engine closed its connection to input[{client}]",
                                    f"no {what}: the engine closed its connection to input[{client}] -- it reads "
                                    "no more input")

    def _connection_closed(self, gone: str, stopped: str) -> NoReturn:
        """An engine closed an input connection: a crash if its process is gone, or exits within
        :data:`EXIT_GRACE_S` after closing its outputs too; FailedClosed if it said ENGINE_CORE_DEAD
        first; otherwise it runs on without reading, a FAIL with that evidence
        (:class:`EngineStoppedReading`), at once when its outputs are still connected."""
        self._read_last_words()
        if self.alive_check is None:  # the case waits for the engine's exit itself (ENG-ROB-8)
            raise EngineStoppedReading(f"{stopped} and it sent no ENGINE_CORE_DEAD")
        self.read_monitors()
        leaving = self.output_closed is not None and self.exit_wait is not None
        if not self.alive_check() or (leaving and self.exit_wait(EXIT_GRACE_S)):  # type: ignore[misc]
            self._process_gone(f"{gone}: its process exited")
        raise EngineStoppedReading(f"{stopped}, though its process is still running and it sent no "
                                   "ENGINE_CORE_DEAD")
