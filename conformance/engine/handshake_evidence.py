"""What the engines did during the handshake, as the harness's hooks on the one frontend loop.

The handshake itself is :class:`ecp.spec.peer.zmq_io.FrontendSockets` over a recording
:class:`~ecp.spec.peer.FrontendPeer` that answers every HELLO (``answer_any_hello``): the
harness writes no loop of its own. :class:`HandshakeEvidence` is the hooks it runs with: it
records every frame both ways in the transcript, keeps per identity what only the harness
needs beside the skeleton's :class:`~ecp.spec.peer.Progress` (the raw frames, why a message did
not read, the ready payloads, what the machine recorded against them), holds the coordinator's
gate back a little (an engine that sends READY before it is exposed) and says when the launch is
settled, failing fast on ranks that never start. Nothing it keeps is judged here: the
handshake cases read it, and the rules are the machine's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ecp.spec import DecodeError, EngineCoreReadyResponse, ProtocolError
from ecp.spec.machine import CoordinatorSubscribe, Registration, Send, parse_socket
from ecp.spec.peer import FrontendPeer, Progress
from ecp.spec.peer.zmq_io import FrontendHooks

from ..outcomes import CaseTimeout
from ..transcript import Transcript
from .received import decoded
from .release_choice import ReleaseChoice

#: fail fast on a rank that never starts: once the first rank of a launch said HELLO, every other
#: rank must say HELLO within max(SIBLING_MIN_S, SIBLING_FACTOR x the time the first one took)
SIBLING_MIN_S = 10.0
SIBLING_FACTOR = 2.0


@dataclass(eq=False)
class EngineRecord:
    """What one engine (one identity) did during the handshake. When it spoke, its HELLO and
    READY, whether it got INIT and which inputs it had registered when READY came are the
    skeleton's :attr:`progress`, read through; the rest is what only the harness keeps."""

    progress: Progress
    hello_raw: bytes | None = None
    hello_error: str | None = None
    #: the handshake messages after HELLO that were not a second HELLO (more than one: a duplicate READY)
    ready_raw: list[bytes] = field(default_factory=list)
    ready_error: str | None = None
    #: client index -> every payload frame list received on that input ROUTER
    registrations: dict[int, list[list[bytes]]] = field(default_factory=dict)
    #: client index -> decoded ready payload (None = empty payload) or error text
    ready_payloads: dict[int, EngineCoreReadyResponse | None | str] = field(default_factory=dict)
    #: the handshake rules (``ECP-HS-7``: duplicate HELLO/READY, frame counts) this engine broke on the
    #: handshake socket, as the protocol machine judged them
    anomalies: list[str] = field(default_factory=list)
    #: what the machine recorded against this engine's registrations (e.g. a second one on an input)
    registration_anomalies: list[str] = field(default_factory=list)

    identity = property(lambda self: self.progress.identity)
    rank = property(lambda self: self.progress.rank)
    hello = property(lambda self: self.progress.hello)
    init_sent = property(lambda self: self.progress.init_sent)
    ready = property(lambda self: self.progress.ready)
    ready_at = property(lambda self: self.progress.ready_at)
    registered_at_ready = property(lambda self: self.progress.registered_at_ready)


class HandshakeEvidence(FrontendHooks):
    """The harness's hooks on the frontend handshake loop (see the module docstring), and what
    they kept. ``coordinator_output`` takes what the coordinator's PULL receives meanwhile."""

    def __init__(self, transcript: Transcript, release: ReleaseChoice, quiet_window_s: float,
                 coordinator_output: Callable[[list[bytes]], None]) -> None:
        self.transcript = transcript
        self.release = release
        self.quiet_window_s = quiet_window_s
        self.coordinator_output = coordinator_output
        self.records: dict[bytes, EngineRecord] = {}
        #: handshake events in arrival order: ("HELLO" | "READY", identity) and ("SUB", n)
        self.handshake_events: list[tuple[str, Any]] = []
        #: coordinator subscriptions seen, and when the coordinator's READY was published
        self.coord_subscriptions = 0
        self.gate_published_at: float | None = None
        #: how long the gate is held after the last subscription
        self.gate_delay_s = 0.2
        self._gate_at: float | None = None
        #: outputs that arrived before anything was asked; handshake and input messages after READY
        self.early_outputs: list[list[bytes]] = []
        self.late_handshake: list[list[bytes]] = []
        self.late_inputs: list[tuple[int, list[bytes]]] = []
        self._run: tuple[int, float, threading.Event | None, Callable[[], None]] | None = None
        self._siblings_due: float | None = None
        self._settled_at: float | None = None
        self._init: Any = None  # what INIT said, for the transcript

    def start(self, expected: int, cancel: threading.Event | None, alive: Callable[[], None]) -> None:
        """A handshake run for ``expected`` engines begins: ``cancel`` ends it, ``alive()`` raises once
        the engine's process is gone."""
        self._run = (expected, time.monotonic(), cancel, alive)
        self._siblings_due = self._settled_at = None

    # ------------------------------------------------------------------ when it is over
    def finished(self, peer: FrontendPeer, now: float) -> bool:
        expected, started, cancel, alive = self._run
        if cancel is not None and cancel.is_set():
            raise CaseTimeout("handshake cancelled: the launch is no longer needed")
        alive()
        if peer.complete(expected):
            return True
        if self._siblings_due is None and self.records:
            # the ranks of one launch start together: once one said HELLO, the others get a
            # budget scaled on how long it took, not the whole startup budget
            self._siblings_due = now + max(SIBLING_MIN_S, SIBLING_FACTOR * (now - started))
        if self._siblings_due is not None and now >= self._siblings_due and len(self.records) < expected:
            raise CaseTimeout(
                f"handshake: {len(self.records)} of {expected} engine(s) said HELLO; the others sent nothing "
                f"{now - started:.1f}s after the launch (a rank's siblings get max({SIBLING_MIN_S:g}s, "
                f"{SIBLING_FACTOR:g}x the time the first HELLO took) after it; identities seen: "
                f"{[r.identity.hex() for r in self.records.values()]})")
        # READY everywhere but a registration missing, or the reverse: recorded after a grace
        progress = peer.progress.values()
        if self._settled_at is None and (sum(p.ready is not None for p in progress) >= expected or
                                         sum(peer.all_registered(p) for p in progress) >= expected):
            self._settled_at = now
        return self._settled_at is not None and now - self._settled_at > max(0.5, 3 * self.quiet_window_s)

    def gate_due(self, peer: FrontendPeer, now: float) -> bool:
        # a short delay after the last subscription exposes engines that send READY before the gate
        return self._gate_at is not None and self.gate_published_at is None and now >= self._gate_at

    # ------------------------------------------------------------------ frames
    def sent(self, socket: str, frames: list) -> None:
        if socket == "coordinator_input":
            self.transcript.record("sent", socket, frames)
            self.gate_published_at = time.monotonic()
        else:
            self.transcript.record("sent", socket, frames, lambda init=self._init: init)

    def other(self, socket: str, frames: list) -> None:
        if socket == "coordinator_output":
            self.coordinator_output(frames)
            return
        # nothing was asked yet: an output now is unsolicited
        self.transcript.record("recv", socket, frames, lambda f=frames: self.release.codec().decode_outputs(f))
        self.early_outputs.append(frames)

    def receive(self, peer: FrontendPeer, socket: str, frames: list) -> list[Send]:
        self._init = peer.init
        kind, client = parse_socket(socket)
        if kind == "coordinator_input":
            self.on_subscription(peer, frames)
        elif kind == "handshake":
            self._on_handshake(peer, frames)
        else:
            self._on_registration(peer, client, frames)
        return peer.actions()  # INIT goes out even after a bad HELLO: the other cases can still run

    def after_handshake(self, machine: Any, socket: str, frames: list[bytes]) -> None:
        """A handshake or input message once the handshake is over: the machine judges it, the
        handshake cases read it here."""
        before = len(machine.violations)
        self.transcript.record("recv", socket, frames, decoded(machine, machine.receive(socket, frames), before))
        kind, client = parse_socket(socket)
        if kind == "handshake":
            self.late_handshake.append(frames)
        else:
            self.late_inputs.append((client, frames))

    def _record(self, peer: FrontendPeer, identity: bytes) -> EngineRecord:
        if identity not in self.records:
            self.records[identity] = EngineRecord(peer.progress[identity])
        return self.records[identity]

    def on_subscription(self, peer: FrontendPeer, frames: list[bytes]) -> None:
        """A message on the coordinator's XPUB (an engine's subscription), during the handshake or after."""
        self.transcript.record("recv", "coordinator_input", frames)
        if any(isinstance(e, CoordinatorSubscribe) for e in peer.receive("coordinator_input", frames)):
            self.coord_subscriptions = peer.subscriptions
            self.handshake_events.append(("SUB", self.coord_subscriptions))
            if peer.gate_due and self._gate_at is None:
                self._gate_at = time.monotonic() + self.gate_delay_s

    def _on_handshake(self, peer: FrontendPeer, frames: list[bytes]) -> None:
        machine = peer.machine
        before = len(machine.violations)
        known = peer.progress.get(frames[0])
        hellos, readies = (0, 0) if known is None else (known.hellos, known.readies)
        events = peer.receive("handshake", frames)
        broken = machine.violations[before:]
        self.transcript.record("recv", "handshake", frames, decoded(machine, events, before) if len(frames) > 1
                               else (lambda: "(no payload)"))
        identity = frames[0]
        rec = self._record(peer, identity)
        # the rules live in the machine: keep what it found against this engine's handshake
        rec.anomalies += [str(v.error) for v in broken if v.clause == "ECP-HS-7"]
        if len(frames) < 2:
            return
        progress = rec.progress
        if known is None:  # the first message stands for HELLO, whatever it is
            rec.hello_raw = frames[1]
            if progress.hello is None:
                rec.hello_error = "the first handshake message is READY, not HELLO" if progress.readies > readies \
                    else str(broken[0].error) if broken else "the first handshake message is not a HELLO"
            self.handshake_events.append(("HELLO", identity))
            return
        if progress.hellos > hellos:
            return  # a duplicate HELLO (the machine recorded it)
        rec.ready_raw.append(frames[1])
        if len(rec.ready_raw) > 1:  # a duplicate READY (the machine recorded it)
            return
        self.handshake_events.append(("READY", identity))
        if progress.readies == readies:  # not readable as READY: what the machine recorded against it
            rec.ready_error = str(broken[0].error) if broken else "the message is not a READY"

    def _on_registration(self, peer: FrontendPeer, client: int, frames: list[bytes]) -> None:
        if len(frames) == 2:
            self._speak_chosen_release(peer, frames[1])
        machine = peer.machine
        before = len(machine.violations)
        events = peer.receive(f"input[{client}]", frames)
        broken = machine.violations[before:]
        self.transcript.record("recv", f"input[{client}]", frames, decoded(machine, events, before)
                               if len(frames) > 1 else (lambda: "(no payload)"))
        rec = self._record(peer, frames[0])
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
                rec.ready_payloads[client] = machine.codec.decode_ready_response(frames[1])
            except ProtocolError as exc:
                rec.ready_payloads[client] = str(exc)

    def _speak_chosen_release(self, peer: FrontendPeer, payload: bytes) -> None:
        """``--vllm auto``: the first ready payload picks the release; every frame after it is
        written and read as that release's."""
        if self.release.pending:
            self.release.choose(payload)
        if peer.machine.codec is not self.release.codec():  # chosen now, or by another launch of the run
            peer.machine.codec = self.release.codec()

    # ------------------------------------------------------------------ the outcome
    def route(self, clients: int, expected: list[bytes], count: int) -> list[bytes]:
        """The identities to address engine 0, 1, ... with: those registered on every input, the
        ``expected`` ones first (in their order), ``count`` at most."""
        registered = [i for i, r in self.records.items() if all(c in r.registrations for c in range(clients))]
        route = [i for i in expected if i in registered]
        route += sorted(i for i in registered if i not in route)
        return route[:count]

    def max_model_len(self) -> int | None:
        """The smallest ``max_model_len`` of the ready payloads that decoded (``ECP-HS-9``)."""
        sizes = [p.max_model_len for r in self.records.values() for p in r.ready_payloads.values()
                 if isinstance(p, EngineCoreReadyResponse)]
        return min(sizes) if sizes else None

    def reset(self) -> None:
        """Forget every identity (a caller that replays handshakes for one reused identity)."""
        self.records.clear()
        self.handshake_events.clear()

