"""Deliberate faults of the reference client (``ecp serve --bug NAME``, ``ClientConfig.bugs``).

The client implements the protocol correctly; each fault here bends it at one
seam, chosen when the client is built, so no branch of ``client.py``,
``handshake.py``, ``aggregation.py`` or ``abort_coalescer.py`` knows about faults:

- the handshake owner (``lenient-handshake``: handshake-order errors are dropped
  instead of failing the handshake; ``any-identity-accepted``: a HELLO from a rank
  outside the configured ones is answered with INIT; ``lora-mismatch-accepted``:
  each ready payload's LoRA capability is read as the first engine's;
  ``full-ready-payload-required``, ``unknown-ready-keys-refused``: a ready payload
  without every key, or with an unknown one, fails the handshake;
  ``registration-as-ready``: an engine's registration stands for its READY);
- the router (``pinned-rank-ignored``: X-data-parallel-rank is not honoured;
  ``all-to-first-engine``: unpinned requests all go to the first engine);
- the auto-abort queue (``abort-one-per-request``: a coalescer that drains one
  id at a time, so every id gets its own ABORT message);
- the utility aggregation table (``first-engine-is-sleeping``,
  ``reset-prefix-cache-any``, ``reset-prefix-cache-never-true``, ``collective-rpc-first-engine``,
  ``consensus-as-list``:
  which engines a call goes to, how replies combine);
- the sender of input messages (the machine still follows the correct message;
  what goes on the wire is bent: ``one-frame-adds``, ``short-add-arrays``,
  ``sampling-params-array``, ``external-id-as-request-id``, ``abort-external-id``,
  ``abort-every-engine``, ``wave-counted-locally``, ``no-wave-as-minus-one``,
  ``arrival-time-monotonic``, ``notice-for-remote-prefill``, ``notice-random-id``);
- the handler of output frames (``ignore-engine-dead``: the sentinel is dropped
  before the client sees it; ``engine-dead-fails-first-engine``: it ends only the first
  engine's requests; ``error-output-as-stop``: an ERROR terminal output
  is rewritten as a plain stop; ``unknown-output-fatal``,
  ``reserved-call-id-fatal``, ``unknown-call-id-fatal``: an output for an
  untracked id, or a utility reply with a reserved negative or an unknown call
  id, fails the client instead of being dropped; ``unknown-finish-reason-as-stop``:
  a finish_reason outside 0..4 is read as STOP; ``strict-output-arrays``,
  ``int-for-float-refused``, ``timestamps-compared``, ``aux-frames-dropped``:
  a reader that refuses, or loses, encodings a conforming engine may send).

Without faults every hook hands back what it was given, so a correct client
pays nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Iterable, Mapping

import msgspec

from ecp.spec import (
    ENGINE_CORE_DEAD, EngineCoreOutput, EngineCoreOutputs, EngineCoreReadyResponse, EngineCoreRequest, FinishReason,
    HandshakeError, Hello, ProtocolError, Ready, RemoteProtocolError, decode_any, decode_handshake, decode_outputs, encode_abort,
    encode_add, encode_handshake, encode_outputs, rank_of_identity,
)
from ecp.spec.machine import Abort, Add, Event

from ..faults import Fault, table
from .errors import EngineDeadError
from .abort_coalescer import AbortCoalescer
from .aggregation import Rule, UtilityAggregation
from .router import Router

log = logging.getLogger("ecp.client")

ABORT_ONE_PER_REQUEST = "abort-one-per-request"
FIRST_ENGINE_IS_SLEEPING = "first-engine-is-sleeping"
RESET_PREFIX_CACHE_ANY = "reset-prefix-cache-any"
IGNORE_ENGINE_DEAD = "ignore-engine-dead"
ERROR_OUTPUT_AS_STOP = "error-output-as-stop"
UNKNOWN_OUTPUT_FATAL = "unknown-output-fatal"
RESERVED_CALL_ID_FATAL = "reserved-call-id-fatal"
LENIENT_HANDSHAKE = "lenient-handshake"
ANY_IDENTITY_ACCEPTED = "any-identity-accepted"
LORA_MISMATCH_ACCEPTED = "lora-mismatch-accepted"
ONE_FRAME_ADDS = "one-frame-adds"
SHORT_ADD_ARRAYS = "short-add-arrays"
SAMPLING_PARAMS_ARRAY = "sampling-params-array"
EXTERNAL_ID_AS_REQUEST_ID = "external-id-as-request-id"
ABORT_EXTERNAL_ID = "abort-external-id"
ABORT_EVERY_ENGINE = "abort-every-engine"
WAVE_COUNTED_LOCALLY = "wave-counted-locally"
UNKNOWN_FINISH_REASON_AS_STOP = "unknown-finish-reason-as-stop"
STRICT_OUTPUT_ARRAYS = "strict-output-arrays"
INT_FOR_FLOAT_REFUSED = "int-for-float-refused"
TIMESTAMPS_COMPARED = "timestamps-compared"
AUX_FRAMES_DROPPED = "aux-frames-dropped"
COLLECTIVE_RPC_FIRST_ENGINE = "collective-rpc-first-engine"
UNKNOWN_CALL_ID_FATAL = "unknown-call-id-fatal"
FULL_READY_PAYLOAD_REQUIRED = "full-ready-payload-required"
UNKNOWN_READY_KEYS_REFUSED = "unknown-ready-keys-refused"
REGISTRATION_AS_READY = "registration-as-ready"
PINNED_RANK_IGNORED = "pinned-rank-ignored"
ALL_TO_FIRST_ENGINE = "all-to-first-engine"
NO_WAVE_AS_MINUS_ONE = "no-wave-as-minus-one"
ARRIVAL_TIME_MONOTONIC = "arrival-time-monotonic"
NOTICE_FOR_REMOTE_PREFILL = "notice-for-remote-prefill"
CONSENSUS_AS_LIST = "consensus-as-list"
RESET_PREFIX_CACHE_NEVER_TRUE = "reset-prefix-cache-never-true"
NOTICE_RANDOM_ID = "notice-random-id"
ENGINE_DEAD_FAILS_FIRST_ENGINE = "engine-dead-fails-first-engine"

FAULTS: dict[str, Fault] = table(
    Fault(ABORT_ONE_PER_REQUEST, "ECP-ABORT-5", "no coalescing: one ABORT message per auto-aborted id"),
    Fault(FIRST_ENGINE_IS_SLEEPING, "ECP-UTIL-4",
          "consensus methods (is_sleeping ...) ask only the first engine (vLLM's Python DP behaviour)"),
    Fault(RESET_PREFIX_CACHE_ANY, "ECP-UTIL-5", "reset_prefix_cache aggregates with OR instead of AND"),
    Fault(IGNORE_ENGINE_DEAD, "ECP-ROB-3", "the ENGINE_CORE_DEAD sentinel is ignored instead of failing the client"),
    Fault(ERROR_OUTPUT_AS_STOP, "ECP-OUT-5",
          "an ERROR terminal output reaches the request as finish_reason stop, its RequestError lost"),
    Fault(UNKNOWN_OUTPUT_FATAL, "ECP-OUT-9",
          "an output for a request id the client does not track fails the client instead of being dropped"),
    Fault(RESERVED_CALL_ID_FATAL, "ECP-UTIL-12",
          "a utility reply with a reserved negative call id (-1, -2) fails the client instead of being dropped"),
    Fault(LENIENT_HANDSHAKE, "ECP-HS-7",
          "a duplicate HELLO, READY before HELLO or an unknown status is dropped instead of failing the handshake"),
    Fault(ANY_IDENTITY_ACCEPTED, "ECP-HS-11", "a HELLO from a rank outside the configured ones is answered with INIT"),
    Fault(LORA_MISMATCH_ACCEPTED, "ECP-HS-10",
          "engines that disagree on supports_lora/max_loras are accepted (each read as the first engine's)"),
    Fault(ONE_FRAME_ADDS, "ECP-FRAME-1",
          "ADD goes out as one frame, its type byte glued to the payload (its encoder's own fast path)"),
    Fault(SHORT_ADD_ARRAYS, "ECP-FRAME-3", "ADD arrays are cut after their last non-default element"),
    Fault(SAMPLING_PARAMS_ARRAY, "ECP-FRAME-6", "SamplingParams goes out as an array of its fields, not a map"),
    Fault(EXTERNAL_ID_AS_REQUEST_ID, "ECP-REQ-8",
          "ADD carries the user-facing external_req_id as its request id, so requests with the same "
          "X-Request-Id go out with one id"),
    Fault(ABORT_EXTERNAL_ID, "ECP-FRAME-10", "ABORT names the requests' external_req_id, not the ids their ADDs used"),
    Fault(ABORT_EVERY_ENGINE, "ECP-ABORT-1", "every ABORT also goes to every other engine, not only to the owner"),
    Fault(WAVE_COUNTED_LOCALLY, "ECP-DP-5",
          "the client counts waves itself (one more whenever it adds a request with none other in flight) "
          "instead of stamping its coordinator's wave (0 without one)"),
    Fault(UNKNOWN_FINISH_REASON_AS_STOP, "ECP-OUT-4",
          "a finish_reason outside STOP 0 .. REPETITION 4 is read as STOP instead of being a decode error"),
    Fault(STRICT_OUTPUT_ARRAYS, "ECP-FRAME-4",
          "output arrays shorter or longer than their full length (9, 19) fail the client"),
    Fault(INT_FOR_FLOAT_REFUSED, "ECP-FRAME-5",
          "an int where a float is declared (the timestamp, kv_cache_usage) fails the client"),
    Fault(TIMESTAMPS_COMPARED, "ECP-COMPAT-2",
          "an output timestamp more than a minute ahead of the client's monotonic clock (a Rust engine's "
          "UNIX seconds) fails the client"),
    Fault(AUX_FRAMES_DROPPED, "ECP-FRAME-7", "output messages are read without their aux frames"),
    Fault(COLLECTIVE_RPC_FIRST_ENGINE, "ECP-UTIL-6",
          "collective_rpc returns the first engine's list instead of every engine's, concatenated"),
    Fault(UNKNOWN_CALL_ID_FATAL, "ECP-UTIL-10",
          "a utility reply with a call id the client never issued fails the client instead of being dropped"),
    Fault(FULL_READY_PAYLOAD_REQUIRED, "ECP-HS-4",
          "a ready payload without every key of EngineCoreReadyResponse fails the handshake"),
    Fault(UNKNOWN_READY_KEYS_REFUSED, "ECP-HS-4",
          "a ready payload with a key the client does not know fails the handshake"),
    Fault(REGISTRATION_AS_READY, "ECP-HS-8",
          "an engine's registration stands for its READY: the client serves before the engines said READY"),
    Fault(PINNED_RANK_IGNORED, "ECP-DP-2", "a pinned request (X-data-parallel-rank) goes to the least-loaded engine"),
    Fault(ALL_TO_FIRST_ENGINE, "ECP-DP-3", "every unpinned request goes to the first engine"),
    Fault(NO_WAVE_AS_MINUS_ONE, "ECP-DP-5", "without a coordinator ADD carries current_wave -1 ('no wave'), not 0"),
    Fault(ARRIVAL_TIME_MONOTONIC, "ECP-REQ-1", "ADD's arrival_time is the client's monotonic clock, not UNIX seconds"),
    Fault(NOTICE_FOR_REMOTE_PREFILL, "ECP-REJECT-3",
          "an admitted request whose kv_transfer_params ask for a remote prefill is also announced with a "
          "rejection notice"),
    Fault(CONSENSUS_AS_LIST, "ECP-UTIL-4",
          "consensus methods (is_sleeping ...) return every engine's answer as a list, not the common value"),
    Fault(RESET_PREFIX_CACHE_NEVER_TRUE, "ECP-UTIL-5",
          "reset_prefix_cache combines the engines' answers into nil, so success is never reported"),
    Fault(NOTICE_RANDOM_ID, "ECP-REJECT-2", "a rejection notice carries a random request id, not the client's"),
    Fault(ENGINE_DEAD_FAILS_FIRST_ENGINE, "ECP-OUT-8",
          "ENGINE_CORE_DEAD makes the client unhealthy but ends only the requests of its first engine, as if "
          "the frame named it"),
)

#: the faults of each seam
_HANDSHAKE = frozenset({LENIENT_HANDSHAKE, ANY_IDENTITY_ACCEPTED, LORA_MISMATCH_ACCEPTED,
                        FULL_READY_PAYLOAD_REQUIRED, UNKNOWN_READY_KEYS_REFUSED, REGISTRATION_AS_READY})
_SENDER = frozenset({ONE_FRAME_ADDS, SHORT_ADD_ARRAYS, SAMPLING_PARAMS_ARRAY, EXTERNAL_ID_AS_REQUEST_ID,
                     ABORT_EXTERNAL_ID, ABORT_EVERY_ENGINE, WAVE_COUNTED_LOCALLY, NO_WAVE_AS_MINUS_ONE,
                     ARRIVAL_TIME_MONOTONIC, NOTICE_FOR_REMOTE_PREFILL, NOTICE_RANDOM_ID})
_ROUTER = frozenset({PINNED_RANK_IGNORED, ALL_TO_FIRST_ENGINE})
_OUTPUT = frozenset({ERROR_OUTPUT_AS_STOP, UNKNOWN_OUTPUT_FATAL, RESERVED_CALL_ID_FATAL, UNKNOWN_CALL_ID_FATAL,
                     UNKNOWN_FINISH_REASON_AS_STOP, STRICT_OUTPUT_ARRAYS, INT_FOR_FLOAT_REFUSED,
                     TIMESTAMPS_COMPARED, AUX_FRAMES_DROPPED})
_AGGREGATION = frozenset({FIRST_ENGINE_IS_SLEEPING, RESET_PREFIX_CACHE_ANY, COLLECTIVE_RPC_FIRST_ENGINE,
                          CONSENSUS_AS_LIST, RESET_PREFIX_CACHE_NEVER_TRUE})


class ClientFaults:
    """The faults a client runs with. ``names`` may hold other roles' faults (the
    frontend passes its whole ``--bug`` set); only this table's are kept."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n for n in names if n in FAULTS)

    def __bool__(self) -> bool:
        return bool(self.names)

    def coalescer(self, coalescer: AbortCoalescer) -> AbortCoalescer:
        """The auto-abort queue the client uses instead of ``coalescer``."""
        return _OneIdPerDrain() if ABORT_ONE_PER_REQUEST in self.names else coalescer

    def aggregation(self, aggregation: UtilityAggregation) -> UtilityAggregation:
        """The aggregation table the client uses instead of ``aggregation``."""
        bent = self.names & _AGGREGATION
        return _BentAggregation(bent, aggregation.rules) if bent else aggregation

    def router(self, router: Router) -> Router:
        """The engine chooser the client uses instead of ``router``."""
        bent = self.names & _ROUTER
        return _BentRouter(bent, router.ranks) if bent else router

    def handshake(self, owner: Any) -> Any:
        """The handshake owner the client uses instead of ``owner`` (a :class:`HandshakeOwner`)."""
        bent = self.names & _HANDSHAKE
        return _BentHandshake(bent, owner) if bent else owner

    def sender(self, send: Callable[[Event], Awaitable[None]]) -> Callable[[Event], Awaitable[None]]:
        """The sender of every input message the client uses instead of ``send`` (its bound ``_send``)."""
        bent = self.names & _SENDER
        return _SendFaults(bent, send) if bent else send

    def output_handler(self, handler: Callable[[list[bytes]], None], client: Any) -> Callable[[list[bytes]], None]:
        """The handler of every output message ``client`` (an ``EngineCoreClient``) uses instead of
        ``handler``."""
        bent = self.names & _OUTPUT
        if bent:
            handler = _MessageFaults(bent, handler, client)
        if ENGINE_DEAD_FAILS_FIRST_ENGINE in self.names:
            handler = _DeadFailsFirstEngine(handler, client)
        if IGNORE_ENGINE_DEAD not in self.names:
            return handler

        def ignoring_engine_dead(frames: list[bytes]) -> None:
            if len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD:
                log.warning("ignoring ENGINE_CORE_DEAD (fault %s)", IGNORE_ENGINE_DEAD)
                return
            handler(frames)

        return ignoring_engine_dead


class _DeadFailsFirstEngine:
    """ENGINE_CORE_DEAD read as if it named the client's first engine: the client turns unhealthy and
    that engine's requests and the utility waiters end; the other engines' requests are left running."""

    def __init__(self, handler: Callable[[list[bytes]], None], client: Any) -> None:
        self.handler = handler
        self.client = client

    def __call__(self, frames: list[bytes]) -> None:
        if not (len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD):
            self.handler(frames)
            return
        client = self.client
        error = EngineDeadError()
        if not client._health.fail(error):
            return
        first = min(client.engine_ranks)
        for entry in [e for e in client._registry if e.engine_rank == first]:
            client._registry.take(entry.request_id)
            entry.sink.end(error)
        client._utilities.fail_all(error)


class _MessageFaults:
    """Decodes each output message once more and bends it before the client's own handler.

    ``handler`` is the client's own handler of output messages; the faults read ``client``'s
    request registry and pending utility calls, and fail it the way a client that got the
    rule wrong would (through its own ``_fail``).
    """

    def __init__(self, names: frozenset[str], handler: Callable[[list[bytes]], None], client: Any) -> None:
        self.names = names
        self.handler = handler
        self.client = client

    def _refuse(self, why: str, clause: str, fault: str) -> None:
        self.client._fail(RemoteProtocolError(f"{why} (fault {fault})", clause=clause))

    def _raw(self, frames: list[bytes]) -> Any:
        """The payload as plain msgpack values (None when it is the sentinel or not msgpack)."""
        if len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD:
            return None
        try:
            return decode_any(frames[0])
        except ProtocolError:
            return None

    def _bend_raw(self, frames: list[bytes]) -> list[bytes] | None:
        """The faults that read the message below the typed decoder: ``None`` = the client failed."""
        names = self.names
        if AUX_FRAMES_DROPPED in names:
            frames = frames[:1]
        if not names & {UNKNOWN_FINISH_REASON_AS_STOP, STRICT_OUTPUT_ARRAYS, INT_FOR_FLOAT_REFUSED,
                        TIMESTAMPS_COMPARED}:
            return frames
        raw = self._raw(frames)
        if not isinstance(raw, list):
            return frames
        outputs = raw[1] if len(raw) > 1 and isinstance(raw[1], list) else []
        if STRICT_OUTPUT_ARRAYS in names:
            lengths = {len(raw)} | {len(o) for o in outputs if isinstance(o, list)}
            if len(raw) != _OUTPUTS_LEN or any(len(o) != _OUTPUT_LEN for o in outputs if isinstance(o, list)):
                self._refuse(f"an output message with arrays of {sorted(lengths)} elements, not "
                             f"{_OUTPUTS_LEN}/{_OUTPUT_LEN}", "ECP-FRAME-4", STRICT_OUTPUT_ARRAYS)
                return None
        stats = raw[2] if len(raw) > 2 and isinstance(raw[2], dict) else {}
        timestamp = raw[3] if len(raw) > 3 else 0.0
        if INT_FOR_FLOAT_REFUSED in names and (type(timestamp) is int or type(stats.get("kv_cache_usage")) is int):
            self._refuse("an int where a float is declared", "ECP-FRAME-5", INT_FOR_FLOAT_REFUSED)
            return None
        if TIMESTAMPS_COMPARED in names and isinstance(timestamp, (int, float)) \
                and timestamp > time.monotonic() + _CLOCK_SLACK_S:
            self._refuse(f"an output timestamp {timestamp} ahead of this client's clock", "ECP-COMPAT-2",
                         TIMESTAMPS_COMPARED)
            return None
        if UNKNOWN_FINISH_REASON_AS_STOP in names:
            unknown = [o for o in outputs if isinstance(o, list) and len(o) > 5 and isinstance(o[5], int)
                       and o[5] not in _FINISH_REASONS]
            if unknown:
                for o in unknown:
                    o[5] = int(FinishReason.STOP)
                frames = [msgspec.msgpack.encode(raw), *frames[1:]]
        return frames

    def __call__(self, frames: list[bytes]) -> None:
        bent = self._bend_raw(frames)
        if bent is None:
            return
        frames = bent
        try:
            msg = decode_outputs(frames)
        except ProtocolError:
            msg = None
        if not isinstance(msg, EngineCoreOutputs):
            self.handler(frames)
            return
        client = self.client
        if UNKNOWN_OUTPUT_FATAL in self.names:
            unknown = [o.request_id for o in msg.outputs if client._registry.get(o.request_id) is None]
            if unknown:
                client._fail(RemoteProtocolError(f"an output for request {unknown[0]!r}, which this client "
                                                 f"does not track (fault {UNKNOWN_OUTPUT_FATAL})",
                                                 clause="ECP-OUT-9", request_id=unknown[0]))
                return
        reply = msg.utility_output
        if RESERVED_CALL_ID_FATAL in self.names and reply is not None \
                and reply.call_id < 0:
            client._fail(RemoteProtocolError(f"a utility reply with call id {reply.call_id}, which this "
                                             f"client never issued (fault {RESERVED_CALL_ID_FATAL})",
                                             clause="ECP-UTIL-12"))
            return
        if UNKNOWN_CALL_ID_FATAL in self.names and reply is not None \
                and reply.call_id >= 0 and reply.call_id not in client._utilities.pending:
            self._refuse(f"a utility reply with call id {reply.call_id}, which this client never issued",
                         "ECP-UTIL-10", UNKNOWN_CALL_ID_FATAL)
            return
        if ERROR_OUTPUT_AS_STOP in self.names and any(o.finish_reason is FinishReason.ERROR for o in msg.outputs):
            outputs = [msgspec.structs.replace(o, finish_reason=FinishReason.STOP, error=None)
                       if o.finish_reason is FinishReason.ERROR else o for o in msg.outputs]
            frames = encode_outputs(msgspec.structs.replace(msg, outputs=outputs))
        self.handler(frames)


#: full lengths of EngineCoreOutputs and EngineCoreOutput, the finish reasons there are, and how far
#: ahead of the client's clock the timestamps-compared fault lets an engine's timestamp be
_OUTPUTS_LEN = len(msgspec.structs.fields(EngineCoreOutputs))
_OUTPUT_LEN = len(msgspec.structs.fields(EngineCoreOutput))
_FINISH_REASONS = frozenset(int(r) for r in FinishReason)
_CLOCK_SLACK_S = 60.0


class _BentHandshake:
    """A correct handshake owner seen through the handshake faults (everything else is the owner's)."""

    def __init__(self, names: frozenset[str], owner: Any) -> None:
        self.names = names
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.owner, name)

    def _stranger(self, frames: list[bytes]) -> bool:
        try:
            return rank_of_identity(bytes(frames[0])) not in self.owner.machine.engines
        except (ProtocolError, IndexError):
            return True

    def on_handshake_frames(self, frames: list[bytes]) -> list[list[bytes]]:
        if ANY_IDENTITY_ACCEPTED in self.names and self._stranger(frames):
            try:
                hello = isinstance(decode_handshake(frames[1]), Hello)
            except (ProtocolError, IndexError):
                hello = False
            # the stranger is answered as if it were configured; the machine never hears of it
            return [[bytes(frames[0]), encode_handshake(self.owner.init)]] if hello else []
        if REGISTRATION_AS_READY in self.names and self._ready_already(frames):
            return []   # the registration stood for it
        try:
            return self.owner.on_handshake_frames(frames)
        except HandshakeError as exc:
            if LENIENT_HANDSHAKE in self.names and exc.clause == "ECP-HS-7":
                log.warning("dropping a handshake message: %s (fault %s)", exc, LENIENT_HANDSHAKE)
                return []
            raise

    def _ready_already(self, frames: list[bytes]) -> bool:
        """A READY from an engine the machine already counts as READY."""
        try:
            view = self.owner.machine.engines.get(rank_of_identity(bytes(frames[0])))
            return view is not None and view.handshake == "READY" and not isinstance(
                decode_handshake(frames[1]), Hello)
        except (ProtocolError, IndexError):
            return False

    def on_registration(self, frames: list[bytes]) -> int:
        names, owner = self.names, self.owner
        if ANY_IDENTITY_ACCEPTED in names and self._stranger(frames):
            return -1
        payload = decode_any(frames[1]) if len(frames) == 2 and frames[1] else None
        if isinstance(payload, dict):
            keys = set(_READY_KEYS)
            if FULL_READY_PAYLOAD_REQUIRED in names and keys - set(payload):
                raise HandshakeError(f"the ready payload lacks {sorted(keys - set(payload))} "
                                     f"(fault {FULL_READY_PAYLOAD_REQUIRED})", clause="ECP-HS-4")
            if UNKNOWN_READY_KEYS_REFUSED in names and set(payload) - keys:
                raise HandshakeError(f"the ready payload has unknown keys {sorted(set(payload) - keys)} "
                                     f"(fault {UNKNOWN_READY_KEYS_REFUSED})", clause="ECP-HS-4")
            first = owner._lora
            if LORA_MISMATCH_ACCEPTED in names and first is not None:
                payload["supports_lora"], payload["max_loras"] = first[1]
                frames = [frames[0], msgspec.msgpack.encode(payload)]
        rank = owner.on_registration(frames)
        view = owner.machine.engines[rank]
        if REGISTRATION_AS_READY in names and view.handshake != "READY":   # its READY may have come first
            hello = view.hello   # set: the machine takes no registration before HELLO
            owner.on_handshake_frames([bytes(frames[0]), encode_handshake(Ready(local=hello.local,
                                                                               headless=hello.headless))])
        return rank


class _BentRouter(Router):
    def __init__(self, faults: frozenset[str], ranks: tuple[int, ...]) -> None:
        super().__init__(ranks)
        self.faults = faults

    def choose(self, in_flight: dict[int, int], pinned: int | None = None) -> int:
        if PINNED_RANK_IGNORED in self.faults:
            pinned = None
        if pinned is None and ALL_TO_FIRST_ENGINE in self.faults:
            return self.ranks[0]
        return super().choose(in_flight, pinned)


class _SendFaults:
    """Sends each input message through the client's machine as it should go, then puts a bent
    version of it on the wire (``send`` is the client's bound ``_send``; messages no fault bends
    go through it unchanged)."""

    def __init__(self, names: frozenset[str], send: Callable[[Event], Awaitable[None]]) -> None:
        self.names = names
        self.send = send
        self.client: Any = getattr(send, "__self__", None)
        self.external: dict[str, str] = {}   # internal id -> external id (abort-external-id)
        self.wave = 0                        # wave-counted-locally
        self.added = False

    async def __call__(self, event: Event) -> None:
        client = self.client
        if client is None or not isinstance(event, (Add, Abort)):
            await self.send(event)
            return
        [send] = client._machine.send(event)   # the machine follows the correct message
        frames = list(send.frames[1:])         # frames[0] is the engine's identity
        targets = [event.rank]
        if isinstance(event, Add):
            frames = self._add(event.request, frames)
        elif isinstance(event, Abort):
            ids = [self.external.get(rid, rid) for rid in event.request_ids] \
                if ABORT_EXTERNAL_ID in self.names else list(event.request_ids)
            frames = encode_abort(ids)
            if ABORT_EVERY_ENGINE in self.names:
                targets = list(client.engine_ranks)
        if ONE_FRAME_ADDS in self.names and isinstance(event, Add):
            frames = [bytes(frames[0]) + bytes(frames[1]), *frames[2:]]
        for rank in targets:
            await client._put(rank, frames)
        if NOTICE_FOR_REMOTE_PREFILL in self.names and isinstance(event, Add) and not event.request.abort_immediately:
            sp = event.request.sampling_params
            if sp is not None and (sp.kv_transfer_params or {}).get("do_remote_prefill"):
                notice = msgspec.structs.replace(event.request, request_id=event.request.request_id + "-notice",
                                                 prompt_token_ids=[0], abort_immediately=True)
                await client._put(event.rank, encode_add(notice))

    def _add(self, request: EngineCoreRequest, frames: list[bytes]) -> list[bytes]:
        names = self.names
        if request.external_req_id is not None:
            self.external[request.request_id] = request.external_req_id
        if WAVE_COUNTED_LOCALLY in names:
            if self.added and len(self.client._registry) <= 1:   # nothing else in flight: a "new wave"
                self.wave += 1
            self.added = True
            request = msgspec.structs.replace(request, current_wave=self.wave)
        if NO_WAVE_AS_MINUS_ONE in names and self.client.current_wave == 0 and self.client._coordinator is None:
            request = msgspec.structs.replace(request, current_wave=-1)
        if ARRIVAL_TIME_MONOTONIC in names:
            request = msgspec.structs.replace(request, arrival_time=time.monotonic())
        if EXTERNAL_ID_AS_REQUEST_ID in names and request.external_req_id is not None:
            request = msgspec.structs.replace(request, request_id=request.external_req_id)
        if NOTICE_RANDOM_ID in names and request.abort_immediately:
            request = msgspec.structs.replace(request, request_id=uuid.uuid4().hex)
        frames = encode_add(request)
        if names & {SHORT_ADD_ARRAYS, SAMPLING_PARAMS_ARRAY}:
            raw = decode_any(frames[1])
            if SAMPLING_PARAMS_ARRAY in names and request.sampling_params is not None:
                raw[3] = list(msgspec.structs.astuple(request.sampling_params))
            if SHORT_ADD_ARRAYS in names:
                defaults = [None if f.default is msgspec.NODEFAULT else f.default
                            for f in msgspec.structs.fields(EngineCoreRequest)]
                while len(raw) > _ADD_REQUIRED and raw[-1] == defaults[len(raw) - 1]:
                    raw.pop()
            frames = [frames[0], msgspec.msgpack.encode(raw), *frames[2:]]
        return frames


#: every key of the ready payload (EngineCoreReadyResponse)
_READY_KEYS = tuple(f.encode_name for f in msgspec.structs.fields(EngineCoreReadyResponse))
#: EngineCoreRequest's required fields (request_id .. data_parallel_rank)
_ADD_REQUIRED = sum(1 for f in msgspec.structs.fields(EngineCoreRequest) if f.required)


class _OneIdPerDrain(AbortCoalescer):
    def drain(self, take_owner: Callable[[str, Any], int | None], max_items: int = 1) -> dict[int, list[str]]:
        return super().drain(take_owner, max_items=1)


class _BentAggregation(UtilityAggregation):
    def __init__(self, faults: frozenset[str], rules: Mapping[str, Any]) -> None:
        super().__init__(rules)
        self.faults = faults

    def targets(self, method: str, ranks: tuple[int, ...]) -> tuple[int, ...]:
        if FIRST_ENGINE_IS_SLEEPING in self.faults and self.rule(method).rule is Rule.CONSENSUS:
            return ranks[:1]
        return super().targets(method, ranks)

    def combine(self, method: str, values: Mapping[int, Any]) -> Any:
        if RESET_PREFIX_CACHE_ANY in self.faults and method == "reset_prefix_cache" and values:
            return any(values.values())
        if RESET_PREFIX_CACHE_NEVER_TRUE in self.faults and method == "reset_prefix_cache":
            return None
        if COLLECTIVE_RPC_FIRST_ENGINE in self.faults and method == "collective_rpc" and values:
            return values[min(values)]
        if CONSENSUS_AS_LIST in self.faults and self.rule(method).rule is Rule.CONSENSUS:
            return [values[r] for r in sorted(values)]
        return super().combine(method, values)
