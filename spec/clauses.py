"""The numbered clauses of the protocol, as data.

``spec/PROTOCOL.md`` is the normative prose; this module is the same catalogue
in machine-readable form so that code can cite a clause (errors carry
``clause="ECP-ABORT-3"``, conformance cases name the clause they check) and a
test can check that every cited id exists and that the prose and the data list
the same ids.

Every clause also carries its *conformance level* (:data:`CONFORMANCE_LEVELS`):
``interop`` -- what interoperation with vLLM 0.33 requires (a peer that breaks it
breaks real deployments), or ``hardened`` -- what a hardened implementation adds
beyond vLLM 0.33 (reject-and-continue on malformed input, answering requests a
conforming peer never sends). This catalogue is the one place the level is
stored: conformance cases inherit it from the clause they cite, and
``spec/PROTOCOL.md`` renders it beside the keyword.

Rules for editing: ids are stable and never reused. A clause that is withdrawn
stays here with ``withdrawn=True``. New clauses take the next free number of
their area.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .layout.model import Layout
    from .sentences import Sentence

Level = Literal["MUST", "SHOULD", "MAY"]
ConformanceLevel = Literal["interop", "hardened"]

#: the conformance levels, weakest first: a peer conforming at a level conforms at every level before it
CONFORMANCE_LEVELS: tuple[ConformanceLevel, ...] = ("interop", "hardened")

#: Clauses that strengthen vLLM 0.33's behaviour: a conforming frontend never sends what they
#: guard against, so real deployments work without them (PROTOCOL.md states vLLM 0.33's actual
#: behaviour beside each). Every other clause is ``interop``.
HARDENED: frozenset[str] = frozenset({
    "ECP-HS-8",     # bounded handshake: vLLM waits for a remote engine's READY without a deadline
    "ECP-REQ-2",    # duplicate in-flight id: vLLM asserts and fails closed; frontends never send one (REQ-8)
    "ECP-REQ-3",    # invalid ADD: vLLM validates in the frontend; its engine core does not reject
    "ECP-FRAME-9",  # decode limits: vLLM's input thread ends on the decode error
    "ECP-ROB-1",    # reject-and-continue on bad input: vLLM's engine stops serving
    "ECP-ROB-2",    # ERROR for a mistyped ADD: vLLM's engine stops serving
    "ECP-ROB-4",    # out-of-range client_index: vLLM's output thread ends
    "ECP-ABORT-5",  # coalesced auto-aborts: vLLM's Python frontend sends one ABORT per stream
    "ECP-SEC-4",    # producer allow-list: vLLM's NIXL worker connects wherever a request says
    "ECP-SEC-5",    # trusted kv_transfer_params: vLLM's frontend forwards any client's
})

#: Clauses that hold only in the releases that have a feature (``spec/releases.py`` computes which
#: from the shipped layouts; PROTOCOL.md renders the span beside the keyword, e.g. ``(MUST, vLLM
#: 0.33)``). A harness testing another release reports the cases citing them UNSUPPORTED, naming
#: the release. Every other clause holds in every shipped release.
RELEASE_BOUND: dict[str, tuple[str, ...]] = {
    "ECP-OUT-5": ("field:EngineCoreOutput.error", "message:RequestError"),
    # the rejection notice is an ADD with abort_immediately: a release without the field has no notice
    **{f"ECP-REJECT-{n}": ("field:EngineCoreRequest.abort_immediately",) for n in (1, 2, 3, 5, 6)},
}

AREAS: dict[str, str] = {
    "SOCK": "Sockets and identities",
    "HS": "Startup handshake",
    "FRAME": "Framing and encoding",
    "REQ": "Requests (ADD)",
    "OUT": "Outputs",
    "ABORT": "Aborts",
    "UTIL": "Utility calls",
    "DP": "Data parallel",
    "REJECT": "Rejection notifications (abort_immediately)",
    "ROB": "Robustness",
    "SEC": "Security",
    "COMPAT": "Compatibility",
    "HTTP": "HTTP surface of a frontend",
}


@dataclass(frozen=True)
class Clause:
    """One numbered requirement of the protocol."""

    id: str
    level: Level
    title: str
    text: str
    withdrawn: bool = False
    conformance_level: ConformanceLevel = "interop"

    @property
    def area(self) -> str:
        return self.id.split("-")[1]

    @property
    def features(self) -> tuple[str, ...]:
        """What the clause needs of a release (:data:`RELEASE_BOUND`); empty: every release."""
        return RELEASE_BOUND.get(self.id, ())

    def holds_in(self, layout: "Layout") -> bool:
        """Whether the clause binds a peer of ``layout``'s release (it has every feature)."""
        return not self.missing_in(layout)

    def missing_in(self, layout: "Layout") -> tuple[str, ...]:
        """The features the clause needs that ``layout``'s release lacks (empty: the clause binds it)."""
        if not self.features:
            return ()
        from .releases import features_of

        have = features_of(layout)
        return tuple(f for f in self.features if f not in have)

    def release_span(self) -> str:
        """The shipped releases the clause holds in: ``all``, ``0.33``, ``0.28–0.33``."""
        from .releases import releases, releases_with, span

        have = set(releases())
        for feature in self.features:
            have &= set(releases_with(feature))
        return span(sorted(have))


def _c(id: str, level: Level, title: str, text: str) -> Clause:
    return Clause(id, level, title, " ".join(text.split()),
                  conformance_level="hardened" if id in HARDENED else "interop")


_CLAUSES: tuple[Clause, ...] = (
    # ---------------------------------------------------------------- SOCK
    _c("ECP-SOCK-1", "MUST", "Frontend binds", """The frontend binds the handshake ROUTER, every input ROUTER
       and every output PULL; engines connect. Both sides bind to loopback or ipc unless configured
       otherwise."""),
    _c("ECP-SOCK-2", "MUST", "Engine identity", """An engine's ZeroMQ identity is its global data-parallel
       rank as exactly 2 bytes, little-endian unsigned 16-bit, on the handshake DEALER, every input
       DEALER and the coordinator XSUB."""),
    _c("ECP-SOCK-3", "MUST", "One input DEALER per client", """An engine connects one DEALER to every address
       in INIT ``addresses.inputs`` and one PUSH to every address in ``addresses.outputs``; index i of
       both lists is client i."""),
    _c("ECP-SOCK-4", "MUST", "Outputs go to their client", """An output for a request goes to
       ``outputs[client_index]`` of that request; a utility reply goes to ``outputs[client_index]`` of
       the UTILITY payload."""),
    _c("ECP-SOCK-5", "SHOULD", "Unlimited high-water marks", """Both sides set SNDHWM and RCVHWM to 0 so that a
       burst is never silently dropped."""),
    # ------------------------------------------------------------------ HS
    _c("ECP-HS-1", "MUST", "HELLO first", """The engine's first handshake message is HELLO, a map with
       ``status: "HELLO"``, ``local: bool`` and ``headless: bool``; receivers ignore unknown keys. ``local`` and
       ``headless`` say the engine's deployment, the same in HELLO and READY, and are never both true."""),
    _c("ECP-HS-2", "MUST", "INIT answers HELLO", """The frontend answers HELLO with INIT
       (``EngineHandshakeMetadata``): ``addresses`` (``inputs``, ``outputs`` of equal non-zero length,
       optional coordinator addresses) and ``parallel_config``."""),
    _c("ECP-HS-3", "MUST", "Ready payload on every input", """After INIT the engine sends the ready payload
       (``EngineCoreReadyResponse``, 17 required keys) as its first message on every input DEALER; this
       registration makes it addressable by the ROUTER."""),
    _c("ECP-HS-4", "MUST", "Ready payload keys and types", """The ready payload is a map that carries every
       required key with its declared type; optional keys may be absent; unknown keys are ignored by
       the receiver. An engine that lacks an optional capability declares it: in the ready payload where
       it has a key for it (``enable_sleep_mode``), otherwise to whoever checks it."""),
    _c("ECP-HS-5", "MUST", "READY after registration", """The engine sends READY (``status: "READY"``, ``local``,
       ``headless``) on the handshake socket only after the ready payload went out on every input
       socket and, when INIT names a coordinator, after the coordinator gate; at ``data_parallel_size > 1``
       (the engine's own, as its ready payload says) READY carries ``parallel_config_hash`` (str)."""),
    _c("ECP-HS-6", "MUST", "Coordinator gate", """When INIT carries coordinator addresses the engine
       subscribes (``0x01``) to ``coordinator_input`` and waits for the single frame ``READY`` before it
       sends READY."""),
    _c("ECP-HS-7", "MUST", "Handshake state order", """HELLO is accepted once per identity and only before
       INIT; READY only after INIT; a duplicate HELLO or READY, or an unknown ``status``, is a handshake
       error."""),
    _c("ECP-HS-8", "MUST", "Bounded handshake", """Every handshake stage is bounded by a timeout; a stage
       that times out fails with an error naming the stage."""),
    _c("ECP-HS-9", "MUST", "max_model_len is the minimum", """A frontend serving several engines uses the
       minimum ``max_model_len`` over their ready payloads: no ADD carries a prompt plus ``max_tokens`` above it
       (``ECP-HTTP-8`` says how a frontend keeps to it)."""),
    _c("ECP-HS-10", "SHOULD", "Consistent engines", """A frontend rejects engines whose ready payloads
       disagree on LoRA capability (``supports_lora``, ``max_loras``)."""),
    _c("ECP-HS-11", "MUST", "Unexpected identity", """A frontend rejects a handshake or registration from an
       identity outside the configured rank range."""),
    _c("ECP-HS-12", "MAY", "Empty ready payload", """The Python frontend accepts an empty ready payload;
       engines MUST NOT rely on it (the Rust frontend rejects it)."""),
    _c("ECP-HS-13", "MUST", "Startup utilities", """An engine answers the utilities a Python frontend sends right
       after READY: ``reset_mm_cache []`` (result nil) and ``get_supported_tasks []`` (array of str; it
       contains ``"generate"`` for a generating model, which the frontend needs to mount its completion
       routes)."""),
    # --------------------------------------------------------------- FRAME
    _c("ECP-FRAME-1", "MUST", "Request type byte", """Every input message is ``[type, payload, *aux]`` at the
       engine, where ``type`` is exactly one byte: ADD 0x00, ABORT 0x01, START_DP_WAVE 0x02, UTILITY
       0x03. 0x04 and 0x05 are engine-internal and never sent."""),
    _c("ECP-FRAME-2", "MUST", "Output framing", """Every output message is ``[payload, *aux]`` with an
       ``EngineCoreOutputs`` payload, or the single raw frame ``ENGINE_CORE_DEAD``."""),
    _c("ECP-FRAME-3", "MUST", "Array structs are full length", """Senders encode array-like structs
       (``EngineCoreRequest`` 22, ``EngineCoreOutput`` 19, ``EngineCoreOutputs`` 9, ``UtilityOutput`` 3)
       at full length in declaration order."""),
    _c("ECP-FRAME-4", "MUST", "Tolerant array decoding", """Receivers accept array-like structs shortened
       down to their required fields and longer ones with unknown trailing elements."""),
    _c("ECP-FRAME-5", "MUST", "Tolerant scalars", """Receivers accept float32 or float64 where a float is
       declared, an int where a float is declared, fixmap or map16 headers, and arrays where sets are
       declared."""),
    _c("ECP-FRAME-6", "MUST", "Map structs", """``SamplingParams`` is a map keyed by field name with
       default-valued keys omitted; receivers treat an absent key as its default and ignore unknown
       keys; presence of a key does not imply a non-default value."""),
    _c("ECP-FRAME-7", "MUST", "Tensors", """A tensor or ndarray is ``[dtype, shape, data]`` where ``data`` is
       msgpack ext type 3 holding the C-contiguous little-endian bytes, or a positive int indexing the
       multipart message (1 = first aux frame; 0, the payload itself, is refused)."""),
    _c("ECP-FRAME-8", "SHOULD", "Aux-frame threshold", """Senders place tensor buffers of 256 bytes or more in
       aux frames and smaller ones inline."""),
    _c("ECP-FRAME-9", "MUST", "Decode limits", """Receivers enforce limits on frame size, collection length
       and nesting depth before allocating for a declared size."""),
    _c("ECP-FRAME-10", "MUST", "Identity of request ids", """Request ids are strings; ABORT carries the same
       internal ids that ADD used."""),
    _c("ECP-FRAME-11", "MUST", "Wire forms of values", """A value conforms by its msgpack type and value, not
       its bytes: senders write any integer form that holds an int (never a float), float64 or an exact
       float32 or an integer for a float, any header width; receivers accept every such form; untyped
       values keep their type; no timestamps, other ext types, trailing bytes or repeated keys."""),
    # ----------------------------------------------------------------- REQ
    _c("ECP-REQ-1", "MUST", "ADD payload", """An ADD payload is an ``EngineCoreRequest``; exactly one of
       ``sampling_params`` and ``pooling_params`` is non-nil."""),
    _c("ECP-REQ-2", "MUST", "Duplicate request id", """An ADD whose id is already in flight at the engine is
       answered with an ERROR output carrying a ``RequestError``; the running request is unaffected."""),
    _c("ECP-REQ-3", "MUST", "Invalid request", """An ADD with invalid parameters, a prompt longer than
       ``max_model_len`` or a task the engine does not support is answered with one ERROR output with a
       ``RequestError``; the engine keeps serving."""),
    _c("ECP-REQ-4", "MUST", "max_tokens", """A request produces at most ``max_tokens`` new tokens and
       finishes with LENGTH when it reaches ``max_tokens`` or ``max_model_len``."""),
    _c("ECP-REQ-5", "MUST", "Stop conditions", """A request finishes with STOP on a token in
       ``stop_token_ids`` (``stop_reason`` = that token) or on EOS unless ``ignore_eos`` (``stop_reason``
       nil); no stop condition applies before ``min_tokens`` tokens were produced; a stop condition on
       the token that reaches the length cap wins: STOP, not LENGTH."""),
    _c("ECP-REQ-6", "MUST", "client_index", """The frontend stamps ``client_index`` with its own client
       number; the engine routes every output of the request to that client."""),
    _c("ECP-REQ-7", "MUST", "Paused engine", """An ADD received while generation is paused by
       ``pause_generation`` with mode ``abort`` or ``wait``, other than an ``abort_immediately`` request,
       is answered with an ERROR output with code ``engine_paused`` and ``retryable: true`` until the
       scheduler resumes; any other pause (mode ``keep``, ``pause_scheduler``) queues it."""),
    _c("ECP-REQ-8", "MUST", "Duplicate ids at the frontend", """A frontend never sends an ADD whose id is
       already in flight from that frontend."""),
    # ----------------------------------------------------------------- OUT
    _c("ECP-OUT-1", "MUST", "Exactly one terminal output", """Every admitted request receives exactly one
       output with a non-nil ``finish_reason`` and nothing after it, except requests ended by a client
       ABORT or by ``abort_immediately``."""),
    _c("ECP-OUT-2", "MUST", "engine_index", """``EngineCoreOutputs.engine_index`` is the sender's global DP
       rank."""),
    _c("ECP-OUT-3", "MUST", "Delta tokens", """``new_token_ids`` holds only the tokens produced since the
       previous output of that request."""),
    _c("ECP-OUT-4", "MUST", "FinishReason values", """``finish_reason`` is one of STOP 0, LENGTH 1, ABORT 2,
       ERROR 3, REPETITION 4; any other value is a decode error."""),
    _c("ECP-OUT-5", "MUST", "ERROR carries RequestError", """An ERROR terminal output carries ``error`` =
       ``{code, message, retryable}`` and lists the id in ``finished_requests``, except the ERROR for a
       duplicate of a running request, which MUST NOT list it; a refused ADD's ERROR says ``retryable:
       false``; its code MAY be vLLM's ``validation_error`` or the engine's own."""),
    _c("ECP-OUT-6", "MUST", "One message family", """An ``EngineCoreOutputs`` is a request batch, a utility
       reply, or a DP control message (``wave_complete`` / ``start_wave``); DP control messages never go
       to a frontend's output socket."""),
    _c("ECP-OUT-7", "MAY", "Scheduler stats", """Engines may attach ``scheduler_stats``; frontends must serve
       engines that never send them."""),
    _c("ECP-OUT-8", "MUST", "ENGINE_CORE_DEAD", """An engine that fails fatally sends the raw 16-byte frame
       ``ENGINE_CORE_DEAD`` on every output socket before exiting; the frame names no engine, so a frontend
       that receives it on an output socket fails every request and waiter of every engine whose outputs reach
       that socket (with one output socket per client: all of them) and becomes unhealthy."""),
    _c("ECP-OUT-9", "MUST", "Outputs for unknown ids", """A frontend drops outputs for request ids it no longer
       tracks."""),
    _c("ECP-OUT-10", "MUST", "Logprob tensors", """Sampled logprobs are numpy arrays (ids ``<i4`` [N, K+1],
       logprobs ``<f4`` [N, K+1], 1-based ranks ``<i8`` [N], the sampled token first); ``logprobs: -1`` is
       K = V; prompt logprobs are torch tensors (``int32``, ``float32``, ``int32``) of P - 1 rows."""),
    # --------------------------------------------------------------- ABORT
    _c("ECP-ABORT-1", "MUST", "ABORT payload", """An ABORT payload is an array of internal request ids, sent
       only to the engine that owns them."""),
    _c("ECP-ABORT-2", "MUST", "Abort stops a request", """On ABORT the engine stops producing tokens for each
       known id and frees its KV blocks."""),
    _c("ECP-ABORT-3", "MUST", "Unknown ids are no-ops", """Unknown or already finished ids in an ABORT are
       ignored and do not disturb other requests."""),
    _c("ECP-ABORT-4", "MAY", "Abort outputs", """An engine may or may not emit an ABORT terminal output for a
       client-aborted request; frontends must work with both."""),
    _c("ECP-ABORT-5", "SHOULD", "Coalesced auto-aborts", """A frontend coalesces auto-aborts (dropped streams,
       frontend stop strings): one drain takes whatever is queued, at most 1024 ids, without waiting for
       more, and sends one ABORT per engine."""),
    _c("ECP-ABORT-6", "MUST", "Exact abort set", """The union of ids a frontend sends in ABORT messages equals
       the set of its dropped in-flight requests; it never aborts ids that already finished and never
       sends ids it does not know."""),
    _c("ECP-ABORT-7", "MUST", "Prompt auto-abort", """A frontend forwards a lone auto-abort without waiting for
       more to batch with it."""),
    _c("ECP-ABORT-8", "MUST", "Explicit abort", """An explicit abort finalises each known stream locally with
       an ABORT result and then sends one ABORT per owning engine; a send failure to one engine does not
       stop the others."""),
    _c("ECP-ABORT-10", "MUST", "Registered until aborted", """A frontend keeps a dropped in-flight request
       registered (its internal id and owning engine) until the ABORT naming it was sent; outputs arriving
       for it meanwhile are dropped (``ECP-OUT-9``), never delivered or allowed to unregister it silently."""),
    _c("ECP-ABORT-9", "MUST", "Engine-initiated aborts", """When the engine ends requests itself (sleep or pause
       with mode ``abort``, shutdown) it emits an ABORT terminal output for each and lists them in
       ``finished_requests``."""),
    # ---------------------------------------------------------------- UTIL
    _c("ECP-UTIL-1", "MUST", "UTILITY payload", """A UTILITY payload is ``[client_idx, call_id,
       method_name, args]``; ``call_id`` is any u64 and is echoed verbatim."""),
    _c("ECP-UTIL-2", "MUST", "Result envelope", """A successful reply carries ``result = [type_info, value]``
       (``type_info`` nil) even for methods returning None; a bare value is a decode error."""),
    _c("ECP-UTIL-3", "MUST", "Failures", """A failing or unknown method is answered with ``failure_message``
       and a nil result; the engine keeps serving."""),
    _c("ECP-UTIL-4", "MUST", "Consensus methods", """Under DP ``is_sleeping``, ``is_scheduler_paused`` and
       ``get_weight_version`` go to every engine; a frontend reports disagreement as an error and never
       returns one engine's answer."""),
    _c("ECP-UTIL-5", "MUST", "AND methods", """Under DP ``reset_prefix_cache``, ``wake_up``, ``add_lora`` and
       ``remove_lora`` go to every engine and their boolean results are combined with AND."""),
    _c("ECP-UTIL-6", "MUST", "Flattened methods", """Under DP ``collective_rpc`` results are the per-engine
       lists concatenated in engine order."""),
    _c("ECP-UTIL-7", "MUST", "Wait for every engine", """A fanned-out utility call completes only when every
       engine answered (or failed), so partially applied mutations can be compensated."""),
    _c("ECP-UTIL-8", "MUST", "Sleep state", """``is_sleeping`` is true after ``sleep`` and false after a
       ``wake_up`` that woke every tag; ``sleep`` with mode ``abort`` ends running requests with ABORT
       outputs before its reply; a left-out argument takes the method table's default (``sleep`` level 1,
       mode ``abort``; ``pause_generation``/``pause_scheduler`` mode ``abort``, ``clear_cache`` true); an ADD
       while asleep MAY be queued until the wake_up or answered with a retryable ``engine_paused`` ERROR, never
       run while asleep nor dropped."""),
    _c("ECP-UTIL-9", "MUST", "Result types", """Utility results have the types of the method table
       (``is_sleeping`` bool, ``reset_prefix_cache`` bool, ``get_supported_tasks`` array of str, …); a
       client reports a mismatch as a typed decode error."""),
    _c("ECP-UTIL-10", "SHOULD", "Unknown call ids", """A client drops a reply whose call id it does not know,
       or that is not a u64, with a warning."""),
    _c("ECP-UTIL-11", "MAY", "Other methods under DP", """Under DP a frontend may send any other utility method
       to engine 0 only (Python external LB), to every engine returning engine 0's result (Python internal
       LB), or to every engine checking every result (vllm-rs); engines give the same answer whichever way
       they are asked."""),
    _c("ECP-UTIL-13", "MAY", "Bounded utility waits", """A frontend may bound how long a utility call waits
       for every engine (vLLM 0.33 waits without a deadline; the reference client 300 s); a call whose bound
       passes fails with an error, and a frontend never completes it with the answers that did arrive."""),
    _c("ECP-UTIL-12", "MUST", "Reserved negative call ids", """Call ids -1 and -2 are reserved for
       engine-initiated notices (elastic EP, fault-tolerance status); a frontend never sends them, and a
       client that receives a reply with an id it did not issue drops it without failing."""),
    # ------------------------------------------------------------------ DP
    _c("ECP-DP-1", "MUST", "Distinct identities", """N engines of one deployment have N distinct identities
       ``start..start+N-1``."""),
    _c("ECP-DP-2", "MUST", "Pinned rank", """An ADD with ``data_parallel_rank`` set goes to that global rank;
       a frontend rejects a rank that is not connected, before any ADD, with an error listing the connected ranks
       (over HTTP: a 400 answer, ``ECP-HTTP-2``)."""),
    _c("ECP-DP-3", "SHOULD", "Load-aware routing", """Unpinned requests go to the least-loaded engine (in-flight
       count, refined by scheduler stats)."""),
    _c("ECP-DP-4", "MUST", "START_DP_WAVE tolerated", """An engine accepts START_DP_WAVE ``[new_wave,
       exclude_eng_index]`` at any time; a wave older than its own is ignored."""),
    _c("ECP-DP-5", "MUST", "Waves", """``current_wave`` is stamped on ADD; an engine receiving a newer wave
       adopts it; ``wave_complete`` and ``start_wave`` go only to the coordinator; only global rank 0 sends
       ``wave_complete``, after an agreement among the ranks outside this protocol or, sharing none, when it
       is idle itself."""),
    # -------------------------------------------------------------- REJECT
    _c("ECP-REJECT-1", "MUST", "abort_immediately never runs", """An ADD with ``abort_immediately`` is admitted
       and aborted at once: the connector's ``request_finished`` hook runs and no token is ever produced;
       no output is emitted for it."""),
    _c("ECP-REJECT-2", "MUST", "Rejection notice shape", """The rejection notice is an ADD with the serving-layer
       request id (it contains the id the client gave: the body's ``request_id`` or ``X-Request-Id``),
       prompt ``[0]``, ``max_tokens`` 1, ``extra_args.kv_transfer_params`` equal to the
       request's params, the pinned rank, and ``abort_immediately`` true."""),
    _c("ECP-REJECT-3", "MUST", "Rejection notice gating", """A frontend sends the notice exactly when a KV
       connector is configured, the request carries a truthy ``do_remote_prefill``, and it was rejected
       before admission; otherwise it sends nothing."""),
    _c("ECP-REJECT-4", "MUST", "Client still gets its error", """The HTTP client of a rejected request receives
       the original error whether or not the notice succeeded."""),
    _c("ECP-REJECT-5", "MUST", "abort_immediately passes a pause", """An ``abort_immediately`` ADD is processed
       even while the scheduler is paused."""),
    _c("ECP-REJECT-6", "MUST", "Other requests unaffected", """An ``abort_immediately`` request does not affect
       other requests in the engine."""),
    # ----------------------------------------------------------------- ROB
    _c("ECP-ROB-1", "MUST", "Survive bad input", """An unknown type byte, a wrong frame count, an undecodable
       or wrongly typed payload, or a declared length beyond the limits never kills the receiver: it
       rejects that message, reports it with its clause, and keeps serving; a rejected UTILITY whose call id is
       recoverable MAY be answered with ``failure_message`` (or dropped), never with a result."""),
    _c("ECP-ROB-2", "SHOULD", "Answer what can be answered", """When the request id of an invalid ADD is
       recoverable (a well-formed outer array whose element 0 is a string), the engine answers it with an
       ERROR output; when only the leading id of a cut-short payload is readable, it MAY."""),
    _c("ECP-ROB-3", "MUST", "Fail closed", """A frontend that receives ``ENGINE_CORE_DEAD``, an undecodable
       output, or a DP control message on its output path, or whose engine disappears, becomes unhealthy;
       the first error is sticky and reaches every active stream, waiter and later call."""),
    _c("ECP-ROB-4", "MUST", "Out-of-range client_index", """An engine answers an ADD whose ``client_index`` has
       no output socket without crashing; outputs it cannot route are dropped and logged."""),
    _c("ECP-ROB-5", "MUST", "Graceful shutdown", """On SIGTERM/SIGINT an engine finishes or aborts its in-flight
       requests, sends their outputs and exits 0."""),
    # ----------------------------------------------------------------- SEC
    _c("ECP-SEC-1", "MUST", "No code-carrying payloads", """Receivers refuse msgpack ext types 1 (pickle) and
       2 (cloudpickle) and every unknown ext type with a decode error; they are never executed."""),
    _c("ECP-SEC-2", "SHOULD", "Loopback by default", """Reference peers bind to loopback or ipc unless told
       otherwise."""),
    _c("ECP-SEC-3", "MUST", "No authentication on the wire", """The protocol has no authentication or
       encryption; a deployment exposing tcp sockets restricts who can reach them, and a receiver treats
       every frame as untrusted input (``ECP-FRAME-9``, ``ECP-SEC-1``)."""),
    _c("ECP-SEC-4", "MUST", "Producers an engine connects to", """A consumer engine connects only to the KV
       producers its operator allows (addresses, networks, ipc directories; by default only what its own
       configuration names); a request whose ``kv_transfer_params`` name another producer is refused with
       an ERROR output (``kv_producer_not_allowed``) before anything is connected, and the refusal is
       logged once."""),
    _c("ECP-SEC-5", "MUST", "Whose transfer parameters reach an engine", """A frontend forwards an HTTP
       request's ``kv_transfer_params`` to an engine only when its operator configured it to trust them;
       otherwise the request is refused with a 400 naming ``kv_transfer_params`` (or the parameters are
       dropped), and no rejection notice is sent for it."""),
    # -------------------------------------------------------------- COMPAT
    _c("ECP-COMPAT-1", "MUST", "One pinned version", """There is no version field and no negotiation; both peers
       pin one vLLM release's layout (here 0.33.0)."""),
    _c("ECP-COMPAT-2", "MUST", "Python and Rust forms", """Receivers accept both the Python encodings (float64,
       map16, uuid-derived u64 call ids) and the vllm-rs encodings (float32 sampling floats, fixmap,
       sequential call ids)."""),
    _c("ECP-COMPAT-3", "MUST", "Satisfy the stricter peer", """Where the Python and Rust peers of vLLM 0.33 differ,
       a conforming sender produces what both accept (full-length arrays, the result envelope, a terminal
       output for every admitted request, a non-empty ready payload) and a conforming receiver accepts
       what either sends."""),
    _c("ECP-COMPAT-4", "MUST", "Every shape of its release", """A peer that speaks a vLLM release reads that
       release's messages in every shape its layout allows: an engine serves an ADD in that layout with every
       optional field set (that needs no capability it lacks) and with every optional field left out, and
       answers each of the release's UTILITY methods called with its fewest and its most arguments without
       refusing the call for its shape; a frontend serves outputs with every optional field set, or none,
       as it serves the same outputs without them."""),
    # ---------------------------------------------------------------- HTTP
    _c("ECP-HTTP-1", "MUST", "Generation routes", """``POST /v1/completions`` (and ``/v1/chat/completions``
       where served) take OpenAI bodies naming a served model; ``stream: true`` answers server-sent events
       (``data:`` chunks, then ``data: [DONE]``); ``X-data-parallel-rank: r`` pins the request to rank r
       (``ECP-DP-2``); ``X-Request-Id`` names it (``ECP-HTTP-6``)."""),
    _c("ECP-HTTP-2", "MUST", "Error statuses", """A request a frontend refuses or fails is answered with a 4xx
       status (the client's mistake: a malformed body, an unknown model, a pinned rank not served, a prompt too
       long) or a 5xx status (an engine failure, an unhealthy frontend), never a 2xx; a stream that fails after
       its 200 head ends with an error event or ``finish_reason`` error, never a normal finish."""),
    _c("ECP-HTTP-3", "SHOULD", "Error object", """The body of every error answer is the OpenAI error object
       ``{"error": {"message": str, "type": str, "param": str | null, "code": int | str | null}}``."""),
    _c("ECP-HTTP-4", "MUST", "Served model names", """``GET /v1/models`` lists the names a frontend serves
       (``data[].id``) and the frontend serves a request naming the first of them; it may refuse any other name
       with 404. A client, the conformance harness included, names a model that ``/v1/models`` listed, in every
       launch."""),
    _c("ECP-HTTP-5", "MUST", "Health", """``GET /health`` answers 200 only while the frontend serves (after
       its handshake) and another status (vLLM: 503) once it is unhealthy (``ECP-ROB-3``)."""),
    _c("ECP-HTTP-6", "MUST", "External request ids", """A response's ``id`` is ``cmpl-<base>`` or
       ``chatcmpl-<base>``, ``<base>`` being ``X-Request-Id``, else the body's ``request_id``, else random. The
       external id of a chat completion is its ``id``, of prompt i of a completion ``<id>-<i>``; the abort routes
       take external ids (a frontend may also resolve other ids it knows unambiguously) and ignore ids that name
       nothing."""),
    _c("ECP-HTTP-7", "MUST", "Abort routes and abort-all", """``POST /abort_requests`` takes ``{"request_ids":
       [ids]}``; an empty list or a body without ``request_ids`` aborts every request of the receiving process,
       vLLM 0.33's convention, so a client never sends an empty list meaning none. ``POST /v1/abort_requests``
       takes ``{"req_ids": [ids]}`` or the explicit ``{"abort_all": true}``; a body with neither is a 400. Both
       answer 200 once the aborts were issued (``ECP-ABORT-8``)."""),
    _c("ECP-HTTP-8", "MUST", "Context length", """A frontend refuses with a 400 a prompt that leaves no room
       within ``max_model_len`` (the minimum, ``ECP-HS-9``); for a prompt that fits whose ``max_tokens`` does
       not, it either lowers ``max_tokens`` to the room left (vLLM 0.33) or refuses the request with a 400
       (ecp serve); it never sends the ADD unchanged."""),
    _c("ECP-HTTP-9", "MUST", "Sleep routes", """``GET /is_sleeping`` answers ``{"is_sleeping": bool}``, the
       engines' common answer (``ECP-UTIL-4``); ``POST /sleep?level=&mode=`` and ``POST /wake_up?tags=`` call
       ``sleep``/``wake_up`` on every engine and answer 200 only after every engine answered."""),
    _c("ECP-HTTP-10", "MUST", "Prefix-cache reset", """``POST /reset_prefix_cache`` calls
       ``reset_prefix_cache`` on every engine and answers 200 ``{"success": b}``, b true exactly when every
       engine answered true (``ECP-UTIL-5``); an answer without a boolean ``success`` is not an answer."""),
    _c("ECP-HTTP-11", "MUST", "collective_rpc route", """``POST /collective_rpc`` with ``{"method", "args",
       "kwargs", "timeout"}`` calls ``collective_rpc`` on every engine and answers 200 ``{"results": [...]}``,
       the engines' lists concatenated in rank order (``ECP-UTIL-6``); a body without ``method`` is a 400."""),
)

CLAUSES: dict[str, Clause] = {c.id: c for c in _CLAUSES}
assert len(CLAUSES) == len(_CLAUSES), "duplicate clause id"
assert HARDENED <= CLAUSES.keys(), f"unknown hardened clause(s): {sorted(HARDENED - CLAUSES.keys())}"


def get(clause_id: str) -> Clause:
    """Return the clause with this id; raise ``KeyError`` naming it if unknown."""
    try:
        return CLAUSES[clause_id]
    except KeyError:
        raise KeyError(f"unknown spec clause {clause_id!r}") from None


def required_at(clause_id: str, conformance_level: str) -> bool:
    """Whether a run at ``conformance_level`` requires ``clause_id`` (hardened runs require everything)."""
    want = CONFORMANCE_LEVELS.index(conformance_level)  # type: ignore[arg-type]
    return CONFORMANCE_LEVELS.index(get(clause_id).conformance_level) <= want


def must_clauses() -> list[Clause]:
    """Every live clause at level MUST, in catalogue order."""
    return [c for c in _CLAUSES if c.level == "MUST" and not c.withdrawn]


def sentences() -> "dict[str, Sentence]":
    """Every numbered normative sentence of spec/PROTOCOL.md by id (``ECP-HS-5.2``), in document
    order: each with ``id``, ``clause``, ``level`` and ``text`` (:mod:`ecp.spec.sentences` parses them)."""
    from .sentences import catalogue
    return catalogue()


def sentences_of(clause_id: str) -> "list[Sentence]":
    """The numbered sentences of one clause, in document order."""
    from .sentences import of_clause
    return of_clause(get(clause_id).id)
