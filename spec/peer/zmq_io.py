"""The skeletons over pyzmq: the blocking and asyncio handshake loops every peer here shares.

The one place of :mod:`ecp.spec` that touches sockets (importing :mod:`ecp.spec`
does not import it). :class:`EngineSockets` and :class:`AsyncEngineSockets` open the
sockets an :class:`~.engine.EnginePeer` asks for (the protocol's socket types and
identities; high-water marks off, as vLLM sets them), put its frames on them and
feed back what arrives until the handshake is over; then the caller serves on
:attr:`~EngineSockets.sockets` with its own loop (its own decisions: what to answer,
when to step). :class:`FrontendSockets` and :class:`AsyncFrontendSockets` run the one
frontend handshake loop over the sockets a frontend bound; what a frontend adds (its
evidence, its policy, when it is done) are :class:`FrontendHooks`.
Every handshake stage is bounded (``ECP-HS-8``):
:class:`~ecp.spec.errors.HandshakeTimeout` names the stage that ran out.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Iterable, Mapping, Union

import zmq
import zmq.asyncio

from ..errors import HandshakeTimeout, ProtocolError, RemoteProtocolError
from ..machine import Event, Send, parse_socket
from .engine import EnginePeer
from .frontend import FrontendPeer, HandshakeResult
from .steps import Action, Connect, Stage

_KINDS = {"DEALER": zmq.DEALER, "ROUTER": zmq.ROUTER, "PUSH": zmq.PUSH, "PULL": zmq.PULL,
          "XSUB": zmq.XSUB, "XPUB": zmq.XPUB}

#: default LINGER (ms) per kind of socket: outputs get time to flush on a graceful exit (``ECP-ROB-5``)
DEFAULT_LINGER_MS: Mapping[str, int] = {"handshake": 1000, "input": 0, "output": 4000,
                                         "coordinator_input": 0, "coordinator_output": 4000}
#: how often a blocking wait looks at its stop condition
POLL_MS = 50

#: ``(direction, socket, frames, outcome)`` for every message the loop moves: ``"out"``, or ``"in"`` with
#: what the skeleton made of it (its events, or the protocol error it raised)
FrameObserver = Callable[[str, str, list, Union[list, ProtocolError, None]], None]
#: what the caller does with an event the handshake produced (a START_DP_WAVE before the gate)
EventHandler = Callable[[Event], Union[None, Awaitable[None]]]
#: what the caller does with a message that broke the protocol while the engine waits for the
#: coordinator's READY (``ECP-ROB-1``: drop it and keep waiting); ``None``: the error is raised
BadMessageHandler = Callable[[RemoteProtocolError, str], None]


def stop_monitors(sockets: Iterable[zmq.Socket]) -> None:
    """Stop the monitor of each socket (one without a monitor is left as is). Call it before a
    monitor's reading socket closes: libzmq sends monitor events with a blocking send from the
    context's I/O thread, so an event for a reader already closed (a peer that disconnects while the
    monitored socket is still open, or being closed) blocks that thread, and with it every socket
    of the context, for good."""
    for sock in sockets:
        if not sock.closed:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass


def open_socket(ctx: zmq.Context, action: Connect, linger_ms: Mapping[str, int] = DEFAULT_LINGER_MS) -> zmq.Socket:
    """A socket as ``action`` asks for it, connected."""
    sock = ctx.socket(_KINDS[action.kind])
    try:
        if action.identity is not None:
            sock.setsockopt(zmq.IDENTITY, action.identity)
        sock.setsockopt(zmq.LINGER, linger_ms.get(parse_socket(action.socket)[0], 0))
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.connect(action.address)
    except zmq.ZMQError:
        sock.close(0)
        raise
    return sock


class _Sockets:
    """What both loops share: the sockets by protocol name, the budgets, the observer."""

    def __init__(self, ctx: Any, peer: EnginePeer, *, linger_ms: Mapping[str, int] | None = None,
                 observe: FrameObserver | None = None) -> None:
        self.ctx = ctx
        self.peer = peer
        self.linger_ms = {**DEFAULT_LINGER_MS, **(linger_ms or {})}
        self.observe = observe
        #: protocol socket name (``handshake``, ``input[0]``, ``output[0]``, ``coordinator_input`` ...) -> socket
        self.sockets: dict[str, Any] = {}

    def _open(self, action: Connect) -> None:
        old = self.sockets.pop(action.socket, None)
        if old is not None:
            old.close(0)
        self.sockets[action.socket] = open_socket(self.ctx, action, self.linger_ms)

    def _budget(self, stage: Stage, timeout_s: float, gate_timeout_s: float | None) -> float:
        return gate_timeout_s if stage is Stage.GATE and gate_timeout_s is not None else timeout_s

    def _timeout(self, stage: Stage, budget: float) -> HandshakeTimeout:
        return HandshakeTimeout(stage.value, [self.peer.rank], budget)

    def _receive(self, socket: str, frames: list, on_bad_message: BadMessageHandler | None) -> list[Event]:
        try:
            events = self.peer.receive(socket, frames)
        except RemoteProtocolError as exc:
            self._seen("in", socket, frames, exc)
            if on_bad_message is None or self.peer.waiting is None or self.peer.waiting.stage is Stage.INIT:
                raise
            on_bad_message(exc, socket)
            return []
        self._seen("in", socket, frames, events)
        return events

    def _seen(self, direction: str, socket: str, frames: list, outcome: list | ProtocolError | None = None) -> None:
        if self.observe is not None:
            self.observe(direction, socket, frames, outcome)

    def close(self, linger: int | None = None) -> None:
        """Close every socket (``linger`` ms overrides each socket's own)."""
        for sock in self.sockets.values():
            if not sock.closed:
                sock.close(linger)
        self.sockets.clear()


class EngineSockets(_Sockets):
    """An :class:`~.engine.EnginePeer` over blocking pyzmq sockets.

    ``stop()`` is asked every :data:`POLL_MS` while waiting: when it says true the
    handshake returns ``False`` and nothing more is sent.
    """

    def __init__(self, ctx: zmq.Context, peer: EnginePeer, *, stop: Callable[[], bool] | None = None,
                 linger_ms: Mapping[str, int] | None = None, observe: FrameObserver | None = None) -> None:
        super().__init__(ctx, peer, linger_ms=linger_ms, observe=observe)
        self.stop = stop or (lambda: False)

    def handshake(self, handshake_address: str | None, timeout_s: float, *, gate_timeout_s: float | None = None,
                  bootstrap: tuple[list[str], list[str]] | None = None,
                  on_event: EventHandler | None = None, on_bad_message: BadMessageHandler | None = None) -> bool:
        """Run the engine's side of the handshake; ``True`` once it serves, ``False`` if stopped.

        ``bootstrap=(inputs, outputs)``: no handshake socket, register on those directly."""
        peer = self.peer
        actions = peer.start_bootstrapped(*bootstrap) if bootstrap is not None else peer.start(handshake_address)
        if not self._perform(actions, timeout_s):
            return False
        while (wait := peer.waiting) is not None:
            budget = self._budget(wait.stage, timeout_s, gate_timeout_s)
            frames = self._recv(wait.socket, budget, wait.stage)
            if frames is None:
                return False
            for event in self._receive(wait.socket, frames, on_bad_message):
                if on_event is not None:
                    on_event(event)
            if not self._perform(peer.actions(), timeout_s):
                return False
        return True

    def send(self, sends: Iterable[Send], flags: int = 0) -> None:
        """Put each :class:`~ecp.spec.machine.Send` on its socket."""
        for send in sends:
            self._seen("out", send.socket, send.frames)
            self.sockets[send.socket].send_multipart(send.frames, flags)

    def _perform(self, actions: list[Action], timeout_s: float) -> bool:
        for action in actions:
            if isinstance(action, Connect):
                self._open(action)
                continue
            sock = self.sockets[action.socket]
            if action.socket.startswith("input[") and not self._wait(sock, zmq.POLLOUT, timeout_s):
                # a DEALER is writable once its ROUTER is connected: the ready payload is then on
                # the wire before READY goes out on the handshake socket (ECP-HS-5)
                return False
            self._seen("out", action.socket, action.frames)
            sock.send_multipart(action.frames)
        return True

    def _wait(self, sock: zmq.Socket, event: int, timeout_s: float, stage: Stage = Stage.REGISTRATION) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.stop():
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timeout(stage, timeout_s)
            if sock.poll(min(POLL_MS, int(left * 1000) + 1), event):
                return True
        return False

    def _recv(self, socket: str, timeout_s: float, stage: Stage) -> list[bytes] | None:
        sock = self.sockets[socket]
        if not self._wait(sock, zmq.POLLIN, timeout_s, stage):
            return None
        return sock.recv_multipart()


class AsyncEngineSockets(_Sockets):
    """An :class:`~.engine.EnginePeer` over ``zmq.asyncio`` sockets (cancel the task to stop it)."""

    def __init__(self, ctx: zmq.asyncio.Context, peer: EnginePeer, *, linger_ms: Mapping[str, int] | None = None,
                 observe: FrameObserver | None = None) -> None:
        super().__init__(ctx, peer, linger_ms=linger_ms, observe=observe)

    async def handshake(self, handshake_address: str | None, timeout_s: float, *,
                        gate_timeout_s: float | None = None, bootstrap: tuple[list[str], list[str]] | None = None,
                        on_event: EventHandler | None = None, on_bad_message: BadMessageHandler | None = None) -> None:
        """Run the engine's side of the handshake until the engine serves."""
        import asyncio

        peer = self.peer
        await self.send_actions(peer.start_bootstrapped(*bootstrap) if bootstrap is not None
                                else peer.start(handshake_address))
        while (wait := peer.waiting) is not None:
            budget = self._budget(wait.stage, timeout_s, gate_timeout_s)
            try:
                frames = await asyncio.wait_for(self.sockets[wait.socket].recv_multipart(), budget)
            except asyncio.TimeoutError:
                raise self._timeout(wait.stage, budget) from None
            for event in self._receive(wait.socket, frames, on_bad_message):
                if on_event is not None:
                    result = on_event(event)
                    if result is not None:
                        await result
            await self.send_actions(peer.actions())

    async def send_actions(self, actions: Iterable[Action]) -> None:
        """Open what ``actions`` connect and send what they send, in order."""
        for action in actions:
            if isinstance(action, Connect):
                self._open(action)
            else:
                await self.send([action])

    async def send(self, sends: Iterable[Send]) -> None:
        """Put each :class:`~ecp.spec.machine.Send` on its socket."""
        for send in sends:
            self._seen("out", send.socket, send.frames)
            await self.sockets[send.socket].send_multipart(send.frames)


#: what the frontend's loop names the stage when the coordinator's gate is what is missing
GATE_STAGE = "coordinator subscriptions"
#: the sockets whose messages are the handshake's; the loop hands what others receive to ``FrontendHooks.other``
HANDSHAKE_SOCKETS = ("handshake", "input", "coordinator_input")


class FrontendHooks:
    """What one frontend adds to the handshake loop (:class:`FrontendSockets`); every method's
    default is the plain frontend's, which completes the handshake or raises. A frontend keeps its
    own evidence or policy here instead of writing a loop of its own: the reference client turns
    the machine's errors into its typed ones, the conformance harness records every frame, the
    timing and what the machine found, and ends when its engines are settled."""

    def receive(self, peer: FrontendPeer, socket: str, frames: list) -> list[Send]:
        """Feed what a handshake socket (``handshake``, ``input[i]``, ``coordinator_input``) received
        to the peer; return what to send now (the INIT answers)."""
        peer.receive(socket, frames)
        return peer.actions()

    def other(self, socket: str, frames: list) -> None:
        """What another socket the loop polls received (an output before the handshake is over)."""

    def sent(self, socket: str, frames: list) -> None:
        """A message the loop is putting on ``socket`` (an INIT, the coordinator's READY)."""

    def finished(self, peer: FrontendPeer, now: float) -> bool:
        """Asked before every wait: ``True`` ends the handshake (raise to abort it). Default: every
        engine READY and registered, and the coordinator's gate open if INIT names one."""
        return peer.done and (not _has_coordinator(peer) or peer.gate_opened)

    def awaited(self, peer: FrontendPeer) -> Stage | None:
        """The stage under way, as a timeout names it (default: the peer's)."""
        return None if peer.stage is None else Stage(peer.stage)

    def gate_due(self, peer: FrontendPeer, now: float) -> bool:
        """Whether to open the coordinator's gate now (default: as soon as every engine subscribed)."""
        return peer.gate_due


def _has_coordinator(peer: FrontendPeer) -> bool:
    return peer.init is not None and peer.init.addresses.coordinator_input is not None


class _Poll:
    """The loop asks its driver for what arrives before ``until`` (one message per ready socket)."""

    __slots__ = ("until",)

    def __init__(self, until: float) -> None:
        self.until = until


class FrontendSockets:
    """A :class:`~.frontend.FrontendPeer` over sockets the frontend bound (blocking pyzmq): the one
    frontend handshake loop of this repository.

    ``sockets`` maps protocol names to them: ``handshake`` (ROUTER), ``input[i]`` (ROUTER) and,
    with a coordinator, ``coordinator_input`` (XPUB, ``XPUB_VERBOSE``); any other named socket
    (``output[i]`` ...) is polled too and what it receives goes to ``hooks.other``. The loop itself
    (:meth:`_turns`) does no I/O: it asks for polls and sends, which the blocking driver here and
    the asyncio one (:class:`AsyncFrontendSockets`) carry out.
    """

    def __init__(self, peer: FrontendPeer, sockets: Mapping[str, Any], hooks: FrontendHooks | None = None,
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self.peer = peer
        self.sockets = sockets
        self.hooks = hooks or FrontendHooks()
        self._clock = clock
        self._names = {sock: name for name, sock in sockets.items()}

    def _turns(self, timeout_s: float, ready_timeout_s: float | None):
        """The loop: open the gate when due, bound each stage (``ECP-HS-8``), wait, hand what arrived
        to the hooks and send what they return, until ``hooks.finished``. ``timeout_s`` bounds the
        whole handshake, or with ``ready_timeout_s`` only until every engine said HELLO: what follows
        (registrations, the gate, READY) gets ``ready_timeout_s`` from then on."""
        peer, hooks, clock = self.peer, self.hooks, self._clock
        deadline, budget = clock() + timeout_s, timeout_s
        later = ready_timeout_s is not None
        while True:
            now = clock()
            if hooks.finished(peer, now):
                return peer.result() if peer.done else None
            if hooks.gate_due(peer, now):
                for send in peer.open_gate():
                    yield send
            if later and not peer.missing(Stage.HELLO):
                deadline, budget, later = now + ready_timeout_s, ready_timeout_s, False
            if now >= deadline:
                raise self._timed_out(budget)
            for socket, frames in (yield _Poll(min(deadline, now + POLL_MS / 1000))):
                if parse_socket(socket)[0] in HANDSHAKE_SOCKETS:
                    yield from hooks.receive(peer, socket, frames)
                else:
                    hooks.other(socket, frames)

    def _timed_out(self, budget: float) -> HandshakeTimeout:
        peer = self.peer
        stage = self.hooks.awaited(peer)
        if _has_coordinator(peer) and not peer.gate_opened and stage in (Stage.READY, None):
            # engines send READY only after the gate: the gate is what is missing
            return HandshakeTimeout(GATE_STAGE, peer.missing(Stage.READY), budget)
        return HandshakeTimeout(stage.value, peer.missing(stage), budget)

    def handshake(self, timeout_s: float, *, ready_timeout_s: float | None = None) -> HandshakeResult | None:
        """Run the frontend's side until ``hooks.finished``; the result once every engine is READY
        and registered (``None`` if a hook ended it before). :class:`HandshakeTimeout` names the
        stage that ran out."""
        poller = zmq.Poller()
        for sock in self._names:
            poller.register(sock, zmq.POLLIN)
        turns = self._turns(timeout_s, ready_timeout_s)
        try:
            step = next(turns)
            while True:
                if isinstance(step, _Poll):
                    ms = max(0, int((step.until - self._clock()) * 1000) + 1)
                    got = [(self._names[s], s.recv_multipart()) for s, _ in poller.poll(ms)]
                else:
                    self.hooks.sent(step.socket, step.frames)
                    self.sockets[step.socket].send_multipart(step.frames)
                    got = None
                step = turns.send(got)
        except StopIteration as done:
            return done.value


class AsyncFrontendSockets(FrontendSockets):
    """:class:`FrontendSockets` over ``zmq.asyncio`` sockets: the same loop, driven with ``await``."""

    async def handshake(self, timeout_s: float, *,  # type: ignore[override]
                        ready_timeout_s: float | None = None) -> HandshakeResult | None:
        poller = zmq.asyncio.Poller()
        for sock in self._names:
            poller.register(sock, zmq.POLLIN)
        turns = self._turns(timeout_s, ready_timeout_s)
        try:
            step = next(turns)
            while True:
                if isinstance(step, _Poll):
                    ms = max(0, int((step.until - self._clock()) * 1000) + 1)
                    got = [(self._names[s], await s.recv_multipart()) for s, _ in await poller.poll(ms)]
                else:
                    self.hooks.sent(step.socket, step.frames)
                    await self.sockets[step.socket].send_multipart(step.frames)
                    got = None
                step = turns.send(got)
        except StopIteration as done:
            return done.value
