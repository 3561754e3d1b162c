"""The serving core: OpenAI bodies in, engine requests through the client, deltas out.

:class:`Frontend` knows nothing about HTTP. It turns a validated body into
:class:`~.choice.Choice` objects and ``EngineCoreRequest``s, runs each through
the engine-core client, and yields :class:`~.choice.ChoiceDelta`s. It owns
the three ways a request ends early:

* the consumer goes away (HTTP disconnect, cancelled task): the engine
  request is auto-aborted with cause ``dropped_stream`` through the client's
  coalescer (``ECP-ABORT-5``, ``ECP-ABORT-7``);
* a stop string matched here: auto-abort with cause ``stop_string_matched``;
* an abort API named it: the client aborts it explicitly (``ECP-ABORT-8``)
  and the stream ends with ``finish_reason: "abort"``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import msgspec

from ecp.spec import VLLM_VERSION, EngineCoreOutput, EngineCoreRequest, FinishReason

from ..tokenizer import Tokenizer
from . import ids as idconv
from .choice import Choice, ChoiceDelta, EngineRequestFailed
from .engine_client import EngineClient, OutputStream
from .limits import check_choices
from .metrics import FrontendMetrics
from .protocol import ChatCompletionRequest, CompletionRequest, OpenAIError, bad_request, max_tokens_of, to_sampling
from .registry import InFlightIndex
from .stop_strings import StopStringMatcher

CAUSE_DROPPED_STREAM = "dropped_stream"
CAUSE_STOP_STRING = "stop_string_matched"
CAUSE_ABORT_API = "abort_api"


@dataclass
class FrontendConfig:
    model_name: str = "ecp-synthetic"
    max_model_len: int = 4096
    kv_connector: str | None = None
    #: ECP-SEC-5: accept kv_transfer_params from every HTTP client (--trust-request-kv-params)
    trust_request_kv_params: bool = False
    #: ECP-SEC-5: accept them from a request carrying this header, which a trusted proxy in front sets
    #: and strips from its own clients' requests (--kv-params-trust-header NAME; lower case)
    kv_params_trust_header: str | None = None
    bugs: frozenset[str] = frozenset()
    dev_mode: bool = False
    #: what ``GET /version`` reports: the vLLM release the engines speak (``ecp serve --vllm``)
    vllm_version: str = VLLM_VERSION


@dataclass
class Prepared:
    """A validated HTTP request, ready to run."""

    kind: str  # "completion" | "chat"
    base_id: str
    response_id: str
    model: str
    stream: bool
    include_usage: bool
    prompts: list[list[int]]
    echo_texts: list[str]
    choices: list[Choice]
    requests: list[EngineCoreRequest]
    created: int = field(default_factory=lambda: int(time.time()))


def _prompt_token_lists(prompt: Any, tok: Tokenizer) -> list[list[int]]:
    """The OpenAI prompt forms: str, [str], [int], [[int]]."""
    if isinstance(prompt, str):
        return [tok.encode(prompt)]
    if not prompt:
        raise bad_request("prompt must not be empty", "prompt")

    def is_ids(x: Any) -> bool:
        # non-negative ints, bools excluded (type() is int), tested at C speed
        return isinstance(x, list) and (not x or (set(map(type, x)) == {int} and min(x) >= 0))

    if is_ids(prompt):
        return [list(prompt)]
    if all(isinstance(p, str) for p in prompt):
        return [tok.encode(p) for p in prompt]
    if all(is_ids(p) for p in prompt):
        return [list(p) for p in prompt]
    raise bad_request("prompt must be a string, a list of strings, a list of token ids or a list of "
                      "token-id lists", "prompt")


class Frontend:
    def __init__(self, client: EngineClient, tokenizer: Tokenizer, config: FrontendConfig,
                 metrics: FrontendMetrics | None = None) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.config = config
        self.metrics = metrics or FrontendMetrics(config.model_name)
        self.index = InFlightIndex()
        self._background: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ preparation
    def prepare(self, body: CompletionRequest | ChatCompletionRequest, *, base_id: str,
                data_parallel_rank: int | None) -> Prepared:
        """Validate and build the engine requests; raise :class:`OpenAIError` on a rejection."""
        kind = "chat" if isinstance(body, ChatCompletionRequest) else "completion"
        if body.model is not None and body.model != self.config.model_name:
            raise OpenAIError(404, f"The model `{body.model}` does not exist.", "NotFoundError", "model")
        if body.n < 1:
            # checked here, not per choice: with n=0 no choice would ever be validated
            raise bad_request(f"n must be at least 1, got {body.n}", "n")
        check_choices(1, body.n)  # before a prompt list is tokenised
        base = base_id
        resp_id = idconv.response_id(kind, base)
        if kind == "chat":
            text = self.tokenizer.apply_chat_template([msgspec.to_builtins(m) for m in body.messages])
            prompts = [self.tokenizer.encode(text)]
        else:
            prompts = _prompt_token_lists(body.prompt, self.tokenizer)
        check_choices(len(prompts), body.n)
        requested = max_tokens_of(body)
        max_len = self.config.max_model_len
        choices: list[Choice] = []
        requests: list[EngineCoreRequest] = []
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        for p_index, prompt in enumerate(prompts):
            if not prompt:
                raise bad_request("prompt must contain at least one token", "prompt")
            if requested is None:
                max_tokens = max_len - len(prompt)
            else:
                max_tokens = requested
            if len(prompt) + max(max_tokens, 0) > max_len or len(prompt) >= max_len:
                raise bad_request(
                    f"This model's maximum context length is {max_len} tokens. However, you requested "
                    f"{len(prompt) + max(max_tokens, 0)} tokens ({len(prompt)} in the messages, "
                    f"{max_tokens} in the completion). Please reduce the length of the messages or completion.",
                    "max_tokens" if requested is not None else "messages")
            external = idconv.external_id(kind, resp_id, p_index)
            for i in range(body.n):
                sp = to_sampling(body, max_tokens=max_tokens, eos_token_id=self.tokenizer.eos_token_id,
                                 seed_offset=i)
                internal = idconv.internal_id(external)
                choices.append(Choice(
                    index=len(choices), internal_id=internal, external_id=external, response_id=resp_id,
                    base_id=base, prompt_token_ids=prompt, detok=self.tokenizer.decode_stream(),
                    stop=StopStringMatcher(stops, body.include_stop_str_in_output),
                    data_parallel_rank=data_parallel_rank))
                requests.append(EngineCoreRequest(
                    request_id=internal, prompt_token_ids=prompt, mm_features=None, sampling_params=sp,
                    pooling_params=None, arrival_time=time.time(), lora_request=None, cache_salt=None,
                    data_parallel_rank=data_parallel_rank, priority=body.priority, external_req_id=external))
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        echo = [self.tokenizer.decode(p) for p in prompts] if getattr(body, "echo", False) else []
        return Prepared(kind, base, resp_id, self.config.model_name, body.stream, include_usage, prompts,
                        echo, choices, requests)

    # ------------------------------------------------------------------ running
    async def start(self, prepared: Prepared) -> "Deltas":
        """Send every choice's ADD and return their deltas. The caller must
        :meth:`Deltas.close` them (``finally``), which auto-aborts whatever is
        still running; if an ADD fails, the choices already started are closed
        here and the error is raised."""
        runs: list[ChoiceRun] = []
        try:
            for choice, request in zip(prepared.choices, prepared.requests):
                runs.append(ChoiceRun(self, choice, await self.client.add(request)))
        except BaseException:
            for r in runs:
                r.close()
            raise
        return runs[0] if len(runs) == 1 else DeltaStream(runs)

    def _close(self, stream: OutputStream, cause: str) -> None:
        """Auto-abort a stream without awaiting: this runs in ``finally`` blocks of
        cancelled tasks, where an await would be cancelled again."""
        task = asyncio.get_running_loop().create_task(stream.aclose(cause=cause))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ abort APIs
    async def abort(self, request_ids: Sequence[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
        """Abort the named requests (``None`` = all in flight).

        Returns the partial result of every request this call aborted and the named ids
        that matched no request this call aborted (unknown, finished, or already being
        aborted by another call): every named id is in exactly one of the two, whatever
        runs concurrently, and every aborted request is reported by exactly one call.
        Each id counts once. The match, the partial results and the ``abort_requested``
        marks happen without an await in between, and the client skips ids that are no
        longer in flight, so requests finishing concurrently never make it raise.
        """
        if request_ids is None:
            taken = [c for c in self.index.all() if not c.finished and not c.abort_requested]
            not_found: list[str] = []
        else:
            by_internal: dict[str, Choice] = {}
            not_found = []
            for rid, matched in self.index.resolve_each(dict.fromkeys(request_ids)):
                mine = False
                for c in matched:
                    if c.internal_id in by_internal:
                        mine = True  # two named forms of one request: it is aborted once
                    elif not c.finished and not c.abort_requested:
                        by_internal[c.internal_id] = c
                        mine = True
                if not mine:
                    not_found.append(rid)
            taken = list(by_internal.values())
        for c in taken:
            c.abort_requested = True
        partials = [c.partial_result() for c in taken]
        if taken:
            await self.client.abort([c.internal_id for c in taken])
            for _ in taken:
                self.metrics.aborted(CAUSE_ABORT_API)
        return partials, not_found

    async def wait_background(self, timeout: float = 5.0) -> None:
        """Let pending auto-aborts reach the client (used at shutdown)."""
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout)


class ChoiceRun:
    """One choice's engine request while it runs.

    :meth:`next_batch` waits for the engine's next outputs and folds everything
    already received into one delta (a stream that fell behind shows its backlog
    as one delta, not one per output); it keeps the metrics and the in-flight
    index. :meth:`close` ends it exactly once: a choice still running is then
    auto-aborted with cause ``dropped_stream``, one that matched a stop string
    with ``stop_string_matched``.
    """

    __slots__ = ("frontend", "choice", "stream", "error", "failed", "closed")

    def __init__(self, frontend: Frontend, choice: Choice, stream: OutputStream) -> None:
        self.frontend = frontend
        self.choice = choice
        self.stream = stream
        #: an ERROR output met while folding: raised after the delta that preceded it was shown
        self.error: EngineRequestFailed | None = None
        self.failed = False
        self.closed = False
        m = frontend.metrics
        frontend.index.add(choice)
        m.running.inc()
        m.waiting.inc()
        m.prompt_tokens.inc(len(choice.prompt_token_ids))

    @property
    def finished(self) -> bool:
        """No delta can follow (the choice has its finish reason)."""
        return self.choice.finished

    async def next_batch(self) -> list[ChoiceDelta]:
        """``[delta]`` with what the engine sent since the last call, or ``[]`` once the choice
        ended. Raises the request's failure (an ERROR output, engine death) after showing what
        came before it."""
        while (batch := self.poll()) is None:
            await self.stream.wait()
        return batch

    def poll(self) -> list[ChoiceDelta] | None:
        """:meth:`next_batch` without waiting: ``None`` when nothing new has arrived."""
        choice = self.choice
        while not choice.finished:
            if self.error is not None:
                self.failed = True
                raise self.error
            try:
                outs = self.stream.take_nowait()
            except Exception:
                self.failed = True
                raise
            if not outs:
                if not self.stream.finished:
                    return None
                # The client ended the stream without a terminal output (e.g. an
                # explicit abort finalised locally): the request ended as aborted.
                return [choice.finish_locally("abort")]
            delta = self._fold(outs)
            if delta is not None:
                return [delta]
        return []

    def _fold(self, outs: list[Any]) -> ChoiceDelta | None:
        choice, m = self.choice, self.frontend.metrics
        coalesced = 0  # token outputs folded into the next one: their inter-token gaps are 0 here
        if len(outs) > 1 and not choice.stop.stops:
            outs, coalesced = _coalesce(outs)
        merged: ChoiceDelta | None = None
        new_tokens = 0
        for out in outs:
            first_before, last_before = choice.first_token_at, choice.last_token_at
            try:
                delta = choice.apply(out)
            except EngineRequestFailed as exc:
                self.error = exc  # show what came before it, then fail
                break
            if choice.last_token_at is not None and choice.last_token_at != last_before:
                if first_before is None:
                    m.waiting.dec()
                    m.ttft.observe(choice.first_token_at - choice.arrival)
                else:
                    m.itl.observe(choice.last_token_at - last_before)
                if coalesced:
                    m.itl.observe(0.0, coalesced)
                    coalesced = 0
                new_tokens += len(out.new_token_ids)
            if delta is not None:
                merged = delta if merged is None else merged.merge(delta)
            if choice.finished:
                break
        if new_tokens:
            m.generation_tokens.inc(new_tokens)
        return merged

    def close(self) -> None:
        """End the choice (idempotent): index, metrics, and the auto-abort of a choice that
        is still running or matched a stop string. Never awaits: it runs in ``finally``
        blocks of cancelled tasks, where an await would be cancelled again."""
        if self.closed:
            return
        self.closed = True
        fe, choice, m = self.frontend, self.choice, self.frontend.metrics
        fe.index.remove(choice)
        m.running.dec()
        if choice.first_token_at is None:
            m.waiting.dec()
        if self.failed:
            m.finished("error")
        elif not choice.finished:
            fe._close(self.stream, CAUSE_DROPPED_STREAM)
            m.aborted(CAUSE_DROPPED_STREAM)
        elif choice.stop_string_matched:
            fe._close(self.stream, CAUSE_STOP_STRING)
            m.aborted(CAUSE_STOP_STRING)
            m.finished("stop")
        else:
            m.finished(choice.finish_reason)


def _coalesce(outs: list[EngineCoreOutput]) -> tuple[list[EngineCoreOutput], int]:
    """A backlog of one request's outputs as fewer outputs that show the same: the token
    outputs before the last output (or before a last ERROR, whose tokens are never shown) as
    one output with their ids concatenated, then what is left. Detokenising once and writing
    one delta is what folding them one by one gives when no stop string is matched on the
    text between them. Returns the outputs and how many token outputs were merged away
    (``0``: a finish reason before the end, a protocol fault, leaves ``outs`` as they are)."""
    if any(o.finish_reason is not None for o in outs[:-1]):
        return outs, 0
    last = outs[-1]
    if last.finish_reason == FinishReason.ERROR:
        head, tail = outs[:-1], [last]
    else:
        head, tail = outs, []
    if len(head) < 2:
        return outs, 0
    ids = [t for o in head for t in o.new_token_ids]
    with_tokens = sum(1 for o in head if o.new_token_ids)
    return [msgspec.structs.replace(head[-1], new_token_ids=ids), *tail], max(with_tokens - 1, 0)


_END = object()


class DeltaStream:
    """The deltas of a request with several choices (``n > 1`` or several prompts).

    :meth:`next_batch` waits for at least one delta and returns every delta
    already available, so a streaming response under load writes one SSE
    batch instead of one socket send per token. The first error of any
    choice is raised to the consumer and ends the others. :meth:`close`
    ends the choices. (One choice is its own :class:`ChoiceRun`: no tasks.)
    """

    def __init__(self, runs: list[ChoiceRun]) -> None:
        self.runs = runs
        self._queue: asyncio.Queue = asyncio.Queue()
        self._remaining = len(runs)
        self._tasks = [asyncio.ensure_future(self._pump(r)) for r in runs]

    @property
    def finished(self) -> bool:
        """No delta can follow (every choice has its finish reason)."""
        return all(r.choice.finished for r in self.runs)

    async def _pump(self, run: ChoiceRun) -> None:
        try:
            while batch := await run.next_batch():
                for d in batch:
                    self._queue.put_nowait(d)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the consumer
            self._queue.put_nowait(exc)
        else:
            self._queue.put_nowait(_END)

    async def next_batch(self) -> list[ChoiceDelta]:
        """Deltas now available (at least one), or ``[]`` once every choice ended."""
        out: list[ChoiceDelta] = []
        while self._remaining and not out:
            item = await self._queue.get()
            while True:
                if item is _END:
                    self._remaining -= 1
                elif isinstance(item, BaseException):
                    self.close()
                    raise item
                else:
                    out.append(item)
                if self._queue.empty():
                    break
                item = self._queue.get_nowait()
        return out

    def close(self) -> None:
        self._remaining = 0
        for t in self._tasks:
            t.cancel()
        for r in self.runs:
            r.close()


#: What :meth:`Frontend.start` returns: one choice's run, or a stream over several.
Deltas = Union[ChoiceRun, DeltaStream]
