"""The skeletons over pyzmq: the blocking and asyncio handshake loops every peer here shares.

The one place of :mod:`ecp.spec` that touches sockets (importing :mod:`ecp.spec`
does not import it). :class:`EngineSockets` and :class:`AsyncEngineSockets` open the
sockets an :class:`~.engine.EnginePeer` asks for (the protocol's socket types and
identities; high-water marks off, as vLLM sets them), put its frames on them and
feed back what arrives until the handshake is over; then the caller serves on
:attr:`~EngineSockets.sockets` with its own loop (its own decisions: what to answer,
when to step). :class:`FrontendSockets` and :class:`AsyncFrontendSockets` do the
same for a :class:`~.frontend.FrontendPeer` over the sockets a frontend bound.
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


class FrontendSockets:
    """A :class:`~.frontend.FrontendPeer` over sockets the frontend bound (blocking pyzmq).

    ``sockets`` maps protocol names to them: ``handshake`` (ROUTER), ``input[i]`` (ROUTER) and,
    with a coordinator, ``coordinator_input`` (XPUB, ``XPUB_VERBOSE``). The gate opens as soon as
    every engine subscribed.
    """

    def __init__(self, peer: FrontendPeer, sockets: Mapping[str, zmq.Socket],
                 observe: FrameObserver | None = None) -> None:
        self.peer = peer
        self.sockets = sockets
        self.observe = observe

    def handshake(self, timeout_s: float) -> HandshakeResult:
        """Run the frontend's side until every engine is READY and registered."""
        peer = self.peer
        names = [n for n in self.sockets if n == "handshake" or n.startswith("input[") or n == "coordinator_input"]
        poller = zmq.Poller()
        for name in names:
            poller.register(self.sockets[name], zmq.POLLIN)
        by_socket = {self.sockets[n]: n for n in names}
        deadline = time.monotonic() + timeout_s
        while not peer.done:
            if peer.gate_due:
                self._send(peer.open_gate())
            left = deadline - time.monotonic()
            if left <= 0:
                raise HandshakeTimeout(peer.stage.value, peer.missing(peer.stage), timeout_s)
            for sock, _ in poller.poll(int(left * 1000) + 1):
                frames = sock.recv_multipart()
                events = peer.receive(by_socket[sock], frames)
                if self.observe is not None:
                    self.observe("in", by_socket[sock], frames, events)
                self._send(peer.actions())
        return peer.result()

    def _send(self, sends: Iterable[Send]) -> None:
        for send in sends:
            if self.observe is not None:
                self.observe("out", send.socket, send.frames, None)
            self.sockets[send.socket].send_multipart(send.frames)


class AsyncFrontendSockets(FrontendSockets):
    """:class:`FrontendSockets` over ``zmq.asyncio`` sockets."""

    async def handshake(self, timeout_s: float) -> HandshakeResult:  # type: ignore[override]
        import asyncio

        peer = self.peer
        names = [n for n in self.sockets if n == "handshake" or n.startswith("input[") or n == "coordinator_input"]
        poller = zmq.asyncio.Poller()
        for name in names:
            poller.register(self.sockets[name], zmq.POLLIN)
        by_socket = {self.sockets[n]: n for n in names}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not peer.done:
            if peer.gate_due:
                await self._asend(peer.open_gate())
            left = deadline - loop.time()
            if left <= 0:
                raise HandshakeTimeout(peer.stage.value, peer.missing(peer.stage), timeout_s)
            for sock, _ in await poller.poll(int(left * 1000) + 1):
                frames = await sock.recv_multipart()
                events = peer.receive(by_socket[sock], frames)
                if self.observe is not None:
                    self.observe("in", by_socket[sock], frames, events)
                await self._asend(peer.actions())
        return peer.result()

    async def _asend(self, sends: Iterable[Send]) -> None:
        for send in sends:
            if self.observe is not None:
                self.observe("out", send.socket, send.frames, None)
            await self.sockets[send.socket].send_multipart(send.frames)
