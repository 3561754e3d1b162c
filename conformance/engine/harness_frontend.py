"""The harness's frontend: binds every socket, runs the handshake leniently,
speaks raw frames through :mod:`ecp.spec` and records everything.

It is deliberately a *bad-input-capable* frontend: :meth:`HarnessFrontend.send_raw`
sends arbitrary frames (wrong type bytes, truncated msgpack, pickle ext types),
so robustness and security cases can misbehave on purpose.

It is synchronous pyzmq with poll timeouts: a case is a sequential script,
and every wait is bounded by both its own timeout and the case budget
(:attr:`HarnessFrontend.deadline`). The handshake is lenient on purpose: it
records what the engine did (HELLO decode errors, identities, ready payloads,
READY) instead of aborting, so the handshake cases can report each problem
against its own clause while the other cases still run.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn, Sequence

import zmq
from zmq.utils.monitor import recv_monitor_message

from ecp.spec import (
    ENGINE_DEAD, DecodeError, EngineCoreOutput, EngineCoreOutputs, EngineCoreReadyResponse, EngineCoreRequest,
    EngineHandshakeMetadata, EngineZmqAddresses, Hello, ProtocolError, Ready, SamplingParams,
    UtilityOutput, UtilityRequest, engine_identity, recover_utility_frames,
)
from ecp.spec.enums import RequestOutputKind
from ecp.spec.machine import CoordinatorSubscribe, EngineDead, Outputs, Registration, Violation
from ecp.spec.peer import FrontendPeer
from ecp.spec.peer.zmq_io import stop_monitors

from ..outcomes import CaseTimeout, FailedClosed, PeerCrashed, CaseFailure
from ..transcript import Transcript
from .release_choice import ReleaseChoice


#: how long an engine that went away is given for its last frames (an ENGINE_CORE_DEAD) to arrive
LAST_WORDS_S = 0.5


class EngineStoppedReading(CaseFailure):
    """The engine closed an input connection after the handshake and went quiet: it will never answer
    what the case waits for. A FAIL of the case's requirement (or of the clause a probe names), with
    that evidence, at once -- not a wait that runs out."""


@dataclass
class Addresses:
    handshake: str
    inputs: list[str]
    outputs: list[str]
    #: (coordinator_input XPUB, coordinator_output PULL) when the harness also plays the DP coordinator
    coordinator: tuple[str, str] | None = None


_MONITOR_IDS = itertools.count(1)
#: where an outputs message carries its utility reply (a decode error there is ``ECP-UTIL-2``'s)
_UTILITY_OUTPUT_PATH = f"$[{EngineCoreOutputs.__struct_fields__.index('utility_output')}]"

#: fail fast on a rank that never starts: once the first rank of a launch said HELLO, every other
#: rank must say HELLO within max(SIBLING_MIN_S, SIBLING_FACTOR x the time the first one took)
SIBLING_MIN_S = 10.0
SIBLING_FACTOR = 2.0


@dataclass
class EngineRecord:
    """What one engine (one identity) did during the handshake."""

    identity: bytes
    hello_raw: bytes | None = None
    hello: Hello | None = None
    hello_error: str | None = None
    init_sent: bool = False
    ready_raw: list[bytes] = field(default_factory=list)
    ready: Ready | None = None
    ready_error: str | None = None
    #: client index -> every payload frame list received on that input ROUTER
    registrations: dict[int, list[list[bytes]]] = field(default_factory=dict)
    #: client index -> decoded ready payload (None = empty payload) or error text
    ready_payloads: dict[int, EngineCoreReadyResponse | None | str] = field(default_factory=dict)
    #: clients whose registration had arrived when READY was received
    registered_at_ready: set[int] | None = None
    ready_at: float | None = None
    #: the handshake rules (``ECP-HS-7``: duplicate HELLO/READY, frame counts) this engine broke on the
    #: handshake socket, as the protocol machine judged them
    anomalies: list[str] = field(default_factory=list)
    #: what the machine recorded against this engine's registrations (e.g. a second one on an input)
    registration_anomalies: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        return int.from_bytes(self.identity, "little") if len(self.identity) == 2 else None


@dataclass
class Seen:
    """One request output as the harness received it."""

    client: int
    engine_index: int
    output: EngineCoreOutput
    finished_requests: set[str] | None
    t: float


@dataclass
class Reply:
    client: int
    engine_index: int
    utility: UtilityOutput
    t: float


class HarnessFrontend:
    """One frontend instance serving ``engine_count`` engines and ``clients`` clients."""

    def __init__(self, ctx: zmq.Context, addresses: Addresses, engine_count: int, start_index: int,
                 transcript: Transcript, quiet_window_s: float = 0.3, release: ReleaseChoice | None = None) -> None:
        self.ctx = ctx
        #: the vLLM release spoken (``--vllm``): frames as it writes them, messages as vLLM 0.33's types
        self.release = release or ReleaseChoice()
        self.codec = self.release.codec()
        self.engine_count = engine_count
        self.start_index = start_index
        self.transcript = transcript
        self.quiet_window_s = quiet_window_s
        self.deadline: float | None = None
        #: ENGINE_CORE_DEAD arrived: the engine is gone even where no process can be watched (--attach)
        self.engine_dead = False
        #: False: ENGINE_CORE_DEAD is kept in :attr:`messages` as ``(client, ENGINE_DEAD)`` instead of
        #: raising PeerCrashed (a test that expects the engine to die inspects it afterwards)
        self.raise_on_engine_dead = True
        #: returns False once the engine process is gone (waits then fail fast with PeerCrashed)
        self.alive_check: Callable[[], bool] | None = None
        #: capabilities the engine was declared to lack (``--engine-lacks``, ecp.conformance.capabilities)
        self.declared_lacks: frozenset[str] = frozenset()
        self._sockets: list[zmq.Socket] = []
        self.handshake = self._bind(zmq.ROUTER, addresses.handshake)
        self.inputs = [self._bind(zmq.ROUTER, a) for a in addresses.inputs]
        self.outputs = [self._bind(zmq.PULL, a) for a in addresses.outputs]
        self.coord_pub: zmq.Socket | None = None
        self.coord_pull: zmq.Socket | None = None
        coordinator = None
        if addresses.coordinator is not None:
            self.coord_pub = self._bind(zmq.XPUB, addresses.coordinator[0])
            self.coord_pull = self._bind(zmq.PULL, addresses.coordinator[1])
            coordinator = (self.coord_pub.getsockopt_string(zmq.LAST_ENDPOINT),
                           self.coord_pull.getsockopt_string(zmq.LAST_ENDPOINT))
        # tcp binds with port 0 resolve here; INIT carries the real addresses
        self.addresses = Addresses(
            self.handshake.getsockopt_string(zmq.LAST_ENDPOINT),
            [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in self.inputs],
            [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in self.outputs],
            coordinator,
        )
        #: coordinator role: subscriptions seen, when READY was published, what engines sent it
        self.coord_subscriptions = 0
        #: handshake events in arrival order: ("HELLO" | "READY", identity) and ("SUB", n)
        self.handshake_events: list[tuple[str, Any]] = []
        self.gate_published_at: float | None = None
        self.gate_delay_s = 0.2
        self._gate_due: float | None = None
        self.coordinator_messages: list[EngineCoreOutputs] = []
        #: DP control messages (wave_complete/start_wave) that arrived on a client output socket
        self.dp_control_on_outputs: list[tuple[int, EngineCoreOutputs]] = []
        self.poller = zmq.Poller()
        for s in self._sockets:
            self.poller.register(s, zmq.POLLIN)
        self._make_peer()
        # An engine that stops reading its input (vLLM 0.33 ends its input thread on a bad message)
        # closes its DEALER connection: the ROUTER's monitor sees it, so waits end at once with that
        # evidence instead of running out their timeout.
        self._monitors: dict[zmq.Socket, int] = {}
        for client, sock in enumerate(self.inputs):
            # a name of our own: pyzmq's default (the socket's fd) is reused by the next launch's
            # socket while the closed one's monitor endpoint may still be bound ("Address already in use")
            mon = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED, addr=f"inproc://ecp-monitor-{next(_MONITOR_IDS)}")
            self._monitors[mon] = client
            self.poller.register(mon, zmq.POLLIN)
        #: (client, time) of the first input connection an engine closed after the handshake
        self.input_closed: tuple[int, float] | None = None
        #: why the last liveness probe failed (the engine is not probed again after the case)
        self.stopped_serving: str | None = None
        self._last_output_at = 0.0
        self.records: dict[bytes, EngineRecord] = {}
        self.route: list[bytes] = []  # engine k (0-based) -> identity to address it with
        self.messages: list[tuple[int, EngineCoreOutputs]] = []
        #: every output message as received: (client, frames), for the cases that check the encoding
        self.raw_outputs: list[tuple[int, list[bytes]]] = []
        self.by_request: dict[str, list[Seen]] = {}
        self.replies: dict[int, list[Reply]] = {}
        self.late_handshake: list[list[bytes]] = []
        self.late_inputs: list[tuple[int, list[bytes]]] = []
        self.early_outputs: list[list[bytes]] = []
        self._ids = itertools.count(1)
        #: engine k -> ids of the ADDs sent to it with add() (after a failed case, the unfinished ones are aborted)
        self.added: dict[int, list[str]] = {}
        self._call_ids = itertools.count(0x5EC0_0001)
        #: every call id a UTILITY the harness sent carried on the wire, decodable or not (``ECP-UTIL-1``)
        self.sent_call_ids: set[int] = set()
        #: the utility methods sent to the engines (a manager reuses an engine that never slept)
        self.methods_sent: set[str] = set()
        #: (request id, when) of the first ADD sent, and seconds until its first output (the peer's pace)
        self._first_add: tuple[str, float] | None = None
        self.first_answer_s: float | None = None
        #: the call ids of UTILITY messages sent malformed, recovered as ``ECP-ROB-1`` defines: an engine
        #: may answer each with its failure, or drop it
        self.refused_call_ids: set[int] = set()
        self.max_model_len: int | None = None
        #: the vocabulary size of the engine's model, when the run was told it (``ECP-OUT-3``)
        self.vocab_size: int | None = None

    def _make_peer(self) -> None:
        """The frontend skeleton in recording mode: it answers every HELLO (even a malformed one, or one
        from an unexpected identity) with INIT and opens the coordinator gate; its machine follows every
        frame both ways and records each rule the engine breaks, whatever the case looks at."""
        coord_in, coord_out = self.addresses.coordinator or (None, None)
        self.peer = FrontendPeer(
            range(self.start_index, self.start_index + self.engine_count),
            EngineHandshakeMetadata(
                addresses=EngineZmqAddresses(inputs=self.addresses.inputs, outputs=self.addresses.outputs,
                                             coordinator_input=coord_in, coordinator_output=coord_out),
                parallel_config={}),
            clients=len(self.inputs), mode="record", answer_any_hello=True, codec=self.codec)
        self.machine = self.peer.machine

    @property
    def profile(self):
        """The release under test (:class:`ecp.spec.profile.Profile`): what the cases may ask of it."""
        return self.release.profile

    def _speak_chosen_release(self, payload: bytes) -> None:
        """``--vllm auto``: the first ready payload picks the release; every frame after it is
        written and read as that release's."""
        if self.release.pending:
            self.release.choose(payload)
        if self.codec is not self.release.codec():  # chosen now, or by another launch of the run
            self.codec = self.release.codec()
            self.machine.codec = self.codec

    # ------------------------------------------------------------------ sockets
    def _bind(self, kind: int, address: str) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if kind == zmq.XPUB:
            sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # one subscription message per engine, not per topic
        sock.bind(address)
        self._sockets.append(sock)
        return sock

    def close(self) -> None:
        stop_monitors(self.inputs)  # before their readers close (stop_monitors says why)
        for mon in self._monitors:
            mon.close(0)
        self._monitors.clear()
        for s in self._sockets:
            s.close(0)
        self._sockets.clear()

    def _channel(self, sock: zmq.Socket) -> str:
        if sock is self.handshake:
            return "handshake"
        if sock is self.coord_pub:
            return "coordinator_input"
        if sock is self.coord_pull:
            return "coordinator_output"
        if sock in self.inputs:
            return f"input[{self.inputs.index(sock)}]"
        return f"output[{self.outputs.index(sock)}]"

    # ------------------------------------------------------------------ time
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

    def _poll_once(self, end: float) -> list[tuple[zmq.Socket, list[bytes]]]:
        if self.alive_check is not None and not self.alive_check():
            self._process_gone()
        ms = max(0, int((end - time.monotonic()) * 1000))
        events = dict(self.poller.poll(ms))
        for mon, client in self._monitors.items():
            if mon in events:
                self._on_monitor(mon, client)
        got = []
        for sock in self._sockets:
            if sock in events:
                for _ in range(1000):  # bounded: a flooding engine must not starve the deadline checks
                    try:
                        got.append((sock, sock.recv_multipart(zmq.NOBLOCK)))
                    except zmq.Again:
                        break
        return got

    def _on_monitor(self, mon: zmq.Socket, client: int) -> None:
        for _ in range(100):
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_DISCONNECTED and self.route and self.input_closed is None:
                self.input_closed = (client, time.monotonic())
                self.transcript.note(f"the engine closed its connection to input[{client}]")

    def _check_input_open(self, what: str) -> None:
        """Raise once an engine closed an input connection and nothing arrived for a quiet window
        since: what the case waits for will not come (outputs still in flight were let in)."""
        if self.input_closed is None:
            return
        client, at = self.input_closed
        if time.monotonic() - max(at, self._last_output_at) >= self.quiet_window_s:
            raise EngineStoppedReading(
                f"no {what}: the engine closed its connection to input[{client}] -- it reads no more input, "
                f"{'though its process is still running' if self.alive_check is None or self.alive_check() else 'and its process exited'}"
                " and it sent no ENGINE_CORE_DEAD")

    # ------------------------------------------------------------------ handshake
    def run_handshake(self, timeout: float, cancel: threading.Event | None = None) -> None:
        """Serve HELLO -> INIT -> registrations -> READY for ``engine_count`` engines.

        Raises :class:`CaseTimeout` if not every expected engine registered on
        every input within ``timeout``; everything else is recorded.
        """
        if not self.peer.progress:  # nothing heard yet: the engines to expect may have been set since
            self._make_peer()
        started = time.monotonic()
        end = started + timeout
        settled_at: float | None = None  # when READY (or every registration) was complete
        grace = max(0.5, 3 * self.quiet_window_s)
        siblings_due: float | None = None  # by when every rank must have said HELLO (fail fast)
        while not self.peer.complete(self.engine_count):
            if cancel is not None and cancel.is_set():
                raise CaseTimeout("handshake cancelled: the launch is no longer needed")
            now = time.monotonic()
            if siblings_due is None and self.records:
                # the ranks of one launch start together: once one said HELLO, the others get a
                # budget scaled on how long it took, not the whole startup budget
                siblings_due = now + max(SIBLING_MIN_S, SIBLING_FACTOR * (now - started))
            if siblings_due is not None and now >= siblings_due and len(self.records) < self.engine_count:
                raise CaseTimeout(
                    f"handshake: {len(self.records)} of {self.engine_count} engine(s) said HELLO; the others "
                    f"sent nothing {now - started:.1f}s after the launch (a rank's siblings get max({SIBLING_MIN_S:g}s, {SIBLING_FACTOR:g}x the time "
                    f"the first HELLO took) after it; identities seen: "
                    f"{[r.identity.hex() for r in self.records.values()]})")
            # READY everywhere but a registration missing, or the reverse: record it after a grace
            progress = self.peer.progress.values()
            if settled_at is None and (sum(p.ready is not None for p in progress) >= self.engine_count or
                                       sum(self.peer.all_registered(p) for p in progress) >= self.engine_count):
                settled_at = now
            if (settled_at is not None and now - settled_at > grace) or now >= end:
                break
            self._maybe_open_gate()
            for sock, frames in self._poll_once(min(end, now + 0.05)):
                if sock is self.handshake:
                    self._on_handshake(frames)
                elif sock in self.inputs:
                    self._on_registration(self.inputs.index(sock), frames)
                elif sock is self.coord_pub or sock is self.coord_pull:
                    self._on_coordinator(sock, frames)
                else:  # nothing was asked yet: an output now is unsolicited
                    self.transcript.record("recv", self._channel(sock), frames,
                                           lambda f=frames: self.codec.decode_outputs(f))
                    self.early_outputs.append(frames)
        self._build_route()
        if len(self.route) < self.engine_count:
            raise CaseTimeout(
                f"handshake: {len(self.route)} of {self.engine_count} engine(s) registered on every input "
                f"within {timeout:.1f}s (identities seen: {[r.identity.hex() for r in self.records.values()]})")
        sizes = [p.max_model_len for r in self.records.values() for p in r.ready_payloads.values()
                 if isinstance(p, EngineCoreReadyResponse)]
        self.max_model_len = min(sizes) if sizes else None

    def _on_coordinator(self, sock: zmq.Socket, frames: list[bytes]) -> None:
        if sock is self.coord_pub:
            self.transcript.record("recv", "coordinator_input", frames)
            if any(isinstance(e, CoordinatorSubscribe) for e in self.peer.receive("coordinator_input", frames)):
                self.coord_subscriptions = self.peer.subscriptions
                self.handshake_events.append(("SUB", self.coord_subscriptions))
                if self.peer.gate_due and self._gate_due is None:
                    # a short delay exposes engines that send READY before the gate opened
                    self._gate_due = time.monotonic() + self.gate_delay_s
            return
        before = len(self.machine.violations)
        events = self.machine.receive("coordinator_output", frames)
        self.transcript.record("recv", "coordinator_output", frames, self._decoded(events, before))
        if not events:
            error = self._recorded_error(before)
            raise CaseFailure(f"undecodable message to the coordinator: {error}",
                            clause=getattr(error, "clause", "ECP-FRAME-2")) from None
        for event in events:
            if isinstance(event, Outputs):
                self.coordinator_messages.append(event.outputs)

    def _maybe_open_gate(self) -> None:
        if self._gate_due is not None and self.gate_published_at is None and time.monotonic() >= self._gate_due:
            for send in self.peer.open_gate():
                self.coord_pub.send_multipart(send.frames)
                self.transcript.record("sent", send.socket, send.frames)
            self.gate_published_at = time.monotonic()

    def _recorded_error(self, before: int) -> ProtocolError | None:
        """The first rule the machine recorded since ``before`` (why a message gave no event)."""
        recorded = self.machine.violations[before:]
        return recorded[0].error if recorded else None

    def _decoded(self, events: list, before: int | None = None) -> Callable[[], Any]:
        """What the transcript shows for a message the machine read: its payload, or the error."""
        def shown() -> Any:
            for event in events:
                for name in ("outputs", "hello", "ready", "response", "init"):
                    if hasattr(event, name):
                        return getattr(event, name)
                return event
            error = self._recorded_error(before) if before is not None else None
            if error is not None:
                raise error
            return None
        return shown

    def _record(self, identity: bytes) -> EngineRecord:
        if identity not in self.records:
            self.records[identity] = EngineRecord(identity)
        return self.records[identity]

    def _on_handshake(self, frames: list[bytes]) -> None:
        before = len(self.machine.violations)
        known = self.peer.progress.get(frames[0])
        first = known is None
        hellos, readies = (0, 0) if known is None else (known.hellos, known.readies)
        events = self.peer.receive("handshake", frames)
        broken = self.machine.violations[before:]
        self.transcript.record("recv", "handshake", frames, self._decoded(events, before) if len(frames) > 1
                               else (lambda: "(no payload)"))
        for send in self.peer.actions():  # INIT goes out even after a bad HELLO: the other cases can still run
            self.handshake.send_multipart(send.frames)
            self.transcript.record("sent", "handshake", send.frames, lambda init=self.peer.init: init)
        identity = frames[0]
        rec = self._record(identity)
        progress = self.peer.progress[identity]
        rec.init_sent = progress.init_sent
        # the rules live in the machine: keep what it found against this engine's handshake
        rec.anomalies += [str(v.error) for v in broken if v.clause == "ECP-HS-7"]
        if len(frames) < 2:
            return
        payload = frames[1]
        if first:
            rec.hello_raw = payload
            rec.hello = progress.hello
            if progress.hello is None:
                rec.hello_error = "the first handshake message is READY, not HELLO" if progress.readies > readies \
                    else str(broken[0].error) if broken else "the first handshake message is not a HELLO"
            self.handshake_events.append(("HELLO", identity))
            return
        if progress.hellos > hellos:
            return  # a duplicate HELLO (the machine recorded it)
        rec.ready_raw.append(payload)
        if len(rec.ready_raw) > 1:  # a duplicate READY (the machine recorded it)
            return
        rec.registered_at_ready = set(rec.registrations)
        self.handshake_events.append(("READY", identity))
        rec.ready_at = progress.ready_at or time.monotonic()
        if progress.readies > readies:
            rec.ready = progress.ready
        else:  # not readable as READY: what the machine recorded against it
            rec.ready_error = str(broken[0].error) if broken else "the message is not a READY"

    def _on_registration(self, client: int, frames: list[bytes]) -> None:
        if len(frames) == 2:
            self._speak_chosen_release(frames[1])
        before = len(self.machine.violations)
        events = self.peer.receive(f"input[{client}]", frames)
        broken = self.machine.violations[before:]
        self.transcript.record("recv", f"input[{client}]", frames, self._decoded(events, before) if len(frames) > 1
                               else (lambda: "(no payload)"))
        rec = self._record(frames[0])
        rec.registrations.setdefault(client, []).append(frames[1:])
        if len(rec.registrations[client]) > 1:  # a second registration (the machine recorded it)
            rec.registration_anomalies += [str(v.error) for v in broken] or [
                f"second message on input[{client}] during the handshake"]
            return
        if len(frames) != 2:
            rec.ready_payloads[client] = f"registration has {len(frames) - 1} payload frame(s), expected 1"
            return
        registration = next((e for e in events if isinstance(e, Registration)), None)
        error = next((v.error for v in broken if isinstance(v.error, DecodeError)), None)
        if error is not None:
            rec.ready_payloads[client] = str(error)
        elif registration is not None:
            rec.ready_payloads[client] = registration.response
        else:  # an identity the machine cannot attribute (recorded): read the payload here
            try:
                rec.ready_payloads[client] = self.codec.decode_ready_response(frames[1])
            except ProtocolError as exc:
                rec.ready_payloads[client] = str(exc)

    def _build_route(self) -> None:
        n_inputs = len(self.inputs)
        registered = [i for i, r in self.records.items() if all(c in r.registrations for c in range(n_inputs))]
        expected = [engine_identity(self.start_index + k) for k in range(self.engine_count)]
        route = [i for i in expected if i in registered]
        route += sorted(i for i in registered if i not in route)
        self.route = route[: self.engine_count]

    # ------------------------------------------------------------------ sending
    def identity(self, engine: int) -> bytes:
        return self.route[engine]

    def send_raw(self, frames: Sequence[bytes], engine: int = 0, client: int = 0,
                 decode: Callable[[], Any] | None = None) -> None:
        """Send ``frames`` (no identity) to an engine's input DEALER, exactly as given."""
        frames = [bytes(f) for f in frames]
        self._note_call_id(frames)
        self.transcript.record("sent", f"input[{client}]", frames,
                               decode or (lambda: self.codec.decode_input(frames)))
        self.machine.send_raw(f"input[{client}]", [self.identity(engine), *frames])
        try:
            self.inputs[client].send_multipart([self.identity(engine), *frames])
        except zmq.ZMQError as exc:  # ROUTER_MANDATORY: the peer's connection is gone
            self._read_last_words()  # an engine failing closed says so before it goes
            if self.alive_check is not None and self.alive_check():
                # the process runs on but closed its input connection: it stopped reading (a FAIL
                # with that evidence), which is not a crash
                raise EngineStoppedReading(
                    f"the engine closed its connection to input[{client}] (a send to engine {engine} failed: "
                    f"{exc}), though its process is still running and it sent no ENGINE_CORE_DEAD") from exc
            self._process_gone(f"cannot reach engine {engine} on input[{client}] ({exc}): its process exited")

    def _note_call_id(self, frames: list[bytes]) -> None:
        """Remember the call id a UTILITY carries on the wire, so that a reply to it is never
        called a reply to an id never sent."""
        if not frames or frames[0] != b"\x03":
            return
        try:
            msg = self.codec.decode_input(frames)
        except ProtocolError:
            recovered = recover_utility_frames(frames)
            if recovered is not None:
                self.sent_call_ids.add(recovered.call_id)
                self.refused_call_ids.add(recovered.call_id)
            return
        if isinstance(msg, UtilityRequest):
            self.sent_call_ids.add(msg.call_id)

    def refused_and_executed(self) -> list[int]:
        """The refused (malformed) UTILITY calls the engine answered with a result, not a failure."""
        return sorted(cid for cid in self.refused_call_ids
                      if any(r.utility.failure_message is None for r in self.replies.get(cid, [])))

    def new_id(self, tag: str) -> str:
        return f"ecp-{tag}-{next(self._ids)}"

    def request(self, rid: str, *, max_tokens: int = 4, prompt: Sequence[int] | None = None,
                client: int = 0, ignore_eos: bool = True, **sampling: Any) -> EngineCoreRequest:
        """A plain greedy text request, as a Python frontend would send it."""
        sampling.setdefault("temperature", 0.0)
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos,
                            output_kind=RequestOutputKind.DELTA, **sampling)
        return EngineCoreRequest(
            request_id=rid, prompt_token_ids=list(prompt if prompt is not None else (1, 2, 3, 4)),
            mm_features=None, sampling_params=sp, pooling_params=None, arrival_time=time.time(),
            lora_request=None, cache_salt=None, data_parallel_rank=None, client_index=client,
            external_req_id=rid)

    def add(self, request: EngineCoreRequest, engine: int = 0, client: int | None = None) -> str:
        self.send_raw(self.codec.encode_add(request), engine, request.client_index if client is None else client)
        self.added.setdefault(engine, []).append(request.request_id)
        if self._first_add is None:
            self._first_add = (request.request_id, time.monotonic())
        return request.request_id

    def unfinished(self, engine: int = 0) -> list[str]:
        """Ids added to ``engine`` that have not had a terminal output."""
        return [rid for rid in self.added.get(engine, []) if not self.terminals(rid)]

    def abort(self, ids: Sequence[str], engine: int = 0, client: int = 0) -> None:
        self.send_raw(self.codec.encode_abort(ids), engine, client)

    def send_utility(self, method: str, args: Sequence[Any] = (), *, engine: int = 0, client: int = 0,
                     call_id: int | None = None) -> int:
        cid = next(self._call_ids) if call_id is None else call_id
        self.methods_sent.add(method)
        self.send_raw(self.codec.encode_utility(client, cid, method, list(args)), engine, client)
        return cid

    def call(self, method: str, args: Sequence[Any] = (), *, engine: int = 0, client: int = 0,
             call_id: int | None = None, timeout: float = 5.0) -> Reply:
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

    # ------------------------------------------------------------------ receiving
    def pump(self, end: float) -> None:
        """Receive and index everything that arrives before ``end`` (or the case deadline)."""
        if self.deadline is not None:
            end = min(end, self.deadline)
        for sock, frames in self._poll_once(end):
            if sock is self.handshake:
                before = len(self.machine.violations)
                self.transcript.record("recv", "handshake", frames,
                                       self._decoded(self.machine.receive("handshake", frames), before))
                self.late_handshake.append(frames)
            elif sock is self.coord_pub or sock is self.coord_pull:
                self._on_coordinator(sock, frames)
            elif sock in self.inputs:
                before = len(self.machine.violations)
                self.transcript.record("recv", self._channel(sock), frames,
                                       self._decoded(self.machine.receive(self._channel(sock), frames), before))
                self.late_inputs.append((self.inputs.index(sock), frames))
            else:
                self._on_output(self.outputs.index(sock), frames)

    def _on_output(self, client: int, frames: list[bytes]) -> None:
        socket = f"output[{client}]"
        before = len(self.machine.violations)
        events = self.machine.receive(socket, frames)  # decoded and judged once, by the machine
        self.transcript.record("recv", socket, frames, self._decoded(events, before))
        self.raw_outputs.append((client, frames))
        if not events:
            exc = self._recorded_error(before)
            # a malformed utility reply breaks the utility clauses, not framing
            clause = "ECP-UTIL-2" if (getattr(exc, "field_path", None) or "").startswith(_UTILITY_OUTPUT_PATH) \
                else getattr(exc, "clause", "ECP-FRAME-2")
            raise CaseFailure(f"undecodable output message on {socket}: {exc}", clause=clause) from None
        [event] = events
        self._last_output_at = time.monotonic()
        if isinstance(event, EngineDead):
            self.engine_dead = True
            if not self.raise_on_engine_dead:
                self.messages.append((client, ENGINE_DEAD))
                return
            raise FailedClosed(f"the engine sent ENGINE_CORE_DEAD on {socket}")
        msg = event.outputs
        now = time.monotonic()
        self.messages.append((client, msg))
        if msg.is_dp_control:
            self.dp_control_on_outputs.append((client, msg))
        vocab = self.vocab_size
        for out in msg.outputs:
            if out.new_token_ids and (min(out.new_token_ids) < 0
                                      or (vocab is not None and max(out.new_token_ids) >= vocab)):
                bad = [t for t in out.new_token_ids if t < 0 or (vocab is not None and t >= vocab)]
                raise CaseFailure(f"rank {msg.engine_index} sent token id(s) {bad[:5]} for {out.request_id} on "
                                f"{socket}; a token id t is 0 <= t < V"
                                + (f" (V = {vocab}, --engine-vocab-size)" if vocab is not None else ""),
                                clause="ECP-OUT-3")
            self.by_request.setdefault(out.request_id, []).append(
                Seen(client, msg.engine_index, out, msg.finished_requests, now))
            if self.first_answer_s is None and self._first_add is not None and out.request_id == self._first_add[0]:
                self.first_answer_s = now - self._first_add[1]
        if msg.utility_output is not None:
            self.replies.setdefault(msg.utility_output.call_id, []).append(
                Reply(client, msg.engine_index, msg.utility_output, now))

    def forget_received(self) -> None:
        """Drop the output messages, utility replies and coordinator messages received so far, and
        the views of them, for a caller that plays an unrelated run on this launch next and judges
        only what comes after; the protocol machine keeps its state and its violations."""
        self.messages, self.raw_outputs, self.by_request, self.replies = [], [], {}, {}
        self.coordinator_messages, self.dp_control_on_outputs = [], []

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

    def violations_since(self, start: int) -> list[Violation]:
        """The rules the engine broke since ``len(self.machine.violations)`` was ``start``."""
        return self.machine.violations[start:]

    # ------------------------------------------------------------------ request views
    def seen(self, rid: str) -> list[Seen]:
        return self.by_request.get(rid, [])

    def tokens(self, rid: str) -> list[int]:
        return [t for s in self.seen(rid) for t in s.output.new_token_ids]

    def terminals(self, rid: str) -> list[Seen]:
        return [s for s in self.seen(rid) if s.output.finish_reason is not None]

    def wait_finished(self, rid: str, timeout: float = 5.0, max_tokens: int | None = None) -> Seen:
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

    def serves(self, engine: int = 0, client: int = 0, after: str = "", timeout: float = 5.0,
               clause: str = "ECP-ROB-1") -> None:
        """Liveness probe: a 2-token request completes with LENGTH; a CaseFailure citing ``clause`` if not."""
        from ecp.spec import FinishReason

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
