"""What a scripted engine does, as plain data and a sans-IO token scheduler.

A case programs each engine with an :class:`EngineScript` (handshake
behaviour, how requests produce tokens, what utility calls answer) and the
engine's I/O layer (:mod:`.engine`) asks :class:`Generation` what to send.
Nothing here touches a socket or a clock.

Token plans are chosen so that cases can steer the frontend without knowing
its tokenizer: by default a request *echoes its prompt tokens* (the text the
frontend detokenizes is then the prompt itself, which is how the stop-string
case plants its stop string), and ``hold_after`` stalls long requests after
their first tokens so streams stay open until the harness drops or aborts
them, while requests with ``max_tokens <= hold_after`` run to completion.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from ecp.spec import (
    EngineCoreOutput, EngineCoreReadyResponse, EngineCoreRequest, FinishReason, LogprobsLists, RequestError,
    Tensor, VLLM_VERSION, to_builtins,
)

#: What an engine answers to utility calls unless a case says otherwise
#: (the values a healthy, awake vLLM 0.33 engine returns; spec/PROTOCOL.md §8). Every key is a
#: method of the spec's table and every value has its result type
#: (``tests/conformance_frontend/test_helpers.py``).
DEFAULT_UTILITY_ANSWERS: dict[str, Any] = {
    "get_supported_tasks": ["generate"],
    "reset_mm_cache": None,
    "reset_encoder_cache": None,
    "is_sleeping": False,
    "sleep": None,
    "wake_up": True,
    "reset_prefix_cache": True,
    "is_scheduler_paused": False,
    "pause_generation": None,
    "pause_scheduler": None,
    "resume_scheduler": None,
    "collective_rpc": [None],
}

#: The RequestError of a scripted ERROR output (``EngineScript.error_after``).
SCRIPTED_ERROR = RequestError("ecp_conformance_error", "scripted engine error", False)

#: The prefix of ids a scripted engine invents for ``EngineScript.stray_outputs``.
STRAY_PREFIX = "ecp-conformance-stray-"

#: ``max_tokens`` when a request leaves it nil (vLLM's default).
DEFAULT_MAX_TOKENS = 16

#: The logprob of every sampled token, and of its one alternative, in ``EngineScript.logprobs``
#: (exact in float32, so a frontend that reports them reports these values).
SCRIPTED_LOGPROB, ALTERNATIVE_LOGPROB = -0.25, -1.5

#: What ``EngineScript.handshake_fault`` may name: the handshake-order errors of ``ECP-HS-7``.
HANDSHAKE_FAULTS = ("hello-twice", "ready-first", "unknown-status")


@dataclass(frozen=True)
class UtilityFailure:
    """A utility answer that is a ``failure_message`` instead of a result."""

    message: str


def default_ready_payload(rank: int, engine_count: int) -> dict[str, Any]:
    """The full 28-key ready payload a 0.33 Python engine sends (as a plain map)."""
    return to_builtins(EngineCoreReadyResponse(
        max_model_len=4096, num_gpu_blocks=8192, block_size=16, dp_stats_address=None,
        dtype="float32", vllm_version=VLLM_VERSION, world_size=1, data_parallel_size=engine_count,
        tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
        data_parallel_rank=rank, max_num_seqs=4096, max_num_batched_tokens=65536,
        instance_id=f"ecp-conformance-engine-{rank}", supports_lora=False, max_loras=0,
        kv_cache_size_tokens=131072, kv_cache_max_concurrency=32.0, enable_sleep_mode=True,
        effective_attention_block_size=16,
    ))


def minimal_ready_payload(rank: int, engine_count: int) -> dict[str, Any]:
    """Only the 17 required keys (``ECP-HS-4``): what a frontend must accept."""
    from ecp.spec import REQUIRED_READY_KEYS

    full = default_ready_payload(rank, engine_count)
    return {k: full[k] for k in REQUIRED_READY_KEYS}


@dataclass
class EngineScript:
    """How one scripted engine behaves. Cases replace fields between runs.

    Attributes:
        hello_local / hello_headless: what HELLO says (a frontend started with
            ``--data-parallel-size-local 0`` expects ``local=false, headless=true``).
        ready_payload: the map sent on every input socket; ``None`` = the full
            default payload.
        send_ready: ``False`` withholds READY on the handshake socket.
        hold_after: requests whose ``max_tokens`` exceeds this stall after
            emitting this many tokens, until aborted or released; ``"prompt"``
            = after echoing the prompt once; ``None`` = every request runs to
            ``max_tokens``.
        tokens: ``"echo"`` (cycle the prompt tokens) or a fixed token list (cycled).
        step_delay_s: pause between token steps (0 = as fast as possible).
        utility_answers: method → value, or :class:`UtilityFailure`, or a
            callable ``(args) -> value``; methods not listed answer nil.
        abort_outputs: emit an ABORT terminal output for client-aborted
            requests (the Rust mock engine does; the Python engine does not).
        error_after: end each request with an ERROR output carrying
            :data:`SCRIPTED_ERROR` after this many tokens (``ECP-OUT-5``);
            ``None`` = never.
        stray_outputs: before admitting each ADD, send a token and a terminal
            output for an id the frontend never sent (``ECP-OUT-9``).
        notice_call_ids: before answering each utility call, send a utility
            reply with each of these call ids: replies nobody asked for (the
            engine's reserved notices -1 and -2, ``ECP-UTIL-12``, or an id the
            frontend never issued, ``ECP-UTIL-10``).
        silent_methods: utility calls to these methods are never answered
            (the call stays pending at the frontend).
        handshake_fault: one handshake-order error (``ECP-HS-7``) inside an
            otherwise correct handshake: ``"hello-twice"`` (HELLO again after
            INIT), ``"ready-first"`` (READY before HELLO) or ``"unknown-status"``
            (a message with status ``"HOWDY"`` before HELLO); ``None`` = none.
        output_form: how every output message is written
            (:data:`~.output_forms.FORMS`: ``"full"``, ``"short"``, ``"long"``,
            ``"scalars"``, ``"python"``, ``"rust"``, ``"tensors-inline"``,
            ``"tensors-aux"``).
        finish_code: terminal LENGTH outputs carry this raw ``finish_reason``
            instead (``ECP-OUT-4``); ``None`` = LENGTH.
        logprobs: every token output carries sampled-token logprobs (tensors:
            the token and one alternative, the token id with its lowest bit
            flipped, :data:`SCRIPTED_LOGPROB` and :data:`ALTERNATIVE_LOGPROB`,
            rank 1), asked for or not.
        logprobs_asked: a token output carries logprobs when its request asks for
            them (``SamplingParams.logprobs`` K): the token and K alternatives
            (K = -1, the whole vocabulary, gets one), and none when it does not
            -- what an engine that serves logprobs does.
    """

    hello_local: bool = False
    hello_headless: bool = True
    ready_payload: dict[str, Any] | None = None
    send_ready: bool = True
    hold_after: int | str | None = None
    tokens: str | list[int] = "echo"
    step_delay_s: float = 0.0
    utility_answers: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_UTILITY_ANSWERS))
    abort_outputs: bool = False
    error_after: int | None = None
    stray_outputs: bool = False
    notice_call_ids: tuple[int, ...] = ()
    silent_methods: frozenset[str] = frozenset()
    handshake_fault: str | None = None
    output_form: str = "full"
    finish_code: int | None = None
    logprobs: bool = False
    logprobs_asked: bool = False

    def answer(self, method: str, args: list[Any]) -> tuple[str | None, Any]:
        """``(failure_message, value)`` for a utility call."""
        answer = self.utility_answers.get(method)
        if callable(answer):
            answer = answer(args)
        if isinstance(answer, UtilityFailure):
            return answer.message, None
        return None, answer


@dataclass
class ActiveRequest:
    """One admitted request inside a scripted engine."""

    request: EngineCoreRequest
    max_tokens: int
    emitted: int = 0
    released: bool = False

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def client_index(self) -> int:
        return self.request.client_index


@dataclass
class StepOutputs:
    """What one step sends: per client index, the outputs and the finished ids."""

    outputs: dict[int, list[EngineCoreOutput]] = field(default_factory=dict)
    finished: dict[int, set[str]] = field(default_factory=dict)

    def add(self, client_index: int, output: EngineCoreOutput) -> None:
        self.outputs.setdefault(client_index, []).append(output)
        if output.finish_reason is not None:
            self.finished.setdefault(client_index, set()).add(output.request_id)

    def __bool__(self) -> bool:
        return bool(self.outputs)


class Generation:
    """The requests one scripted engine is running, and what each step emits.

    ``finished_ids`` (ended by the engine with a terminal output) and
    ``aborted_ids`` (ended by a client ABORT) let cases tell which requests
    were still open when the frontend aborted them.
    """

    def __init__(self, script_of: Callable[[], EngineScript]) -> None:
        self._script_of = script_of
        self.active: dict[str, ActiveRequest] = {}
        # Requests that emit a token on the next step (not held): steps cost
        # O(runnable), so thousands of held streams stay cheap.
        self.runnable: dict[str, ActiveRequest] = {}
        self.finished_ids: set[str] = set()
        self.aborted_ids: set[str] = set()
        #: every request id ever admitted (never cleared): tells a late ABORT of an
        #: earlier case's request from an id the engine was never sent
        self.seen_ids: set[str] = set()
        self.immediately_aborted_ids: list[str] = []

    # -- inputs ------------------------------------------------------------------
    def add(self, request: EngineCoreRequest) -> StepOutputs:
        """Admit an ADD. Returns outputs to send at once (an ERROR for a duplicate id)."""
        now = StepOutputs()
        if request.abort_immediately:
            # As the 0.33 engine: admitted and aborted at once, no output (ECP-REJECT-1).
            self.immediately_aborted_ids.append(request.request_id)
            return now
        if request.request_id in self.active:
            now.add(request.client_index, EngineCoreOutput(
                request.request_id, [], finish_reason=FinishReason.ERROR,
                error=RequestError("duplicate_request_id", "request id already in flight")))
            return now
        if self._script_of().stray_outputs:
            stray = STRAY_PREFIX + request.request_id
            now.add(request.client_index, EngineCoreOutput(stray, [0]))
            now.add(request.client_index, EngineCoreOutput(stray, [0], finish_reason=FinishReason.LENGTH))
        sp = request.sampling_params
        max_tokens = DEFAULT_MAX_TOKENS if sp is None or sp.max_tokens is None else sp.max_tokens
        active = ActiveRequest(request, max(1, max_tokens))
        self.seen_ids.add(request.request_id)
        self.active[request.request_id] = active
        self.runnable[request.request_id] = active
        return now

    def abort(self, request_ids: list[str]) -> StepOutputs:
        """Apply a client ABORT; unknown ids are no-ops (``ECP-ABORT-3``)."""
        now = StepOutputs()
        emit = self._script_of().abort_outputs
        for rid in request_ids:
            active = self.active.pop(rid, None)
            self.runnable.pop(rid, None)
            if active is None:
                continue
            self.aborted_ids.add(rid)
            if emit:
                now.add(active.client_index, EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT))
        return now

    def release(self, request_ids: list[str] | None = None) -> None:
        """Let held requests run to ``max_tokens`` (all of them when ``None``)."""
        for rid, active in self.active.items():
            if request_ids is None or rid in request_ids:
                active.released = True
                self.runnable[rid] = active

    def abort_all_locally(self) -> list[ActiveRequest]:
        """Forget every active request (the engine is dying); returns them."""
        gone = list(self.active.values())
        self.active.clear()
        self.runnable.clear()
        return gone

    # -- steps -------------------------------------------------------------------
    def _held(self, active: ActiveRequest, script: EngineScript) -> bool:
        hold = script.hold_after
        if hold is None or active.released:
            return False
        if hold == "prompt":
            hold = len(active.request.prompt_token_ids or [0])
        return active.max_tokens > hold and active.emitted >= hold

    def has_work(self) -> bool:
        return bool(self.runnable)

    def step(self) -> StepOutputs:
        """One token for every request that is not held; terminal outputs at ``max_tokens``."""
        script = self._script_of()
        out = StepOutputs()
        for rid, active in list(self.runnable.items()):
            if self._held(active, script):
                del self.runnable[rid]
                continue
            token = self._token(active, script)
            active.emitted += 1
            failed = script.error_after is not None and active.emitted > script.error_after
            done = failed or active.emitted >= active.max_tokens
            if failed:
                out.add(active.client_index, EngineCoreOutput(
                    rid, [], finish_reason=FinishReason.ERROR, error=SCRIPTED_ERROR))
            else:
                out.add(active.client_index, EngineCoreOutput(
                    rid, [token], new_logprobs=self._logprobs_of(active, token, script),
                    finish_reason=FinishReason.LENGTH if done else None))
            if done:
                del self.active[rid]
                del self.runnable[rid]
                self.finished_ids.add(rid)
            elif self._held(active, script):
                del self.runnable[rid]
        return out

    @staticmethod
    def _logprobs_of(active: ActiveRequest, token: int, script: EngineScript) -> LogprobsLists | None:
        if script.logprobs:
            return _logprobs(token)
        sp = active.request.sampling_params
        if not script.logprobs_asked or sp is None or sp.logprobs is None:
            return None
        return _logprobs(token, sp.logprobs if sp.logprobs >= 0 else 1)

    @staticmethod
    def _token(active: ActiveRequest, script: EngineScript) -> int:
        pattern = script.tokens
        if pattern == "echo":
            pattern = active.request.prompt_token_ids or [0]
        return pattern[active.emitted % len(pattern)]


def _logprobs(token: int, alternatives: int = 1) -> LogprobsLists:
    """Sampled-token logprobs of one token: itself, then ``alternatives`` others (``token ^ j`` for
    j = 1..K: distinct ids other than the token, which a frontend needs as it keys logprobs by token;
    for K < 4 they stay in the token's aligned block of 4, so inside a vocabulary whose size is a
    multiple of 4), rank 1."""
    width = 1 + alternatives
    ids = [token] + [token ^ j for j in range(1, width)]
    values = [SCRIPTED_LOGPROB] + [ALTERNATIVE_LOGPROB - (j - 1) for j in range(1, width)]
    return LogprobsLists(
        Tensor("int64", (1, width), struct.pack(f"<{width}q", *ids)),
        Tensor("float32", (1, width), struct.pack(f"<{width}f", *values)),
        Tensor("int64", (1,), struct.pack("<q", 1)))
