"""The frontend role's skeleton: the handshake of N engines, sans-IO.

:class:`FrontendPeer` knows the frontend's side of startup (spec/PROTOCOL.md
section 2): answer each engine's HELLO with INIT, take its ready payload on
every input (the registration), open the coordinator gate once every engine
subscribed, take READY; the handshake is over when every engine is READY and
registered on every input. Every message goes through the frontend protocol
machine (:class:`~ecp.spec.machine.FrontendConnection`, :attr:`machine`). The
caller binds the sockets (INIT carries the addresses they resolved to), moves
the frames, bounds each stage (``ECP-HS-8``, :attr:`stage` names the one
under way) and keeps its own policy (``ECP-HS-9``/``-10``).

The progress of every identity that spoke is kept (:attr:`progress`), the
configured ones and, for a harness that judges its engine, any other
(``answer_any_hello=True``: a malformed HELLO or an unexpected identity is
answered with INIT all the same, so the engine can go on and every later case
can still run; the machine records what it broke).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import LocalProtocolError, ProtocolError
from ..handshake import EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready
from ..limits import DEFAULT_LIMITS, DecodeLimits
from ..machine import (
    CoordinatorReady, CoordinatorSubscribe, EngineHello, EngineReady, Event, FrontendConnection, Init, Mode,
    Registration, Send, parse_socket,
)
from .steps import Stage

#: the stages a frontend waits through, in order (``ECP-HS-8`` bounds each)
STAGES = (Stage.HELLO, Stage.REGISTRATION, Stage.READY)


@dataclass
class Progress:
    """What one identity did in the handshake (configured or not)."""

    identity: bytes
    #: the first handshake message arrived (HELLO, or something that stood for it)
    spoke_at: float | None = None
    hello: Hello | None = None
    init_sent: bool = False
    #: input index -> when its registration arrived (the first one)
    registered: dict[int, float] = field(default_factory=dict)
    ready: Ready | None = None
    ready_at: float | None = None
    #: the inputs registered when READY arrived
    registered_at_ready: frozenset[int] | None = None
    #: handshake messages read as HELLO, as READY (more than one of either broke ``ECP-HS-7``)
    hellos: int = 0
    readies: int = 0

    @property
    def rank(self) -> int | None:
        return int.from_bytes(self.identity, "little") if len(self.identity) == 2 else None


@dataclass(frozen=True)
class HandshakeResult:
    """The outcome of a completed handshake."""

    ranks: tuple[int, ...]
    #: rank -> ready payload of input 0 (``None`` for an empty payload, ``ECP-HS-12``)
    ready_responses: dict[int, EngineCoreReadyResponse | None]
    #: minimum over engines (``ECP-HS-9``); ``None`` if every payload was empty
    max_model_len: int | None
    #: sum over engines
    num_gpu_blocks: int
    hellos: dict[int, Hello] = field(default_factory=dict)


class FrontendPeer:
    """The frontend's handshake with the engines of global ranks ``ranks``.

    ``init`` is what every engine gets after its HELLO (``None`` when ``bootstrapped``: engines
    register on their inputs directly, there is no handshake socket). ``clients``: how many
    input/output pairs INIT names. ``mode`` is the machine's (``"record"``: a harness that judges
    its engines; ``"strict"``: a violation raises and the caller fails the handshake). ``codec``:
    the release the engines speak (:func:`ecp.spec.profile.wire_codec`; vLLM 0.33's by default).
    """

    def __init__(self, ranks: Sequence[int], init: EngineHandshakeMetadata | None, *, clients: int = 1,
                 bootstrapped: bool = False, mode: Mode = "strict", limits: DecodeLimits = DEFAULT_LIMITS,
                 answer_any_hello: bool = False, clock=time.monotonic, codec: Any = None) -> None:
        if not bootstrapped and init is None:
            raise LocalProtocolError("a frontend that owns the handshake needs the INIT to send",
                                     clause="ECP-HS-2")
        self.ranks = tuple(ranks)
        self.init = init
        self.bootstrapped = bootstrapped
        self.clients = clients
        self.machine = FrontendConnection(self.ranks, clients=clients, bootstrapped=bootstrapped, limits=limits,
                                          mode=mode, codec=codec)
        self.answer_any_hello = answer_any_hello
        self._clock = clock
        self._init_frame = None if init is None else self.machine.codec.encode_handshake(init)
        self._actions: list[Send] = []
        #: identity -> what it did, in the order identities first spoke
        self.progress: dict[bytes, Progress] = {}
        #: coordinator subscriptions seen (``ECP-HS-6``)
        self.subscriptions = 0
        self.gate_opened = False

    # ------------------------------------------------------------------ what to do
    def actions(self) -> list[Send]:
        """The messages due now (INIT answers), in order; each is returned once."""
        out, self._actions = self._actions, []
        return out

    def missing(self, stage: Stage | str) -> list[int]:
        """Configured ranks that have not reached ``stage`` (``HELLO``, ``registration``, ``READY``)."""
        return self.machine.missing(Stage(stage).value)

    @property
    def stage(self) -> Stage | None:
        """The earliest stage some configured engine has not reached; ``None`` when done."""
        for stage in STAGES:
            if self.missing(stage):
                return stage
        return None

    @property
    def done(self) -> bool:
        return self.stage is None

    @property
    def gate_due(self) -> bool:
        """INIT names a coordinator, every configured engine subscribed to it, and the gate is not
        open yet (``ECP-HS-6``). The coordinator's ``READY`` reaches only engines already
        subscribed, so it waits for all of them, not just those that said HELLO so far."""
        return (self.init is not None and self.init.addresses.coordinator_input is not None
                and not self.gate_opened and self.subscriptions >= len(self.ranks))

    def complete(self, count: int) -> list[Progress]:
        """The identities (configured or not) READY and registered on every input, if ``count`` of
        them are; else ``[]`` (a harness serves whoever completed)."""
        done = [p for p in self.progress.values() if p.ready is not None and self.all_registered(p)]
        return done if len(done) >= count else []

    def all_registered(self, progress: Progress) -> bool:
        return all(c in progress.registered for c in range(self.clients))

    # ------------------------------------------------------------------ receiving
    def receive(self, socket: str, frames: Sequence[bytes]) -> list[Event]:
        """Feed what ``socket`` received (ROUTER frames start with the identity); get the events.

        A HELLO queues its INIT (:meth:`actions`). In strict mode a message that breaks the
        handshake raises :class:`~ecp.spec.HandshakeError` (the machine's); in recording mode it
        is recorded in ``machine.violations``."""
        kind, client = parse_socket(socket)
        if kind == "coordinator_input":
            events = self.machine.receive(socket, frames)
            self.subscriptions += sum(isinstance(e, CoordinatorSubscribe) for e in events)
            return events
        identity = bytes(frames[0]) if frames else b""
        progress = self.progress.get(identity)
        if progress is None and kind in ("handshake", "input"):
            progress = self.progress[identity] = Progress(identity)
        events = self.machine.receive(socket, frames)
        now = self._clock()
        if kind == "handshake":
            first = progress.spoke_at is None
            message: Hello | Ready | None = None
            for event in events:
                message = event.hello if isinstance(event, EngineHello) else \
                    event.ready if isinstance(event, EngineReady) else message
            if not events and self.answer_any_hello:
                # the machine could not attribute or read it (recorded): read here what it stands for
                message = self._read(frames)
            progress.hellos += isinstance(message, Hello)
            progress.readies += isinstance(message, Ready)
            if first:  # the first message stands for HELLO, whatever it is
                progress.spoke_at = now
                progress.hello = message if isinstance(message, Hello) else None
                if events and isinstance(events[0], EngineHello):
                    self._send_init(progress, lambda rank=events[0].rank: self.machine.send(Init(rank, self.init)))
                elif self.answer_any_hello:
                    # malformed, not a HELLO, or an identity outside the configured ranks: answered all
                    # the same, around the rules, so that the engine goes on and later cases can run
                    self._send_init(progress, lambda: [self.machine.send_raw("handshake",
                                                                             [identity, self._init_frame])])
            elif isinstance(message, Ready) and progress.ready is None:
                progress.ready, progress.ready_at = message, now
                progress.registered_at_ready = frozenset(progress.registered)
        elif kind == "input":
            if any(isinstance(e, Registration) for e in events) or (
                    self.machine.mode == "record" and client not in progress.registered):
                progress.registered.setdefault(client, now)
        return events

    def _send_init(self, progress: Progress, make) -> None:
        if progress.init_sent or self._init_frame is None:
            return
        self._actions += make()
        progress.init_sent = True

    def _read(self, frames: Sequence[bytes]) -> Hello | Ready | None:
        if len(frames) != 2:
            return None
        try:
            return self.machine.codec.decode_handshake(frames[1])
        except ProtocolError:
            return None

    # ------------------------------------------------------------------ the gate
    def open_gate(self) -> list[Send]:
        """The coordinator's ``READY`` to every subscribed engine (``ECP-HS-6``); a
        :class:`~ecp.spec.LocalProtocolError` before every engine subscribed."""
        sends = self.machine.send(CoordinatorReady())
        self.gate_opened = True
        return sends

    # ------------------------------------------------------------------ the outcome
    def result(self) -> HandshakeResult:
        """What the engines said, once :attr:`done`."""
        if not self.done:
            raise LocalProtocolError(f"the handshake is incomplete at stage {self.stage.value}", clause="ECP-HS-8")
        engines = self.machine.engines
        responses = {r: engines[r].responses.get(0) for r in self.ranks}
        lens = [p.max_model_len for p in responses.values() if p is not None]
        return HandshakeResult(
            ranks=self.ranks, ready_responses=responses, max_model_len=min(lens) if lens else None,
            num_gpu_blocks=sum(p.num_gpu_blocks for p in responses.values() if p is not None),
            hellos={r: v.hello for r, v in engines.items() if v.hello is not None})
