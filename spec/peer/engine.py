"""The engine role's skeleton: the handshake's steps and serving, sans-IO.

:class:`EnginePeer` knows the steps of an engine joining a frontend
(spec/PROTOCOL.md section 2): connect the handshake DEALER with the rank's
identity, say HELLO, wait for INIT, connect one input DEALER and one output
PUSH per client INIT names, register the ready payload on every input, pass
the coordinator gate when INIT names a coordinator (subscribe, wait for its
``READY``), say READY, serve. Every message goes through the engine's
protocol machine (:class:`~ecp.spec.machine.EngineConnection`, :attr:`machine`),
so the rules are checked where they live. The caller owns the sockets and
its own decisions: what the ready payload says, what to answer once serving,
and -- for a deliberately faulty test peer -- which step to break
(:class:`~.steps.Deviation`).

A caller's loop::

    peer = EnginePeer(rank, hello=Hello(local=False, headless=True), ready=Ready(...),
                      payload=build_payload)           # INIT -> the ready payload
    perform(peer.start(handshake_address))              # Connect + HELLO
    while (wait := peer.waiting) is not None:           # INIT, then the coordinator gate
        events = peer.receive(wait.socket, recv(wait.socket, budget(wait.stage)))
        perform(peer.actions())
    # serving: peer.receive(...) -> Add, Abort, UtilityCall, StartWave; peer.send(Outputs(...))

:mod:`ecp.spec.peer.zmq` is that loop over pyzmq, shared by every engine here.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

from ..errors import HandshakeError, LocalProtocolError
from ..handshake import XSUB_SUBSCRIBE, EngineCoreReadyResponse, EngineHandshakeMetadata, Hello, Ready, engine_identity
from ..machine import (
    COORDINATOR, CoordinatorReady, CoordinatorSubscribe, EngineConnection, EngineDead, EngineHello, EngineReady,
    Event, Init, Mode, Registration, Send, input_socket, output_socket,
)
from .steps import Action, Connect, Deviation, Stage, Step, Wait

#: the ready payload: given, built from INIT, or raw bytes (a test peer's malformed payload)
Payload = Union[EngineCoreReadyResponse, None, bytes]
PayloadSource = Union[Payload, Callable[[EngineHandshakeMetadata], Payload]]
#: a faulty test peer's choice per step (``index``: the input of a registration), ``None``: the correct step
Deviate = Callable[[Step, Union[int, None]], Union[Deviation, None]]


class EnginePeer:
    """The engine role for global DP rank ``rank``, from HELLO to serving.

    ``hello`` and ``ready`` are the engine's HELLO and READY; ``payload`` its ready payload, or
    a function of INIT that returns it (called once INIT arrived: an engine sizes itself from the
    clients INIT names). ``hold_ready=True`` withholds READY until :meth:`say_ready`. ``identity``
    overrides the rank's 2-byte identity (a faulty peer only). ``mode`` is the machine's:
    ``"record"`` for a harness that judges its peer, ``"strict"`` otherwise. ``codec``: the
    release the engine speaks (:func:`ecp.spec.profile.wire_codec`; vLLM 0.33's by default).
    """

    def __init__(self, rank: int, *, hello: Hello, ready: Ready, payload: PayloadSource = None,
                 mode: Mode = "strict", hold_ready: bool = False, identity: bytes | None = None,
                 deviate: Deviate | None = None, codec: Any = None) -> None:
        self.rank = rank
        self.hello = hello
        self.ready_message = ready
        self.identity = engine_identity(rank) if identity is None else identity
        self.machine = EngineConnection(rank, mode=mode, codec=codec)
        self._payload = payload
        self._hold_ready = hold_ready
        self._deviate = deviate
        self._actions: list[Action] = []
        self._waiting: Wait | None = None
        self.init: EngineHandshakeMetadata | None = None
        #: every input is registered and the gate (if any) passed: the engine serves
        self.serving = False
        #: READY went out
        self.ready_sent = False

    # ------------------------------------------------------------------ what to do
    @property
    def waiting(self) -> Wait | None:
        """What the engine waits for before its next step; ``None`` once it serves."""
        return self._waiting

    def actions(self) -> list[Action]:
        """The actions due now, in order; each is returned once."""
        out, self._actions = self._actions, []
        return out

    @property
    def clients(self) -> int:
        """How many input/output pairs INIT named (0 before INIT)."""
        return 0 if self.init is None else len(self.init.addresses.inputs)

    @property
    def coordinator(self) -> bool:
        return self.init is not None and self.init.addresses.coordinator_input is not None

    # ------------------------------------------------------------------ the steps
    def start(self, handshake_address: str) -> list[Action]:
        """Connect to the frontend's handshake ROUTER and say HELLO (``ECP-HS-1``)."""
        if self.machine.view.handshake != "START" or self._waiting is not None:
            raise LocalProtocolError("the handshake has already started", clause="ECP-HS-7")
        self._actions.append(Connect("handshake", "DEALER", handshake_address, self.identity))
        self._step(Step.HELLO, None, EngineHello(self.rank, self.hello))
        self._waiting = Wait("handshake", Stage.INIT)
        return self.actions()

    def start_bootstrapped(self, inputs: Sequence[str], outputs: Sequence[str]) -> list[Action]:
        """No handshake socket (a frontend started with ``--engine-start-index``): connect to the
        given addresses and register on each input (``ECP-HS-3``). :attr:`machine` is made anew, in
        bootstrapped mode: read it after this call."""
        if self.machine.view.handshake != "START" or self._waiting is not None:
            raise LocalProtocolError("the handshake has already started", clause="ECP-HS-7")
        if callable(self._payload):
            raise LocalProtocolError("a bootstrapped engine has no INIT to build its ready payload from: give "
                                     "the payload itself", clause="ECP-HS-3")
        self.machine = EngineConnection(self.rank, mode=self.machine.mode, bootstrapped=True, clients=len(inputs),
                                        codec=self.machine.codec)
        self._connect_clients(inputs, outputs)
        self._register(self._payload)
        self.serving = True
        return self.actions()

    def receive(self, socket: str, frames: Sequence[bytes]) -> list[Event]:
        """Feed what ``socket`` received; get the events (see :meth:`EngineConnection.receive`).

        During the handshake INIT queues the next steps (:meth:`actions`); an INIT that cannot
        be read raises :class:`~ecp.spec.HandshakeError` in either mode (no step can follow).
        While serving, a message that breaks the protocol raises (strict mode: the caller drops
        it and keeps serving, ``ECP-ROB-1``; an undecodable ADD's error carries the id to
        answer with ERROR, ``ECP-ROB-2``) or is recorded (recording mode)."""
        wait = self._waiting
        if wait is not None and wait.stage is Stage.INIT and socket == "handshake":
            return self._on_init(frames)
        events = self.machine.receive(socket, frames)
        if wait is not None and wait.stage is Stage.GATE and any(isinstance(e, CoordinatorReady) for e in events):
            self._waiting = None
            self._after_gate()
        return events

    def say_ready(self) -> list[Send]:
        """READY now (``hold_ready=True`` withheld it, ``ECP-HS-5``)."""
        self._step(Step.READY, None, EngineReady(self.rank, self.ready_message))
        self.ready_sent = True
        return [a for a in self.actions() if isinstance(a, Send)]

    def _on_init(self, frames: Sequence[bytes]) -> list[Event]:
        before = len(self.machine.violations)
        events = self.machine.receive("handshake", frames)
        inits = [e for e in events if isinstance(e, Init)]
        if not inits:  # recording mode recorded why; strict mode raised already
            recorded = self.machine.violations[before:]
            raise recorded[0].error if recorded else HandshakeError("no INIT in the handshake answer",
                                                                   clause="ECP-HS-2")
        init = self.init = inits[0].init
        addresses = init.addresses
        self._connect_clients(addresses.inputs, addresses.outputs)
        payload = self._payload(init) if callable(self._payload) else self._payload
        self._register(payload)
        if addresses.coordinator_input is not None:
            self._actions.append(Connect("coordinator_input", "XSUB", addresses.coordinator_input, self.identity))
            if addresses.coordinator_output is not None:
                self._actions.append(Connect("coordinator_output", "PUSH", addresses.coordinator_output))
            if self._step(Step.SUBSCRIBE, None, CoordinatorSubscribe(self.rank)):
                self._waiting = Wait("coordinator_input", Stage.GATE)
                return events
            # a faulty peer that never subscribes never sees the gate open: it goes on at once
            self._waiting = None
            self._after_gate()
        else:
            self._waiting = None
            self._after_gate()
        return events

    def _connect_clients(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        for client, address in enumerate(inputs):
            self._actions.append(Connect(input_socket(client), "DEALER", address, self.identity))
        for client, address in enumerate(outputs):
            self._actions.append(Connect(output_socket(client), "PUSH", address))

    def _register(self, payload: Payload) -> None:
        for client in range(self.machine.view.clients or 0):
            if isinstance(payload, bytes):  # a payload as written (extra or missing keys on purpose)
                self._step(Step.REGISTRATION, client, Registration(self.rank, client, None),
                           Deviation(raw=(payload,)))
            else:
                self._step(Step.REGISTRATION, client, Registration(self.rank, client, payload))

    def _after_gate(self) -> None:
        self.serving = True
        if not self._hold_ready:
            self._step(Step.READY, None, EngineReady(self.rank, self.ready_message))
            self.ready_sent = True

    def _step(self, step: Step, index: int | None, event: Event, default: Deviation | None = None) -> bool:
        """Queue one step's message through the machine, or the test peer's deviation from it
        (``default``: the deviation when the test peer names none); whether a message of the step
        goes out."""
        deviation = self._deviate(step, index) if self._deviate is not None else None
        if deviation is None:
            deviation = default
        elif default is not None and deviation.raw is None and deviation.repeat == 1 and not deviation.force:
            deviation = Deviation(raw=default.raw, before=deviation.before)
        if deviation is None:
            self._actions += self.machine.send(event)
            return True
        self._actions += deviation.before
        if deviation.raw is not None:
            socket = "handshake" if step in (Step.HELLO, Step.READY) else \
                "coordinator_input" if step is Step.SUBSCRIBE else input_socket(index or 0)
            self._actions.append(self.machine.send_raw(socket, list(deviation.raw)))
            return True
        for _ in range(deviation.repeat):
            try:
                sends = self.machine.send(event)
            except LocalProtocolError:
                if not deviation.force and deviation.repeat < 2:
                    raise
                # forced, or the repeat the rules forbid: the same frames, around the rules
                sends = [self.machine.send_raw(s.socket, s.frames) for s in self._frames_of(event)]
            self._actions += sends
        return deviation.repeat > 0

    def _frames_of(self, event: Event) -> list[Send]:
        """The frames that say a handshake ``event``, unchecked (a forced or repeated step)."""
        if isinstance(event, (EngineHello, EngineReady)):
            message = event.hello if isinstance(event, EngineHello) else event.ready
            return [Send("handshake", [self.machine.codec.encode_handshake(message)])]
        if isinstance(event, Registration):
            payload = b"" if event.response is None else self.machine.codec.encode_handshake(event.response)
            return [Send(input_socket(event.client), [payload])]
        return [Send("coordinator_input", [XSUB_SUBSCRIBE])]

    # ------------------------------------------------------------------ serving
    def send(self, event: Event) -> list[Send]:
        """The frames that say ``event`` (outputs, ``ENGINE_CORE_DEAD``), checked by the machine."""
        return self.machine.send(event)

    def send_raw(self, socket: str, frames: Sequence[bytes]) -> Send:
        """Frames exactly as given, around the rules; the machine follows what they say."""
        return self.machine.send_raw(socket, frames)

    def die(self) -> list[Send]:
        """``ENGINE_CORE_DEAD`` on every output socket (``ECP-OUT-8``); nothing if already dead."""
        try:
            return self.machine.send(EngineDead(self.rank))
        except LocalProtocolError:
            return []

    @property
    def output_sockets(self) -> list[str]:
        """The sockets outputs go out on: ``output[i]`` per client, and the coordinator's."""
        names = [output_socket(c) for c in range(self.clients)]
        if self.init is not None and self.init.addresses.coordinator_output is not None:
            names.append(output_socket(COORDINATOR))
        return names

    @property
    def input_sockets(self) -> list[str]:
        """The sockets an engine reads while serving: every input, and the coordinator's publications."""
        names = [input_socket(c) for c in range(self.machine.view.clients or 0)]
        if self.coordinator:
            names.append("coordinator_input")
        return names
