"""The relay: ZeroMQ sockets between the real frontend and the engines.

Per engine (identified by the ZeroMQ identity of its handshake DEALER) the
monitor holds the upstream end of each of the engine's connections, with the
socket type the engine itself would use, and a bound downstream end of the
type the frontend would use::

    engine DEALER --> [ROUTER  listen  | DEALER id=engine] --> frontend handshake ROUTER
    engine DEALER --> [ROUTER  input i | DEALER id=engine] --> frontend input ROUTER i
    engine PUSH   --> [PULL    output i| PUSH            ] --> frontend output PULL i
    engine XSUB   --> [XPUB    coord in| XSUB id=engine  ] --> coordinator XPUB
    engine PUSH   --> [PULL    coord out| PUSH           ] --> coordinator PULL

The engine's HELLO opens its upstream handshake DEALER; the frontend's INIT
is rewritten (:mod:`.rewrite`) to the downstream addresses (and the
coordinator addresses the ready payload echoes are mapped back), which are bound
on the same transport as the originals (tcp on ``relay_host``, or ipc in a
private directory). Every message is forwarded unchanged (identity frames
are the sockets' business) and then handed to the :class:`Session`; with
``fail_closed`` it is checked first and relaying stops at the first MUST
violation. When an engine's input connection closes, the monitor forwards
what that engine already sent, then closes its upstream input sockets so the
frontend sees the engine leave, as it would without the monitor.

All sockets live in one thread (:meth:`Relay.run`); every send is
non-blocking and nothing a peer sends can stop the loop.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from ecp.spec.peer.zmq_io import stop_monitors

from .observed import (
    COORDINATOR_INPUT, COORDINATOR_OUTPUT, HANDSHAKE, INPUT, OUTPUT, TO_ENGINE, TO_FRONTEND,
)
from .rewrite import Addresses, RewriteError, parse_init, restore_ready_response, rewrite_init
from .session import Session

POLL_MS = 100
#: engine identities the relay opens upstream sockets for (``--max-engines``): each costs about
#: two descriptors at once and a dozen more per INIT, so a peer sending HELLO under ever new
#: identities (the 2-byte space has 65,536) cannot exhaust the monitor's descriptors
DEFAULT_MAX_ENGINES = 256
#: client pairs (input + output socket) one INIT may make the relay build (``--max-clients``)
DEFAULT_MAX_CLIENTS = 64
#: messages taken from one socket before the loop looks at the others (fairness)
BATCH = 256
#: how long sockets toward a peer keep undelivered messages at shutdown
SHUTDOWN_LINGER_MS = 1000


class RelayError(Exception):
    """The relay cannot start (an address it cannot bind or connect)."""


def rank_of(identity: bytes) -> int | None:
    return int.from_bytes(identity, "little") if len(identity) == 2 else None


@dataclass
class Pipe:
    """One direction of one connection: what ``src`` receives goes out on ``dst``."""

    src: zmq.Socket
    dst: zmq.Socket
    direction: str
    socket: str
    client: int | None
    #: ``src`` is a ROUTER: drop the identity frame it prepends
    strip_identity: bool = False
    #: ``dst`` is a ROUTER: address the engine by its identity
    route_to: bytes | None = None
    #: rewrites what is forwarded (not what is observed): handshake rewriting only
    transform: Callable[[list[bytes]], list[bytes]] | None = None


@dataclass
class EngineLink:
    identity: bytes
    rank: int | None
    handshake_up: zmq.Socket
    generation: int = 0
    sockets: list = field(default_factory=list)  # relay sockets of the current INIT
    outputs_down: list = field(default_factory=list)
    inputs_up: list = field(default_factory=list)
    gone: bool = False
    #: the addresses of the last INIT and what they were rewritten to
    original: Addresses | None = None
    rewritten: Addresses | None = None


class _RelaySockets:
    """The relay sockets of each engine's INIT, as a part of :class:`Relay`: one pair per address
    INIT names, bound like the frontend's and piped both ways; built again when INIT changes."""

    session: Session
    max_clients: int
    _socket: Callable[..., zmq.Socket]
    _bind_like: Callable[[zmq.Socket, str, str], str]
    _watch: Callable[[zmq.Socket, Callable[[zmq.Socket], Any]], None]
    _unwatch: Callable[[zmq.Socket], None]
    _observe: Callable[..., bool]
    _send: Callable[[zmq.Socket, list, str], None]
    _warn: Callable[[str], None]
    _on_disconnect: Callable[[EngineLink, zmq.Socket], bool]
    _on_frontend_disconnect: Callable[[EngineLink, int, zmq.Socket], bool]

    def _teardown(self, link: EngineLink) -> None:
        stop_monitors(link.sockets)  # before their readers close (stop_monitors says why)
        for s in link.sockets:
            self._unwatch(s)
            s.close(0)
        link.sockets, link.outputs_down, link.inputs_up = [], [], []
        link.original = link.rewritten = None

    def _relay_addresses(self, link: EngineLink, a: Addresses) -> Addresses:
        """Bind and connect the relay sockets for INIT's addresses; return what the engine gets."""
        if a == link.original and not link.gone and link.rewritten is not None:
            return link.rewritten  # the same INIT again: the engine may still use the relay it has
        self._teardown(link)  # new addresses, or the engine left and came back: start afresh
        link.generation += 1
        link.gone = False
        tag = f"r{link.rank if link.rank is not None else link.identity.hex()}-g{link.generation}"
        try:
            link.rewritten = self._build(link, a, tag)
            link.original = a
            return link.rewritten
        except (zmq.ZMQError, RewriteError) as exc:
            self._teardown(link)
            raise RewriteError(f"cannot set up the relay sockets: {exc}") from None

    def _build(self, link: EngineLink, a: Addresses, tag: str) -> Addresses:
        def pair(down_kind, up_kind, original, name, up_identity):
            down = self._socket(down_kind, linger=SHUTDOWN_LINGER_MS)
            up = self._socket(up_kind, identity=up_identity, linger=SHUTDOWN_LINGER_MS)
            link.sockets += [down, up]
            advertised = self._bind_like(down, original, f"{tag}-{name}")
            up.connect(original)
            return down, up, advertised

        if len(a.inputs) > self.max_clients:
            # the frontend-side bound
            self._warn(f"ecp monitor: INIT for rank {link.rank} names {len(a.inputs)} clients; the relay builds "
                       f"sockets for at most {self.max_clients} (--max-clients): forwarded unrewritten")
            raise RewriteError(f"INIT names {len(a.inputs)} clients, more than --max-clients {self.max_clients}")
        inputs, outputs = [], []
        originals: dict[str, str] = {}  # relay address -> the frontend's, for the ready payload
        for i, (in_addr, out_addr) in enumerate(zip(a.inputs, a.outputs)):
            down, up, adv = pair(zmq.ROUTER, zmq.DEALER, in_addr, f"in{i}", link.identity)
            self._pipe(link, Pipe(down, up, TO_FRONTEND, INPUT, i, strip_identity=True,
                                  transform=lambda frames: self._restore(link, frames, originals)))
            self._pipe(link, Pipe(up, down, TO_ENGINE, INPUT, i, route_to=link.identity))
            mon = down.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            link.sockets.append(mon)
            self._watch(mon, lambda s, link=link: self._on_disconnect(link, s))
            up_mon = up.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            link.sockets.append(up_mon)
            self._watch(up_mon, lambda s, link=link, i=i: self._on_frontend_disconnect(link, i, s))
            link.inputs_up.append(up)
            inputs.append(adv)
            down, up, adv = pair(zmq.PULL, zmq.PUSH, out_addr, f"out{i}", None)
            self._pipe(link, Pipe(down, up, TO_FRONTEND, OUTPUT, i))
            link.outputs_down.append(down)
            outputs.append(adv)
        coord_in = coord_out = None
        if a.coordinator_input is not None and a.coordinator_output is not None:
            down, up, coord_in = pair(zmq.XPUB, zmq.XSUB, a.coordinator_input, "cin", link.identity)
            originals[coord_in] = a.coordinator_input
            self._pipe(link, Pipe(down, up, TO_FRONTEND, COORDINATOR_INPUT, None))
            self._pipe(link, Pipe(up, down, TO_ENGINE, COORDINATOR_INPUT, None))
            down, up, coord_out = pair(zmq.PULL, zmq.PUSH, a.coordinator_output, "cout", None)
            originals[coord_out] = a.coordinator_output
            self._pipe(link, Pipe(down, up, TO_FRONTEND, COORDINATOR_OUTPUT, None))
            link.outputs_down.append(down)
        return Addresses(tuple(inputs), tuple(outputs), coord_in, coord_out)

    def _restore(self, link: EngineLink, frames: list[bytes], originals: dict[str, str]) -> list[bytes]:
        """The ready payload echoes the coordinator addresses INIT gave: give the frontend its own back."""
        if not originals or len(frames) != 1:
            return frames
        restored = restore_ready_response(frames[0], originals)
        if restored is None:
            return frames
        self.session.note("ready_response_restored", rank=link.rank)
        return [restored]

    def _pipe(self, link: EngineLink, p: Pipe) -> None:
        what = f"{p.socket} message of rank {link.rank} {p.direction}"

        def handle(sock: zmq.Socket) -> bool:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return False
            payload = frames[1:] if p.strip_identity else frames
            if self._observe(p.direction, link, p.socket, p.client, payload):
                out = p.transform(payload) if p.transform is not None else payload
                self._send(p.dst, [p.route_to, *out] if p.route_to is not None else out, what)
            return True

        self._watch(p.src, handle)


class Relay(_RelaySockets):
    def __init__(self, listen: str, frontend: str, session: Session, *, relay_host: str = "127.0.0.1",
                 fail_closed: bool = False, max_engines: int = DEFAULT_MAX_ENGINES,
                 max_clients: int = DEFAULT_MAX_CLIENTS, warn: Callable[[str], None] | None = None) -> None:
        if max_engines < 1 or max_clients < 1:
            raise ValueError("max_engines and max_clients must be at least 1")
        self.listen_address = listen
        self.frontend = frontend
        self.session = session
        self.relay_host = relay_host
        self.fail_closed = fail_closed
        self.tripped = False  # fail-closed: relaying stopped
        self.ctx = zmq.Context()
        self.poller = zmq.Poller()
        self.handlers: dict[zmq.Socket, Callable[[zmq.Socket], None]] = {}
        self.links: dict[bytes, EngineLink] = {}
        self._ipc_dir: str | None = None
        self._todo: list[tuple] = []
        self.listen: zmq.Socket | None = None
        self.bound_address: str | None = None
        self.drops = 0
        #: the bounds per side: engine identities (engine side), client pairs per INIT (frontend side)
        self.max_engines = max_engines
        self.max_clients = max_clients
        #: messages dropped because their identity was over ``max_engines`` (counted, never stored)
        self.refused_identities = 0
        self._warn = warn if warn is not None else (lambda line: print(line, file=sys.stderr, flush=True))

    # ------------------------------------------------------------------ sockets
    def _socket(self, kind: int, identity: bytes | None = None, linger: int = 0) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, linger)
        s.setsockopt(zmq.SNDHWM, 0)  # as the peers do: never drop a burst
        s.setsockopt(zmq.RCVHWM, 0)
        if identity is not None:
            s.setsockopt(zmq.IDENTITY, identity)
        if kind == zmq.ROUTER:
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is a counted drop, not silence
        if kind == zmq.XPUB:
            s.setsockopt(zmq.XPUB_VERBOSE, 1)  # pass every engine's subscription on
        return s

    def _watch(self, sock: zmq.Socket, handler: Callable[[zmq.Socket], None]) -> None:
        self.handlers[sock] = handler
        self.poller.register(sock, zmq.POLLIN)

    def _unwatch(self, sock: zmq.Socket) -> None:
        if self.handlers.pop(sock, None) is not None:
            self.poller.unregister(sock)

    def _bind_like(self, sock: zmq.Socket, original: str, tag: str) -> str:
        """Bind ``sock`` on the transport of ``original``; return the address to advertise."""
        if original.startswith("tcp://"):
            sock.bind(f"tcp://{self.relay_host}:*")
        elif original.startswith("ipc://"):
            if self._ipc_dir is None:
                self._ipc_dir = tempfile.mkdtemp(prefix="ecp-monitor-")
            sock.bind(f"ipc://{os.path.join(self._ipc_dir, tag)}")
        else:
            raise RewriteError(f"cannot relay {original!r}: only tcp:// and ipc:// addresses")
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)

    # ------------------------------------------------------------------ start / stop
    def start(self) -> str:
        """Bind the handshake address engines connect to; return it (ports resolved)."""
        self.listen = self._socket(zmq.ROUTER, linger=SHUTDOWN_LINGER_MS)
        try:
            self.listen.bind(self.listen_address)
        except zmq.ZMQError as exc:
            raise RelayError(f"cannot bind {self.listen_address!r}: {exc}") from None
        self.bound_address = self.listen.getsockopt_string(zmq.LAST_ENDPOINT)
        self._watch(self.listen, self._on_engine_handshake)
        return self.bound_address

    def run(self, stop: threading.Event) -> None:
        """Relay until ``stop`` is set (or, with ``fail_closed``, the first MUST violation)."""
        while not stop.is_set() and not self.tripped:
            events = self.poller.poll(POLL_MS)
            # An engine sends its ready payload before READY: when both wait, take the handshake
            # socket last so that the observed order is the order they were sent in.
            events.sort(key=lambda e: e[0] is self.listen)
            for sock, _ in events:
                for _ in range(BATCH):
                    handler = self.handlers.get(sock)
                    if handler is None or self.tripped:
                        break  # unregistered while handling this batch
                    try:
                        if not handler(sock):
                            break
                    except Exception:  # noqa: BLE001 - a relay bug must not stop the relay
                        self.session.report_error("relay handler failed")
                        break
            self._observe_pending()
        self._observe_pending()

    def close(self) -> None:
        for link in self.links.values():
            for s in [link.handshake_up, *link.sockets]:
                s.close(SHUTDOWN_LINGER_MS)
        if self.listen is not None:
            self.listen.close(SHUTDOWN_LINGER_MS)
        self.ctx.term()
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)

    # ------------------------------------------------------------------ observing
    def _observe(self, direction: str, link: EngineLink, socket: str, client: int | None,
                 frames: list[bytes]) -> bool:
        """Hand a message to the session. Returns False (do not forward) when it trips fail-closed."""
        if not self.fail_closed:
            self._todo.append((direction, link.rank, socket, client, frames))
            return True
        found = self.session.observe(direction, link.rank, socket, client, frames)
        must = [v for v in found if v.finding.level == "MUST"]
        if must:
            self.tripped = True
            self.session.note("fail_closed", seq=self.session.seq, clause=must[0].finding.clause,
                              message=must[0].finding.message)
            return False
        return True

    def _observe_pending(self) -> None:
        todo, self._todo = self._todo, []
        for args in todo:
            self.session.observe(*args)

    def _send(self, sock: zmq.Socket, frames: list[bytes], what: str) -> None:
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            self.drops += 1
            self.session.note("relay_drop", what=what, error=str(exc))

    # ------------------------------------------------------------------ handshake
    def _on_engine_handshake(self, sock: zmq.Socket) -> bool:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return False
        identity, payload = frames[0], frames[1:]
        link = self.links.get(identity)
        if link is None and len(self.links) >= self.max_engines:
            # the engine-side bound: no socket, no state, only a count (one line the first time)
            self.refused_identities += 1
            if self.refused_identities == 1:
                self._warn(f"ecp monitor: refused engine identity {identity.hex()}: already relaying "
                           f"{len(self.links)} engine identities (--max-engines {self.max_engines}); messages "
                           f"under further new identities are dropped and counted")
                self.session.note("engine_identity_refused", identity=identity.hex(), max_engines=self.max_engines)
            return True
        if link is None:
            up = self._socket(zmq.DEALER, identity=identity, linger=SHUTDOWN_LINGER_MS)
            try:
                up.connect(self.frontend)
            except zmq.ZMQError as exc:
                up.close(0)
                self.session.report_error(f"cannot connect to the frontend at {self.frontend!r}: {exc}")
                return True
            link = self.links[identity] = EngineLink(identity, rank_of(identity), up)
            self._watch(up, lambda s, link=link: self._on_init(link, s))
            self.session.note("engine_handshake", rank=link.rank, identity=identity.hex())
        if self._observe(TO_FRONTEND, link, HANDSHAKE, None, payload):
            self._send(link.handshake_up, payload, f"handshake message of rank {link.rank} to the frontend")
        return True

    def _on_init(self, link: EngineLink, sock: zmq.Socket) -> bool:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return False
        if not self._observe(TO_ENGINE, link, HANDSHAKE, None, frames):
            return True
        out = frames
        if len(frames) == 1:
            try:
                doc, original = parse_init(frames[0])
                rewritten = self._relay_addresses(link, original)
                out = [rewrite_init(doc, rewritten)]
                self.session.note("init_rewritten", rank=link.rank, original=original.to_json(),
                                  rewritten=rewritten.to_json())
            except RewriteError as exc:
                self.session.note("init_not_rewritten", rank=link.rank, reason=str(exc))
        else:
            self.session.note("init_not_rewritten", rank=link.rank, reason=f"{len(frames)} frames")
        assert self.listen is not None
        self._send(self.listen, [link.identity, *out], f"INIT to rank {link.rank}")
        return True

    # ------------------------------------------------------------------ peers leaving
    def _on_frontend_disconnect(self, link: EngineLink, client: int, mon: zmq.Socket) -> bool:
        """The frontend's input socket went away: reported; the DEALER reconnects by itself if
        the frontend comes back, and the engine sees what it would see without the monitor."""
        try:
            event = recv_monitor_message(mon, zmq.NOBLOCK)
        except zmq.Again:
            return False
        if event["event"] == zmq.EVENT_DISCONNECTED:
            self.session.note("frontend_gone", rank=link.rank, client=client)
        return True

    def _on_disconnect(self, link: EngineLink, mon: zmq.Socket) -> bool:
        try:
            event = recv_monitor_message(mon, zmq.NOBLOCK)
        except zmq.Again:
            return False
        if event["event"] != zmq.EVENT_DISCONNECTED or link.gone:
            return True
        link.gone = True
        # forward what the engine sent before it left, then let the frontend see it leave
        for down in link.outputs_down:
            handler = self.handlers.get(down)
            while handler is not None and handler(down):
                pass
        for up in link.inputs_up:
            self._unwatch(up)
            up.close(0)
            link.sockets.remove(up)
        link.inputs_up = []
        self._observe_pending()
        self.session.peer_gone(link.rank)
        return True


class RelayThread:
    """A started relay running in a daemon thread (for embedding the monitor in a program,
    a test or a benchmark). :meth:`close` stops it and closes its sockets."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.address = relay.bound_address or relay.start()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=relay.run, args=(self.stop,), name="ecp-monitor-relay", daemon=True)
        self.thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        self.thread.join(timeout)
        if not self.thread.is_alive():
            self.relay.close()
