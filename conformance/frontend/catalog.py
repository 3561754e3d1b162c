"""The frontend-role catalogue: what the harness checks when it plays the engines.

Ids are stable and never reused (see :mod:`ecp.conformance.registry`); new
cases take the next free number of their area.
"""

from __future__ import annotations

from ..registry import Case, case_factory

_c = case_factory("frontend")


#: Burst sizes of the coalescing cases (FE-ABORT-1..6).
BURST_SIZES = (3, 64, 2000)

CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------ handshake
    _c("FE-HS-1", "ECP-HS-2", "MUST", "init-addresses-reachable",
       "INIT lists equal, non-empty input/output addresses, and every engine is reached on its input socket.",
       also=("ECP-HTTP-1",),
       checks=("ECP-HS-2.1", "ECP-SOCK-3.2")),
    _c("FE-HS-2", "ECP-HS-4", "MUST", "minimal-ready-payload",
       "A ready payload with only the 17 required keys is accepted and the engine is served.",
       also=("ECP-HTTP-1",),
       checks=("ECP-HS-4.1",)),
    _c("FE-HS-3", "ECP-HS-4", "MUST", "ready-payload-extra-keys",
       "A ready payload with every key plus unknown extra keys is accepted and the engine is served.",
       also=("ECP-HTTP-1",),
       checks=("ECP-HS-4.1",)),
    _c("FE-HS-4", "ECP-HS-8", "MUST", "no-ready-fails-clearly",
       "When an engine never sends READY the frontend exits with an error or stays unhealthy.",
       also=("ECP-HTTP-5",),
       checks=("ECP-HS-8.2", "ECP-HTTP-5.1")),
    _c("FE-HS-5", "ECP-HS-9", "MUST", "max-model-len-is-minimum",
       "With engines reporting different max_model_len, no request longer than the minimum (prompt + "
       "max_tokens) reaches an engine, while one that fits is served.",
       also=("ECP-HTTP-1", "ECP-HTTP-8"),
       checks=("ECP-HS-9.1", "ECP-HS-9.2", "ECP-HTTP-8.2", "ECP-HTTP-8.1")),
    _c("FE-HS-6", "ECP-HS-7", "MUST", "handshake-order-errors",
       "An engine that says HELLO again after INIT, READY before HELLO, or a status other than HELLO/READY "
       "makes the frontend exit with an error or stay unhealthy; it never serves.",
       also=("ECP-HTTP-5",),
       checks=("ECP-HS-7.1", "ECP-HS-7.2")),
    _c("FE-HS-7", "ECP-HS-11", "MUST", "unexpected-identity-rejected",
       "An engine whose rank is outside the configured ones says HELLO during the handshake: it never gets "
       "INIT, and the frontend exits with an error, stays unhealthy or serves without it.",
       also=("ECP-HTTP-4", "ECP-HTTP-5", "ECP-HTTP-1"),
       checks=("ECP-HS-11.1",)),
    _c("FE-HS-8", "ECP-HS-10", "SHOULD", "lora-disagreement-rejected",
       "Engines whose ready payloads disagree on supports_lora/max_loras make the frontend exit with an error "
       "or stay unhealthy.",
       also=("ECP-HTTP-5",),
       checks=("ECP-HS-10.1",)),
    # ------------------------------------------------------------- requests
    _c("FE-REQ-1", "ECP-REQ-1", "MUST", "add-payload-decodes",
       "Completions and chat requests reach an engine as ADDs that decode per spec, with the requested max_tokens.",
       also=("ECP-HTTP-1",),
       checks=("ECP-REQ-1.1", "ECP-HTTP-1.1", "ECP-HTTP-4.1", "ECP-FRAME-10.1", "ECP-FRAME-11.2")),
    _c("FE-REQ-2", "ECP-REQ-6", "MUST", "client-index-and-wave",
       "Each ADD's client_index names the input socket it arrived on, and current_wave is not negative.",
       also=("ECP-HTTP-1",),
       checks=("ECP-REQ-6.1",)),
    _c("FE-REQ-3", "ECP-DP-2", "MUST", "pinned-rank-reaches-engine",
       "A request with X-data-parallel-rank: r goes to engine r with data_parallel_rank r; one pinned to a rank "
       "not served is answered 400 and reaches no engine.",
       also=("ECP-HTTP-1", "ECP-HTTP-2"),
       checks=("ECP-DP-2.1", "ECP-DP-2.2", "ECP-HTTP-1.3", "ECP-HTTP-2.1")),
    _c("FE-REQ-4", "ECP-DP-3", "SHOULD", "load-spreads",
       "Concurrent unpinned requests are spread over every engine.",
       also=("ECP-HTTP-1",),
       checks=("ECP-DP-3.1",)),
    _c("FE-REQ-5", "ECP-FRAME-1", "MUST", "input-type-bytes",
       "ADD, ABORT and UTILITY reach the engines as [type, payload, *aux] with a one-byte type 00..03 "
       "(ABORT and UTILITY exactly 2 frames) that decode.",
       also=("ECP-HTTP-1", "ECP-HTTP-9"),
       checks=("ECP-FRAME-1.1",)),
    _c("FE-REQ-6", "ECP-FRAME-3", "MUST", "full-length-add",
       "Every ADD's EngineCoreRequest is an array of all the fields of the release under test.",
       also=("ECP-HTTP-1",),
       checks=("ECP-FRAME-3.1",)),
    _c("FE-REQ-7", "ECP-REQ-8", "MUST", "no-duplicate-in-flight-ids",
       "Two requests with the same X-Request-Id, the first still running: no ADD repeats the id of the "
       "request in flight.",
       also=("ECP-HTTP-1", "ECP-HTTP-6"),
       checks=("ECP-REQ-8.1",)),
    _c("FE-REQ-8", "ECP-FRAME-6", "MUST", "sampling-params-map",
       "Every ADD's SamplingParams is a map keyed by field name that reads as the request asked "
       "(max_tokens, temperature).",
       also=("ECP-HTTP-1",),
       checks=("ECP-FRAME-6.1",)),
    # ---------------------------------------------------------------- abort
    _c("FE-ABORT-1", "ECP-ABORT-6", "MUST", "burst-3-exact-ids",
       "Dropping 3 open streams at once aborts exactly their ids at each engine, and no finished request.",
       also=("ECP-ABORT-10", "ECP-HTTP-1"),
       checks=("ECP-ABORT-6.1", "ECP-ABORT-10.1", "ECP-ABORT-10.3", "ECP-ABORT-10.2")),
    _c("FE-ABORT-2", "ECP-ABORT-6", "MUST", "burst-64-exact-ids",
       "Dropping 64 open streams at once aborts exactly their ids at each engine, and no finished request.",
       also=("ECP-ABORT-10", "ECP-HTTP-1"),
       checks=("ECP-ABORT-6.1", "ECP-ABORT-10.1", "ECP-ABORT-10.3", "ECP-ABORT-10.2")),
    _c("FE-ABORT-3", "ECP-ABORT-6", "MUST", "burst-2000-exact-ids",
       "Dropping 2,000 open streams at once aborts exactly their ids at each engine, and no finished request.",
       also=("ECP-ABORT-10", "ECP-HTTP-1"),
       checks=("ECP-ABORT-6.1", "ECP-ABORT-10.1", "ECP-ABORT-10.3", "ECP-ABORT-10.2")),
    _c("FE-ABORT-4", "ECP-ABORT-5", "SHOULD", "burst-3-coalesced",
       "Dropping 3 streams at once costs each engine at most min(ceil(K/1024), K_engine)+1 ABORT messages "
       "(one per drain, plus one).",
       also=("ECP-HTTP-1",),
       checks=("ECP-ABORT-5.1",)),
    _c("FE-ABORT-5", "ECP-ABORT-5", "SHOULD", "burst-64-coalesced",
       "Dropping 64 streams at once costs each engine at most min(ceil(K/1024), K_engine)+1 ABORT messages "
       "(one per drain, plus one).",
       also=("ECP-HTTP-1",),
       checks=("ECP-ABORT-5.1",)),
    _c("FE-ABORT-6", "ECP-ABORT-5", "SHOULD", "burst-2000-coalesced",
       "Dropping 2,000 streams at once costs each engine at most min(ceil(K/1024), K_engine)+1 ABORT messages "
       "(one per drain, plus one).",
       also=("ECP-HTTP-1",),
       checks=("ECP-ABORT-5.1",)),
    _c("FE-ABORT-7", "ECP-ABORT-7", "MUST", "single-drop-aborted-promptly",
       "A single dropped stream is aborted at its engine within 1 s.",
       also=("ECP-HTTP-1",),
       checks=("ECP-ABORT-7.1",)),
    _c("FE-ABORT-8", "ECP-ABORT-8", "MUST", "explicit-abort-by-id",
       "The abort endpoint with a request id sends ABORT for it and its stream ends with finish_reason abort.",
       also=("ECP-HTTP-1", "ECP-HTTP-6", "ECP-HTTP-7"),
       checks=("ECP-ABORT-8.1", "ECP-ABORT-8.3", "ECP-HTTP-6.3", "ECP-HTTP-7.1", "ECP-HTTP-7.4", "ECP-HTTP-1.2", "ECP-HTTP-6.2")),
    _c("FE-ABORT-9", "ECP-ABORT-8", "MUST", "explicit-abort-all",
       "The abort endpoint without ids aborts every open request of the client (API server process) that "
       "received it at its engine; each such stream ends with abort.",
       also=("ECP-HTTP-1", "ECP-HTTP-7"),
       checks=("ECP-ABORT-8.1", "ECP-ABORT-8.3", "ECP-HTTP-7.2", "ECP-HTTP-7.4")),
    _c("FE-ABORT-10", "ECP-ABORT-7", "MUST", "stop-string-aborts-engine",
       "A stop string matched in the frontend ends the stream with stop and sends ABORT for it within 1 s.",
       also=("ECP-HTTP-1",),
       checks=("ECP-ABORT-7.1",)),
    _c("FE-ABORT-11", "ECP-ABORT-1", "MUST", "abort-only-to-owner",
       "Streams pinned to each engine are dropped: each engine receives ABORTs (arrays of ids) only for ids "
       "the frontend added to it.",
       also=("ECP-HTTP-1",),
       checks=("ECP-ABORT-1.1", "ECP-DP-3.2")),
    _c("FE-ABORT-12", "ECP-FRAME-10", "MUST", "abort-carries-add-ids",
       "Streams with long X-Request-Ids holding separators are dropped: the ABORTs name exactly the internal "
       "ids their ADDs used.",
       also=("ECP-HTTP-1", "ECP-HTTP-6"),
       checks=("ECP-FRAME-10.2", "ECP-FRAME-10.3")),
    # -------------------------------------------------------------- outputs
    _c("FE-OUT-1", "ECP-OUT-9", "MUST", "unknown-ids-dropped",
       "Outputs (a token, then a terminal one) for a request id the frontend never sent are dropped: the "
       "request being served completes and GET /health stays 200.",
       also=("ECP-HTTP-1", "ECP-HTTP-5"),
       checks=("ECP-OUT-9.1",)),
    _c("FE-OUT-2", "ECP-OUT-5", "MUST", "error-output-reaches-client",
       "An ERROR terminal output with its RequestError reaches the HTTP client as an error (an error status, "
       "an error event or finish_reason error), streaming or not; never as a normal finish.",
       also=("ECP-HTTP-1", "ECP-HTTP-2"),
       checks=("ECP-OUT-5.1", "ECP-HTTP-2.1", "ECP-HTTP-2.2")),
    _c("FE-OUT-3", "ECP-OUT-8", "MUST", "engine-dead-fails-waiters",
       "ENGINE_CORE_DEAD from one of N engines fails the utility call waiting on its answer: GET /is_sleeping "
       "ends with an error within 3 s.", feature="dev_endpoints",
       also=("ECP-UTIL-7", "ECP-HTTP-9", "ECP-HTTP-2"),
       checks=("ECP-OUT-8.2", "ECP-UTIL-7.1")),
    _c("FE-OUT-4", "ECP-FRAME-4", "MUST", "tolerant-output-arrays",
       "Outputs whose arrays are cut to their required fields, or carry unknown trailing elements, are "
       "served like full-length ones (same text, finish_reason length).",
       also=("ECP-HTTP-1",),
       checks=("ECP-FRAME-4.1", "ECP-OUT-4.2", "ECP-OUT-1.2")),
    _c("FE-OUT-5", "ECP-FRAME-5", "MUST", "tolerant-output-scalars",
       "Outputs with an int or a float32 timestamp, scheduler stats with an int for a float, map16 headers on "
       "small maps and a set as an array are served like plain ones; so are outputs with every int as int64, "
       "every header at its widest, float32 floats and an integral timestamp as an int.",
       also=("ECP-HTTP-1", "ECP-FRAME-11"),
       checks=("ECP-FRAME-5.1", "ECP-FRAME-11.1")),
    _c("FE-OUT-6", "ECP-FRAME-7", "MUST", "output-tensors",
       "Logprob tensors inline (ext 3) and in aux frames are read: the request is served alike, and reported "
       "logprobs are the engine's.",
       also=("ECP-HTTP-1",),
       checks=("ECP-FRAME-7.1", "ECP-FRAME-8.2")),
    _c("FE-OUT-7", "ECP-COMPAT-2", "MUST", "python-and-rust-output-forms",
       "Outputs as vLLM's Python engine writes them (events, map16 scheduler stats) and as a Rust engine "
       "does (float32, UNIX-second timestamps) are served alike.",
       also=("ECP-HTTP-1",),
       checks=("ECP-COMPAT-2.1", "ECP-COMPAT-3.2")),
    _c("FE-OUT-8", "ECP-OUT-4", "MUST", "unknown-finish-reason-not-normal",
       "A terminal output with finish_reason 7 (no FinishReason) never reaches the HTTP client as a normal "
       "finish.",
       also=("ECP-HTTP-1", "ECP-HTTP-2"),
       checks=("ECP-OUT-4.1",)),
    _c("FE-OUT-9", "ECP-COMPAT-4", "MUST", "release-output-shapes",
       "Outputs of the release under test with every optional field set (its full sample, outside the fields "
       "bound to the request) and with none (its sparse sample, arrays cut to their required elements) are "
       "served like plain ones.",
       also=("ECP-HTTP-1",),
       checks=("ECP-COMPAT-4.1", "ECP-COMPAT-4.4")),
    # ------------------------------------------------- rejection notification
    _c("FE-REJECT-1", "ECP-REJECT-2", "MUST", "rejection-notice-shape",
       "A rejected request with do_remote_prefill yields one abort_immediately ADD: prompt [0], max_tokens 1, "
       "its kv_transfer_params, an id containing the one the client gave (body request_id and X-Request-Id), "
       "the pinned rank.", feature="kv_connector",
       also=("ECP-HTTP-1", "ECP-HTTP-4", "ECP-HTTP-6"),
       checks=("ECP-REJECT-2.1", "ECP-REJECT-2.2")),
    _c("FE-REJECT-2", "ECP-REJECT-3", "MUST", "no-notice-without-remote-prefill",
       "No rejection notice for a rejected request without do_remote_prefill, nor for an admitted one.",
       feature="kv_connector",
       also=("ECP-HTTP-1", "ECP-HTTP-4"),
       checks=("ECP-REJECT-3.1", "ECP-REJECT-3.2")),
    _c("FE-REJECT-3", "ECP-REJECT-4", "MUST", "rejected-client-gets-error",
       "The HTTP client of a rejected request with do_remote_prefill still receives its error.",
       also=("ECP-HTTP-1", "ECP-HTTP-2", "ECP-HTTP-4"),
       checks=("ECP-REJECT-4.1", "ECP-REJECT-2.3")),
    _c("FE-REJECT-4", "ECP-REJECT-3", "MUST", "no-notice-without-connector",
       "Without a KV connector configured, a rejected request with do_remote_prefill sends no notice.",
       also=("ECP-HTTP-1", "ECP-HTTP-4"),
       checks=("ECP-REJECT-3.2",)),
    # ------------------------------------------------------------- security
    _c("FE-SEC-1", "ECP-SEC-5", "MUST", "untrusted-kv-params-not-forwarded",
       "A frontend with a KV connector that is not configured to trust its clients' kv_transfer_params "
       "(COMMAND without its trust option) sends no ADD carrying a client's kv_transfer_params, and no "
       "rejection notice for the request.", feature="kv_connector",
       also=("ECP-HTTP-1",),
       checks=("ECP-SEC-5.1", "ECP-SEC-5.2", "ECP-SEC-5.3")),
    # ------------------------------------------------------- DP aggregation
    _c("FE-UTIL-1", "ECP-UTIL-4", "MUST", "is-sleeping-disagreement-is-error",
       "When engines disagree on is_sleeping, GET /is_sleeping fails instead of returning one engine's answer.",
       feature="dev_endpoints",
       also=("ECP-HTTP-9", "ECP-HTTP-2"),
       checks=("ECP-UTIL-4.1", "ECP-HTTP-9.1")),
    _c("FE-UTIL-2", "ECP-UTIL-4", "MUST", "is-sleeping-agreement",
       "When every engine answers is_sleeping alike, GET /is_sleeping returns that value.",
       feature="dev_endpoints",
       also=("ECP-HTTP-9",),
       checks=("ECP-UTIL-4.1", "ECP-HTTP-9.1")),
    _c("FE-UTIL-3", "ECP-UTIL-5", "MUST", "reset-prefix-cache-and",
       "POST /reset_prefix_cache reports success only if every engine answered true.",
       feature="dev_endpoints",
       also=("ECP-HTTP-10",),
       checks=("ECP-UTIL-5.1", "ECP-HTTP-10.1", "ECP-HTTP-10.2")),
    _c("FE-UTIL-4", "ECP-UTIL-7", "MUST", "utility-reaches-every-engine",
       "is_sleeping, sleep, wake_up and reset_prefix_cache each reach every engine, and each route answers "
       "200 with its body ({status: sleeping, level}, {status: awake, tags}, {is_sleeping}, {success: true}).",
       feature="dev_endpoints",
       also=("ECP-HTTP-9", "ECP-HTTP-10"),
       checks=("ECP-UTIL-7.1", "ECP-HTTP-9.1", "ECP-HTTP-9.2", "ECP-HTTP-10.1")),
    _c("FE-UTIL-5", "ECP-UTIL-12", "MUST", "reserved-call-ids-dropped",
       "Utility replies with the reserved call ids -1 and -2 (engine notices) are dropped: the call they "
       "precede still gets its answer and GET /health stays 200.", feature="dev_endpoints",
       also=("ECP-HTTP-9", "ECP-HTTP-5"),
       checks=("ECP-UTIL-12.2", "ECP-UTIL-12.1")),
    _c("FE-UTIL-6", "ECP-UTIL-6", "MUST", "collective-rpc-flattened",
       "POST /collective_rpc returns the engines' result lists concatenated in rank order.",
       feature="collective_rpc",
       also=("ECP-HTTP-11",),
       checks=("ECP-UTIL-6.1", "ECP-HTTP-11.1")),
    _c("FE-UTIL-7", "ECP-UTIL-10", "SHOULD", "unknown-call-id-dropped",
       "A utility reply with a call id the frontend never issued is dropped: the call it precedes still gets "
       "its answer and GET /health stays 200.", feature="dev_endpoints",
       also=("ECP-HTTP-9", "ECP-HTTP-5"),
       checks=("ECP-UTIL-10.1",)),
    # ------------------------------------------------------------ DP waves
    _c("FE-DP-1", "ECP-DP-5", "MUST", "waves-stamped",
       "ADDs carry current_wave 0 without a DP coordinator; with one that runs waves, the wave it moves to "
       "after an engine's start_wave and wave_complete.",
       also=("ECP-HTTP-1",),
       checks=("ECP-DP-5.1",)),
    # ----------------------------------------------------------------- HTTP
    _c("FE-HTTP-1", "ECP-HTTP-3", "SHOULD", "error-object",
       "A completion naming a model the frontend does not serve is refused with a 4xx whose body is the OpenAI "
       "error object {error: {message, type, param, code}}.", also=("ECP-HTTP-1", "ECP-HTTP-2", "ECP-HTTP-4"),
       checks=("ECP-HTTP-3.1", "ECP-HTTP-4.2", "ECP-HTTP-2.1")),
    # --------------------------------------------------------- engine death
    _c("FE-ROB-1", "ECP-ROB-3", "MUST", "engine-dead-fails-closed",
       "After ENGINE_CORE_DEAD from one engine, GET /health stops answering 200 and open streams pinned to "
       "every engine end with an error.",
       also=("ECP-HTTP-1", "ECP-HTTP-2", "ECP-HTTP-5"),
       checks=("ECP-ROB-3.1", "ECP-OUT-8.2", "ECP-HTTP-5.1", "ECP-HTTP-2.2")),
)
