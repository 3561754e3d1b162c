"""The harness's frontend: the engine role's peer under test talks to it as to a frontend.

It is deliberately a *bad-input-capable* frontend: :meth:`HarnessFrontend.send_raw`
sends arbitrary frames (wrong type bytes, truncated msgpack, pickle ext types),
so robustness and security cases can misbehave on purpose; its protocol machine
(recording mode) follows every frame both ways and records each rule the engine breaks.

It is synchronous pyzmq with poll timeouts: a case is a sequential script. Its parts,
one concept each:

* :mod:`.harness_sockets` -- the sockets it binds, polling, the input connections' monitors;
* :mod:`.handshake_evidence` -- the handshake, run by the frontend loop of :mod:`ecp.spec.peer`
  with the harness's hooks, and what each engine did in it (kept for the handshake cases);
* :mod:`.received` -- the index of what arrived (outputs per request, utility replies);
* :mod:`.waits` -- the bounded waits and the liveness probe;
* this module -- the frontend that puts them together and what it sends.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable, Sequence

import zmq

from ecp.spec import (
    EngineCoreRequest, EngineHandshakeMetadata, EngineZmqAddresses, HandshakeTimeout, ProtocolError,
    SamplingParams, UtilityRequest, engine_identity, recover_utility_frames,
)
from ecp.spec.enums import RequestOutputKind, RequestType
from ecp.spec.machine import Violation
from ecp.spec.peer import FrontendPeer
from ecp.spec.peer.zmq_io import FrontendSockets

from ..outcomes import CaseTimeout
from ..transcript import Transcript
from .handshake_evidence import SIBLING_FACTOR, SIBLING_MIN_S, EngineRecord, HandshakeEvidence
from .harness_sockets import Addresses, HarnessSockets
from .received import Reply, ReceivedOutputs, Seen
from .release_choice import ReleaseChoice
from .waits import LAST_WORDS_S, EngineStoppedReading, Waits

__all__ = ["Addresses", "EngineRecord", "EngineStoppedReading", "HarnessFrontend", "LAST_WORDS_S", "Reply",
           "SIBLING_FACTOR", "SIBLING_MIN_S", "Seen"]


class HarnessFrontend(HarnessSockets, ReceivedOutputs, Waits):
    """One frontend instance serving ``engine_count`` engines and ``clients`` clients."""

    def __init__(self, ctx: zmq.Context, addresses: Addresses, engine_count: int, start_index: int,
                 transcript: Transcript, quiet_window_s: float = 0.3, release: ReleaseChoice | None = None) -> None:
        HarnessSockets.__init__(self, ctx, addresses, transcript)
        ReceivedOutputs.__init__(self)
        Waits.__init__(self, quiet_window_s)
        #: the vLLM release spoken (``--vllm``): frames as it writes them, messages as vLLM 0.33's types
        self.release = release or ReleaseChoice()
        self.engine_count = engine_count
        self.start_index = start_index
        #: capabilities the engine was declared to lack (``--engine-lacks``, ecp.conformance.capabilities)
        self.declared_lacks: frozenset[str] = frozenset()
        #: what each engine did in the handshake (the handshake cases read it)
        self.evidence = HandshakeEvidence(transcript, self.release, quiet_window_s, self._on_coordinator_output)
        self._make_peer()
        self.route: list[bytes] = []  # engine k (0-based) -> identity to address it with
        self.max_model_len: int | None = None
        self._ids = itertools.count(1)
        #: engine k -> ids of the ADDs sent to it with add() (after a failed case, the unfinished ones are aborted)
        self.added: dict[int, list[str]] = {}
        self._call_ids = itertools.count(0x5EC0_0001)
        #: every call id a UTILITY the harness sent carried on the wire, decodable or not (``ECP-UTIL-1``)
        self.sent_call_ids: set[int] = set()
        #: the utility methods sent to the engines (a manager reuses an engine that never slept)
        self.methods_sent: set[str] = set()
        #: the call ids of UTILITY messages sent malformed, recovered as ``ECP-ROB-1`` defines: an engine
        #: may answer each with its failure, or drop it
        self.refused_call_ids: set[int] = set()

    def _make_peer(self) -> None:
        """The frontend skeleton in recording mode: it answers every HELLO (even a malformed one, or one
        from an unexpected identity) with INIT; its machine follows every frame both ways and records
        each rule the engine breaks, whatever the case looks at."""
        coord_in, coord_out = self.addresses.coordinator or (None, None)
        self.peer = FrontendPeer(
            range(self.start_index, self.start_index + self.engine_count),
            EngineHandshakeMetadata(
                addresses=EngineZmqAddresses(inputs=self.addresses.inputs, outputs=self.addresses.outputs,
                                             coordinator_input=coord_in, coordinator_output=coord_out),
                parallel_config={}),
            clients=len(self.inputs), mode="record", answer_any_hello=True, codec=self.release.codec())
        self.machine = self.peer.machine

    @property
    def codec(self) -> Any:
        """The codec of the release spoken (``--vllm auto`` switches it at the first ready payload)."""
        return self.machine.codec

    @property
    def profile(self):
        """The release under test (:class:`ecp.spec.profile.Profile`): what the cases may ask of it."""
        return self.release.profile

    def violations_since(self, start: int) -> list[Violation]:
        """The rules the engine broke since ``len(self.machine.violations)`` was ``start``."""
        return self.machine.violations[start:]

    # ------------------------------------------------------------------ handshake
    def run_handshake(self, timeout: float, cancel: threading.Event | None = None) -> None:
        """Serve HELLO -> INIT -> registrations -> READY for ``engine_count`` engines.

        Raises :class:`CaseTimeout` if not every expected engine registered on
        every input within ``timeout``; everything else is recorded.
        """
        if not self.peer.progress:  # nothing heard yet: the engines to expect may have been set since
            self._make_peer()
        self.evidence.start(self.engine_count, cancel, self._check_alive)
        try:
            FrontendSockets(self.peer, self.named(), self.evidence).handshake(timeout)
        except HandshakeTimeout:
            pass  # what did register is served; too few is the CaseTimeout below
        expected = [engine_identity(self.start_index + k) for k in range(self.engine_count)]
        self.route = self.evidence.route(len(self.inputs), expected, self.engine_count)
        if self.route:
            self.watch_input_connections()
        if len(self.route) < self.engine_count:
            raise CaseTimeout(
                f"handshake: {len(self.route)} of {self.engine_count} engine(s) registered on every input "
                f"within {timeout:.1f}s (identities seen: {[r.identity.hex() for r in self.evidence.records.values()]})")
        self.max_model_len = self.evidence.max_model_len()

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
            self._connection_closed(f"cannot reach engine {engine} on input[{client}] ({exc})",
                                    f"the engine closed its connection to input[{client}] (a send to engine "
                                    f"{engine} failed: {exc})")

    def _note_call_id(self, frames: list[bytes]) -> None:
        """Remember the call id a UTILITY carries on the wire, so that a reply to it is never
        called a reply to an id never sent."""
        if not frames or frames[0] != self.profile.request_types.get("UTILITY", RequestType.UTILITY.value):
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

    # ------------------------------------------------------------------ receiving
    def pump(self, end: float) -> None:
        """Receive and index everything that arrives before ``end`` (or the case deadline)."""
        if self.deadline is not None:
            end = min(end, self.deadline)
        self._check_alive()
        for sock, frames in self.poll_once(end):
            if sock is self.handshake or sock in self.inputs:
                self.evidence.after_handshake(self.machine, self.channel(sock), frames)
            elif sock is self.coord_pub:
                self.evidence.on_subscription(self.peer, frames)
            elif sock is self.coord_pull:
                self._on_coordinator_output(frames)
            else:
                self._on_output(self.outputs.index(sock), frames)
