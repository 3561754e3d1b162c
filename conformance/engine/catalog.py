"""The engine-role catalogue: what the harness checks when it plays the frontend.

Ids are stable and never reused (see :mod:`ecp.conformance.registry`); new
cases take the next free number of their area.
"""

from __future__ import annotations

from ..registry import Case, case_factory

_c = case_factory("engine")


CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------ handshake
    _c("ENG-HS-1", "ECP-HS-1", "MUST", "hello-fields",
       "The first handshake message is HELLO with status, local: bool and headless: bool."),
    _c("ENG-HS-2", "ECP-SOCK-2", "MUST", "identity-per-rank",
       "The handshake and input identities are the 2-byte little-endian global rank."),
    _c("ENG-HS-3", "ECP-HS-4", "MUST", "ready-payload-keys",
       "The ready payload is a map with every required key of the declared type."),
    _c("ENG-HS-4", "ECP-HS-5", "MUST", "ready-after-registration",
       "READY arrives on the handshake socket, once, after the ready payload was sent on every input."),
    _c("ENG-HS-5", "ECP-HS-3", "MUST", "one-registration-per-input",
       "The engine registers exactly once on each input socket and sends nothing else there."),
    _c("ENG-HS-6", "ECP-SOCK-3", "MUST", "multiple-clients",
       "With two clients in INIT the engine registers on both inputs and serves both."),
    # ------------------------------------------------------ requests/outputs
    _c("ENG-REQ-1", "ECP-REQ-4", "MUST", "exact-max-tokens",
       "With ignore_eos a request produces exactly max_tokens tokens and finishes with LENGTH."),
    _c("ENG-REQ-2", "ECP-REQ-5", "MUST", "stop-token-finishes-stop",
       "A request whose greedy first token is in stop_token_ids finishes with STOP after one token."),
    _c("ENG-REQ-3", "ECP-REQ-5", "MUST", "min-tokens",
       "No stop condition applies before min_tokens tokens were produced."),
    _c("ENG-REQ-4", "ECP-REQ-2", "MUST", "duplicate-id-error",
       "An ADD whose id is in flight gets an ERROR output with a RequestError; the running request keeps running."),
    _c("ENG-REQ-5", "ECP-REQ-3", "MUST", "over-long-prompt-error",
       "A prompt longer than max_model_len gets one ERROR output with a RequestError; the engine keeps serving."),
    _c("ENG-REQ-6", "ECP-REQ-3", "MUST", "invalid-params-error",
       "An ADD with invalid sampling parameters gets one ERROR output with a RequestError."),
    _c("ENG-OUT-1", "ECP-OUT-1", "MUST", "one-terminal-output",
       "Each of several concurrent requests gets exactly one terminal output and nothing after it."),
    _c("ENG-OUT-2", "ECP-OUT-2", "MUST", "engine-index",
       "EngineCoreOutputs.engine_index is the sender's global rank on every message."),
    _c("ENG-OUT-3", "ECP-SOCK-4", "MUST", "outputs-to-client",
       "Outputs and utility replies go to outputs[client_index] of the request, never to another client."),
    _c("ENG-OUT-4", "ECP-OUT-3", "MUST", "delta-tokens",
       "Token counts add up: the sum of new_token_ids over a request's outputs equals the tokens generated."),
    # ---------------------------------------------------------------- abort
    _c("ENG-ABORT-1", "ECP-ABORT-2", "MUST", "abort-stops-running",
       "After ABORT a running request stops producing tokens; any terminal output it gets is ABORT."),
    _c("ENG-ABORT-2", "ECP-ABORT-3", "MUST", "abort-unknown-id-noop",
       "ABORT of an unknown id emits nothing for it and does not disturb a running request."),
    _c("ENG-ABORT-3", "ECP-ABORT-2", "MUST", "abort-1024-ids",
       "One ABORT with 1,024 ids stops every running request it names."),
    _c("ENG-ABORT-4", "ECP-ABORT-3", "MUST", "abort-finished-id",
       "ABORT of an already finished id is a no-op and the engine keeps serving."),
    # ---------------------------------------------------- abort_immediately
    _c("ENG-REJECT-1", "ECP-REJECT-1", "MUST", "abort-immediately-no-tokens",
       "An ADD with abort_immediately never produces a token or any output."),
    _c("ENG-REJECT-2", "ECP-REJECT-6", "MUST", "abort-immediately-others-unaffected",
       "An abort_immediately ADD does not affect a concurrently running request."),
    # ------------------------------------------------------------ utilities
    _c("ENG-UTIL-1", "ECP-UTIL-2", "MUST", "result-envelope",
       "A successful utility reply carries result = [type_info, value], also for methods returning None."),
    _c("ENG-UTIL-2", "ECP-UTIL-1", "MUST", "call-id-echo-u64",
       "The utility reply echoes call_id verbatim for any u64 (0, small, 2**63, 2**64-1)."),
    _c("ENG-UTIL-3", "ECP-UTIL-3", "MUST", "unknown-method-failure",
       "An unknown method is answered with a failure_message and nil result, and the engine keeps serving."),
    _c("ENG-UTIL-4", "ECP-UTIL-8", "MUST", "sleep-wake-transitions",
       "is_sleeping is false, true after sleep, and false again after wake_up(None).", feature="sleep"),
    _c("ENG-UTIL-5", "ECP-UTIL-9", "MUST", "reset-prefix-cache-bool",
       "reset_prefix_cache on an idle engine succeeds with a bool result (true)."),
    _c("ENG-UTIL-6", "ECP-ABORT-9", "MUST", "sleep-abort-ends-requests",
       "sleep with mode abort ends running requests with ABORT outputs listed in finished_requests before its reply.",
       feature="sleep"),
    _c("ENG-UTIL-7", "ECP-UTIL-9", "MUST", "supported-tasks-type",
       "get_supported_tasks answers an array of strings."),
    # ------------------------------------------------------------------- DP
    _c("ENG-DP-1", "ECP-DP-1", "MUST", "distinct-identities",
       "N engines handshake with N distinct identities start..start+N-1 and each serves its own requests."),
    _c("ENG-DP-2", "ECP-DP-4", "MUST", "start-dp-wave-tolerated",
       "START_DP_WAVE (newer and older waves) is accepted and every engine keeps serving."),
    _c("ENG-DP-3", "ECP-UTIL-8", "MUST", "per-rank-sleep-state",
       "Each of N engines answers is_sleeping from its own state: false when fresh, true only on the rank put to sleep.",
       feature="sleep"),
    _c("ENG-DP-4", "ECP-HS-6", "MUST", "coordinator-gate",
       "When INIT names a coordinator, each engine subscribes (0x01) and sends READY only after the coordinator's READY."),
    _c("ENG-DP-5", "ECP-OUT-6", "MUST", "dp-control-to-coordinator",
       "With a coordinator, wave_complete/start_wave go to coordinator_output, never to a client's output socket."),
    # ------------------------------------------------------------ robustness
    _c("ENG-ROB-1", "ECP-ROB-1", "MUST", "unknown-type-byte",
       "Unknown or engine-internal type bytes (0x04, 0x05, 0x7f, two bytes) are rejected; the engine keeps serving."),
    _c("ENG-ROB-2", "ECP-ROB-1", "MUST", "wrong-frame-count",
       "Messages with missing or surplus frames are rejected; the engine keeps serving."),
    _c("ENG-ROB-3", "ECP-ROB-1", "MUST", "truncated-msgpack",
       "Truncated or invalid msgpack payloads are rejected; the engine keeps serving."),
    _c("ENG-ROB-4", "ECP-ROB-1", "MUST", "wrong-types",
       "Payloads of the wrong shape or types are rejected; the engine keeps serving."),
    _c("ENG-ROB-5", "ECP-FRAME-9", "MUST", "huge-declared-lengths",
       "Collections and strings declaring lengths beyond the frame are rejected before allocation; the engine keeps serving."),
    _c("ENG-ROB-6", "ECP-ROB-4", "MUST", "client-index-out-of-range",
       "An ADD whose client_index has no output socket does not crash the engine."),
    _c("ENG-ROB-7", "ECP-ROB-2", "SHOULD", "invalid-add-answered",
       "An undecodable ADD whose request id is recoverable is answered with an ERROR output."),
    # -------------------------------------------------------------- security
    _c("ENG-SEC-1", "ECP-SEC-1", "MUST", "pickle-refused",
       "A pickle (ext 1) payload is refused and never executed: its marker file is never created."),
    _c("ENG-SEC-2", "ECP-SEC-1", "MUST", "cloudpickle-refused",
       "A cloudpickle (ext 2) payload in utility args is refused and never executed."),
    _c("ENG-SEC-3", "ECP-SEC-1", "MUST", "unknown-ext-refused",
       "An unknown msgpack ext type is refused; the engine keeps serving."),
)
