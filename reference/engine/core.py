"""The engine core (sans-IO): admission, abort and stepping; the UTILITY methods
(:mod:`.utilities`), DP waves (:mod:`.waves`) and stats (:mod:`.stats`) are modules of their own.

:class:`EngineCore` consumes decoded input messages and produces
:class:`Outbound` messages (``EngineCoreOutputs`` addressed to a client index,
or to :data:`COORDINATOR`) in :attr:`EngineCore.outbox`; the IO layer
(:mod:`.server`) encodes and sends them in order. Behaviour follows vLLM 0.33:

* ADD: validation failures, duplicates, a paused engine and an out-of-range
  ``client_index`` are answered with one ERROR output (``finished_requests``
  set, no stats, no ``weight_version``); ``abort_immediately`` admits and
  aborts at once with no output, running the KV connector hook.
* client ABORT: no output; blocks freed at once; unknown ids ignored.
* steps: one message per client with outputs; QUEUED/SCHEDULED(/PREEMPTED)
  events and ``prefill_stats`` ride on a request's first output after they
  happen; ``weight_version`` is set; a stats-only message follows finishes and
  aborts once the engine is idle.
* engine-initiated aborts (sleep/pause with mode ``abort``, shutdown): ABORT
  outputs with ``finished_requests``, then a stats-only message, then the
  utility reply.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ecp.spec import (
    EngineCoreEvent, EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason,
    PrefillStats, RequestError, UtilityRequest,
)
from ecp.spec.machine import COORDINATOR, Admission, SchedulerControl

from .config import EngineConfig
from .kv_connector import ReferenceKVConnector
from .outbox import Outbound
from .scheduler import EngineRequest, Scheduler, SchedulerOutput, Status
from .stats import EngineStats
from .utilities import SLEEP_TAGS, UTILITIES, EngineControls, PauseState, PendingUtilities, UtilityFailure
from .waves import Waves

__all__ = ["EngineCore", "Outbound", "PauseState", "SLEEP_TAGS", "UTILITIES", "UtilityFailure"]

log = logging.getLogger("ecp.engine")
#: a client's bad input, rate-limited per template (the IO layer installs the limiter)
refusal_log = logging.getLogger("ecp.engine.bad_input")

DEFAULT_NUM_GPU_BLOCKS = 8192
PAUSED_MESSAGE = "Generation is paused. Please retry after it resumes."



class EngineCore:
    """One engine core (one DP rank). Drive it with :meth:`add_request`,
    :meth:`abort_requests`, :meth:`handle_utility`, :meth:`start_dp_wave` and
    :meth:`step`; send what :meth:`take_outbox` returns."""

    def __init__(self, config: EngineConfig, executor: Any, *, engine_index: int = 0,
                 num_clients: int = 1, has_coordinator: bool = False,
                 connector: ReferenceKVConnector | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        #: the vLLM release spoken (``--vllm``): which UTILITY methods exist and their arities
        self.profile = config.profile()
        #: the class an ``add_lora`` argument is read as: that release's LoRARequest
        self.lora_type = self.profile.message("LoRARequest")
        #: the sleep/pause state as the spec's SCHEDULER table moves it on the calls this core carried
        #: out: it decides whether a new ADD is admitted, queued or refused (ECP-REQ-7)
        self.scheduler_control = SchedulerControl()
        #: the ADDs queued while paused, in arrival order: (request, arrival client, duplicate)
        self.held: list[tuple[EngineCoreRequest, int, bool]] = []
        self.executor = executor
        self.engine_index = engine_index
        self.num_clients = num_clients
        self.has_coordinator = has_coordinator
        self.clock = clock
        # an executor with a real model bounds the vocabulary and the context
        self.vocab_size = int(getattr(executor, "vocab_size", None) or config.vocab_size)
        self.max_model_len = config.max_model_len
        model_len = getattr(executor, "max_model_len", None)
        if model_len and model_len < self.max_model_len:
            log.warning("max_model_len %d exceeds the model's %d; using %d", self.max_model_len, model_len,
                        model_len)
            self.max_model_len = int(model_len)
        num_blocks = config.num_gpu_blocks
        if num_blocks is None:
            num_blocks = executor.available_blocks(config.block_size, config.gpu_memory_utilization)
        # 0 from the executor means "no room on the device": an error below, never the default
        self.num_blocks = int(DEFAULT_NUM_GPU_BLOCKS if num_blocks is None else num_blocks)
        if self.num_blocks * config.block_size < self.max_model_len:
            raise ValueError(
                f"the KV cache ({self.num_blocks} blocks x {config.block_size} tokens) cannot hold one "
                f"sequence of max_model_len={self.max_model_len}; lower --max-model-len, or raise "
                f"--num-gpu-blocks / --gpu-memory-utilization")
        executor.initialize(self.num_blocks, config.block_size)
        self.scheduler = Scheduler(
            num_blocks=self.num_blocks, block_size=config.block_size, max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens, max_model_len=self.max_model_len,
            enable_chunked_prefill=config.enable_chunked_prefill,
            enable_prefix_caching=config.enable_prefix_caching, policy=config.scheduling_policy,
            clock=clock)
        self.connector = connector
        if connector is not None:
            connector.free_blocks = self.scheduler.free_blocks
        self.outbox: list[Outbound] = []
        #: what the UTILITY methods set (pause, sleep, weight version, LoRAs); only they write it
        self.controls = EngineControls()
        self.waves = Waves(has_coordinator)
        self.step_counter = 0
        self.utilities = PendingUtilities(self, on_carried_out=self.scheduler_control.carried_out)
        self.stats = EngineStats(log_stats=not config.disable_log_stats, include_finished_set=has_coordinator)
        self.num_errors = 0
        self.num_finished = 0

    # ------------------------------------------------------------------ outbox
    def take_outbox(self) -> list[Outbound]:
        out, self.outbox = self.outbox, []
        return out

    def emit(self, client_index: int, msg: Any) -> None:
        """Queue ``msg`` for ``outputs[client_index]`` (or :data:`COORDINATOR`)."""
        self.outbox.append(Outbound(client_index, msg))

    @property
    def current_wave(self) -> int:
        return self.waves.current

    @property
    def weight_version(self) -> str:
        return self.controls.weight_version

    def _valid_client(self, client_index: int) -> bool:
        return 0 <= client_index < self.num_clients

    # ------------------------------------------------------------------ ADD
    def add_request(self, req: EngineCoreRequest, arrival_client: int = 0, *, duplicate: bool = False) -> None:
        """Admit an ADD, or answer it with an ERROR output. ``duplicate``: the engine's protocol
        machine found the id in flight (``Add.duplicate``); it owes one ERROR (``ECP-REQ-2``)."""
        rid = req.request_id
        client = req.client_index
        if not self._valid_client(client):
            log.warning("[ECP-ROB-4] ADD %r names client_index %d; engine has %d client(s)",
                        rid, client, self.num_clients)
            self.reject(rid, arrival_client, "invalid_client_index",
                        f"client_index {client} has no output socket (engine has {self.num_clients})")
            return
        abort_now = req.abort_immediately
        params = req.kv_transfer_params
        refusal = self.connector.producer_refusal(params) if self.connector is not None else None
        if refusal is not None:
            # ECP-SEC-4: the request chose where this engine would connect; it connects nowhere
            refusal_log.warning("[ECP-SEC-4] ADD %r refused: %s", rid, refusal)
            self.reject(rid, client, "kv_producer_not_allowed", refusal)
            return
        decision = self.scheduler_control.admission(abort_now)
        if decision is Admission.QUEUE:
            self.held.append((req, arrival_client, duplicate))
            return
        if decision is Admission.REFUSE:
            self.reject(rid, client, "engine_paused", PAUSED_MESSAGE, retryable=True)
            if params and self.connector is not None:
                # as vLLM: the refused request still lets the connector clean up
                self.connector.request_finished(rid, params, [], aborted=True)
            return
        problem = self._validate(req)
        if problem is not None:
            code, message = problem
            self.reject(rid, client, code, message)
            if abort_now and params and self.connector is not None:
                self.connector.request_finished(rid, params, [], aborted=True)
            return
        if duplicate:
            # the original still runs: its id is not finished (ECP-OUT-5)
            self.reject(rid, client, "duplicate_request_id",
                        f"request id {rid!r} is already in flight at this engine", finished=False)
            return
        sp = req.sampling_params
        prompt = list(req.prompt_token_ids or ())
        room = self.max_model_len - len(prompt)
        max_tokens = room if sp.max_tokens is None else min(sp.max_tokens, room)
        er = EngineRequest(
            request_id=rid, prompt_token_ids=prompt, sampling_params=sp, client_index=client,
            priority=req.priority, arrival_time=req.arrival_time, cache_salt=req.cache_salt,
            lora_name=req.lora_request.lora_name if req.lora_request else None,
            kv_transfer_params=params, max_tokens=max(1, max_tokens))
        notice = self.waves.on_request(req.current_wave)
        if notice is not None:  # a stale-wave request to an idle engine starts a new wave (ECP-DP-5)
            self.emit(COORDINATOR, EngineCoreOutputs(engine_index=self.engine_index, timestamp=self.clock(),
                                                     start_wave=notice))
        if self.connector is not None:
            self.connector.forget(rid, None if abort_now else params)
        self.scheduler.add(er)
        if abort_now:
            self._end(er, aborted=True)
            self.stats.finished(client, rid)  # no output, but reported as finished (as vLLM)
            self.stats.dirty = True

    def _validate(self, req: EngineCoreRequest) -> tuple[str, str] | None:
        if req.pooling_params is not None or req.sampling_params is None:
            return "unsupported_task", "this engine supports only the 'generate' task (got a pooling request)"
        if req.prompt_token_ids is None:
            return "invalid_request", "prompt_token_ids is required (prompt_embeds are not supported)"
        if req.mm_features:
            return "unsupported_task", "multimodal inputs are not supported by this engine"
        n = len(req.prompt_token_ids)
        if n == 0:
            return "invalid_request", "the prompt is empty"
        if n > self.max_model_len:
            return ("prompt_too_long", f"The decoder prompt (length {n}) is longer than the maximum "
                    f"model length of {self.max_model_len}.")
        vocab = self.vocab_size
        for t in req.prompt_token_ids:
            if not 0 <= t < vocab:
                return "invalid_request", f"Token id {t} is out of vocabulary (vocab_size={vocab})"
        errors = req.sampling_params.validation_errors()
        if errors:
            return "invalid_request", "; ".join(errors)
        for name in ("logprobs", "prompt_logprobs"):
            # more alternatives than the vocabulary has cannot be returned (and would
            # make an executor search forever); -1 already means "the whole vocabulary"
            num = getattr(req.sampling_params, name)
            if num is not None and num > vocab:
                return ("invalid_request", f"Requested {name} of {num}, which is greater than the "
                        f"vocabulary size {vocab} (use -1 for the whole vocabulary)")
        if req.lora_request is not None and req.lora_request.lora_int_id not in self.controls.loras:
            return "invalid_request", f"LoRA adapter {req.lora_request.lora_name!r} is not loaded"
        return None

    def reject(self, request_id: str, client_index: int, code: str, message: str,
               retryable: bool = False, finished: bool = True) -> None:
        """Answer a request that is not admitted with one ERROR output (``ECP-REQ-3``); ``finished``
        false leaves its id out of ``finished_requests`` (a duplicate of a running id, ``ECP-OUT-5``)."""
        self.num_errors += 1
        out = EngineCoreOutput(request_id=request_id, new_token_ids=[], finish_reason=FinishReason.ERROR,
                               error=RequestError(code=code, message=message, retryable=retryable))
        self.emit(client_index, EngineCoreOutputs(
            engine_index=self.engine_index, outputs=[out], timestamp=self.clock(),
            finished_requests={request_id} if finished else None))

    # ------------------------------------------------------------------ ABORT
    def abort_requests(self, request_ids: list[str]) -> int:
        """Client ABORT: end every known id without output. Returns how many ended."""
        if self.held:  # a queued ADD the client gave up on is forgotten, as vLLM drops it from its queue
            gone = set(request_ids)
            self.held = [h for h in self.held if h[0].request_id not in gone]
        found = []
        seen = set()
        for rid in request_ids:
            req = self.scheduler.requests.get(rid)
            if req is not None and rid not in seen:
                seen.add(rid)
                found.append(req)
        if not found:
            return 0
        plain = []
        for req in found:
            if self.connector is not None and req.kv_transfer_params:
                self._end(req, aborted=True)
            else:
                plain.append(req)
        if plain:
            self.scheduler.finish_many(plain)
            self.executor.release([r.request_id for r in plain])
        stats = self.stats
        for req in found:
            stats.finished(req.client_index, req.request_id)
        stats.dirty = True
        return len(found)

    def _end(self, req: EngineRequest, *, aborted: bool) -> dict[str, Any] | None:
        """Finish ``req`` in the scheduler, running the connector hook first."""
        keep, out_params = False, None
        if self.connector is not None and req.kv_transfer_params:
            keep, out_params = self.connector.request_finished(
                req.request_id, req.kv_transfer_params, req.block_ids, aborted=aborted)
        self.scheduler.finish(req, free_blocks=not keep)
        self.executor.release([req.request_id])
        self.num_finished += 1
        return out_params

    def abort_all_with_outputs(self) -> list[str]:
        """Engine-initiated abort of everything in flight (``ECP-ABORT-9``)."""
        reqs = list(self.scheduler.requests.values())
        if not reqs:
            return []
        by_client: dict[int, list[EngineRequest]] = {}
        for req in reqs:
            by_client.setdefault(req.client_index, []).append(req)
            self._end(req, aborted=True)
        now = self.clock()
        for client, group in by_client.items():
            self.emit(client, EngineCoreOutputs(
                engine_index=self.engine_index,
                outputs=[EngineCoreOutput(request_id=r.request_id, new_token_ids=[],
                                          finish_reason=FinishReason.ABORT) for r in group],
                timestamp=now, finished_requests={r.request_id for r in group}))
        self.stats.dirty = True
        self._emit_stats_only()
        return [r.request_id for r in reqs]

    # ------------------------------------------------------------------ DP waves
    def start_dp_wave(self, wave: int, exclude_engine_index: int | None) -> None:
        """START_DP_WAVE: a wave older than ours is ignored (``ECP-DP-4``)."""
        self.waves.on_start(wave, exclude_engine_index, self.engine_index)

    def _maybe_complete_wave(self) -> None:
        if self.waves.running and not self.scheduler.has_unfinished():
            done = self.waves.on_idle()
            # ECP-DP-5: only global rank 0 reports a wave; the other ranks move on to the next one
            # silently. These engines share no channel to agree that every rank is idle (vLLM's
            # agree by an all-reduce outside the protocol), so rank 0 reports when it is idle itself.
            if done is not None and self.engine_index == 0:
                self.emit(COORDINATOR, EngineCoreOutputs(engine_index=self.engine_index, timestamp=self.clock(),
                                                         wave_complete=done))

    # ------------------------------------------------------------------ stats
    def _emit_stats_only(self) -> None:
        msg = self.stats.stats_only(self)
        if msg is not None:
            self.emit(0, msg)

    def _publish_counts(self) -> None:
        if self.has_coordinator:
            msg = self.stats.coordinator_counts(self)
            if msg is not None:
                self.emit(COORDINATOR, msg)

    # ------------------------------------------------------------------ step
    def step(self) -> bool:
        """Run one scheduler step. Returns True when it did work (call again soon)."""
        if self.connector is not None and self.connector.leases:
            self.connector.expire()
        busy = False
        if self.held and self.scheduler_control.admission() is Admission.ADMIT:
            held, self.held = self.held, []
            for req, client, duplicate in held:
                self.add_request(req, client, duplicate=duplicate)
        if self.controls.pause is not PauseState.PAUSED_ALL and self.scheduler.has_unfinished():
            sched = self.scheduler.schedule()
            if not sched.empty:
                self._run(sched)
                busy = True
        if not busy:
            self._emit_stats_only()
        self.utilities.check()
        self._maybe_complete_wave()
        self._publish_counts()
        return busy

    def _run(self, sched: SchedulerOutput) -> None:
        result = self.executor.execute(sched.batch)
        self.scheduler.update(sched)
        self.step_counter += 1
        now = self.clock()
        cfg = self.config
        stats = self.stats
        per_client: dict[int, list[EngineCoreOutput]] = {}
        finished_any = False
        for req, _n in sched.scheduled:
            if req.status is not Status.RUNNING:
                continue
            toks = result.sampled.get(req.request_id)
            new: list[int] = []
            finish: FinishReason | None = None
            stop_reason: int | None = None
            if toks:
                for t in toks:
                    req.output_token_ids.append(t)
                    new.append(t)
                    finish, stop_reason = self._check_stop(req, t)
                    if finish is not None:
                        break
            if not new and finish is None:
                continue
            out = EngineCoreOutput(request_id=req.request_id, new_token_ids=new)
            if req.events:
                out.events = [EngineCoreEvent(type=t, timestamp=ts) for t, ts in req.events]
                req.events = []
            if not req.prefill_stats_sent:
                req.prefill_stats_sent = True
                p = len(req.prompt_token_ids)
                cached = req.num_prefix_cached_tokens
                out.prefill_stats = PrefillStats(
                    num_prompt_tokens=p, num_computed_tokens=p, num_cached_tokens=cached,
                    num_local_cached_tokens=cached,
                    num_cache_creation_tokens=max(0, (p // cfg.block_size) * cfg.block_size - cached))
            nans = result.num_nans.get(req.request_id)
            if nans:
                out.num_nans_in_logits = nans
            lp = result.logprobs.get(req.request_id)
            if lp is not None:
                out.new_logprobs = lp
            plp = result.prompt_logprobs.get(req.request_id)
            if plp is not None:
                out.new_prompt_logprobs_tensors = plp
            if finish is not None:
                finished_any = True
                out.kv_transfer_params = self._end(req, aborted=False)
                out.finish_reason = finish
                out.stop_reason = stop_reason
                stats.finished(req.client_index, req.request_id)
            per_client.setdefault(req.client_index, []).append(out)
        stats_attached = not stats.log_stats
        for client, outs in per_client.items():
            msg = EngineCoreOutputs(engine_index=self.engine_index, outputs=outs, timestamp=now,
                                    weight_version=self.controls.weight_version,
                                    finished_requests=stats.take_finished(client))
            if not stats_attached:
                msg.scheduler_stats = stats.snapshot(self)
                stats_attached = True
            self.emit(client, msg)
        if per_client:
            stats.dirty = finished_any
        elif finished_any or sched.preempted:
            stats.dirty = True

    def _check_stop(self, req: EngineRequest, token: int) -> tuple[FinishReason | None, int | None]:
        # ECP-REQ-5: a stop condition (EOS, then a stop token) wins over the length cap on the same
        # token, as vLLM's check_stop orders them; none applies before min_tokens
        n_out = len(req.output_token_ids)
        sp = req.sampling_params
        if n_out >= sp.min_tokens:
            if not sp.ignore_eos and sp._eos_token_id is not None and token == sp._eos_token_id:
                return FinishReason.STOP, None
            if sp.stop_token_ids and token in sp.stop_token_ids:
                return FinishReason.STOP, token
        if n_out >= req.max_tokens or req.num_tokens >= self.max_model_len:
            return FinishReason.LENGTH, None
        return None, None

    def shutdown(self) -> list[str]:
        """Abort everything in flight with ABORT outputs (vLLM's default ``timeout=0``);
        a deferred ``sleep``/``pause`` (mode ``wait``) is then answered, the engine being idle."""
        aborted = self.abort_all_with_outputs()
        self.utilities.check()
        return aborted

    # ------------------------------------------------------------------ utilities
    def handle_utility(self, call: UtilityRequest, arrival_client: int = 0) -> None:
        """Run a UTILITY call (:mod:`.utilities`); the reply (or a deferred reply) goes to the outbox."""
        client = call.client_idx
        if not self._valid_client(client):
            log.warning("[ECP-ROB-4] UTILITY %s names client_idx %d; replying on client %d",
                        call.method_name, client, arrival_client)
            client = arrival_client
        self.utilities.handle(call, client)
