"""Continuous-batching scheduler (sans-IO): queues, token budget, chunked prefill,
priorities, prefix-cache lookups and preemption by recompute.

Each :meth:`Scheduler.schedule` call picks the spans of one step:

1. running requests first, in admission order: each gets the tokens it has not
   computed yet (one for a plain decode, a prompt chunk during prefill), capped
   by the step's token budget (``max_num_batched_tokens``). When the block pool
   cannot hold a span, the worst running request (largest ``priority``, then
   latest arrival) is preempted: its blocks are freed and it goes back to the
   waiting queue to be recomputed later (cached blocks make that cheap);
2. then waiting requests, best ``(priority, arrival)`` first, while the budget,
   ``max_num_seqs`` and the block pool allow; a prompt longer than the budget
   is split into chunks over several steps.

A span that reaches the end of a request's known tokens samples a token
(:class:`~ecp.reference.engine.executor.ScheduledSpan` ``sample=True``).
:meth:`Scheduler.update` books the computed tokens and caches full blocks.
Finishing and token bookkeeping live in :mod:`.core`.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from ecp.spec import EngineCoreEventType, SamplingParams

from .executor import ScheduledSpan, StepBatch
from .kv_cache import BlockPool, hash_blocks


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


_seq = itertools.count()


@dataclass(eq=False)
class EngineRequest:
    """One admitted request as the engine tracks it."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    client_index: int = 0
    priority: int = 0
    arrival_time: float = 0.0
    cache_salt: str | None = None
    lora_name: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    max_tokens: int = 16  # effective: min(max_tokens, max_model_len - prompt)
    seq: int = field(default_factory=lambda: next(_seq))
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0  # blocks registered in the prefix cache
    status: Status = Status.WAITING
    events: list[tuple[EngineCoreEventType, float]] = field(default_factory=list)
    num_preemptions: int = 0
    # first prefill bookkeeping for PrefillStats
    num_prefix_cached_tokens: int = 0
    prefill_stats_sent: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_slice(self, start: int, stop: int) -> list[int]:
        p = len(self.prompt_token_ids)
        if stop <= p:
            return self.prompt_token_ids[start:stop]
        if start >= p:
            return self.output_token_ids[start - p:stop - p]
        return self.prompt_token_ids[start:] + self.output_token_ids[:stop - p]

    @property
    def hash_extra(self) -> Any:
        return (self.cache_salt, self.lora_name) if (self.cache_salt or self.lora_name) else None


@dataclass
class SchedulerOutput:
    batch: StepBatch
    scheduled: list[tuple[EngineRequest, int]]
    preempted: list[EngineRequest]
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0

    @property
    def empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Owns the waiting/running queues and the block pool of one engine."""

    def __init__(self, *, num_blocks: int, block_size: int, max_num_seqs: int,
                 max_num_batched_tokens: int, max_model_len: int, enable_chunked_prefill: bool = True,
                 enable_prefix_caching: bool = True, policy: str = "priority", clock=None) -> None:
        import time

        self.pool = BlockPool(num_blocks, enable_caching=enable_prefix_caching)
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.enable_chunked_prefill = enable_chunked_prefill
        self.policy = policy
        self.clock = clock or time.monotonic
        self.running: list[EngineRequest] = []
        self._waiting: list[tuple[int, int, EngineRequest]] = []  # heap; stale entries skipped
        self.num_waiting = 0
        self.requests: dict[str, EngineRequest] = {}  # every unfinished request
        #: blocks freed since the last schedule (passed to the executor)
        self._freed_blocks: list[int] = []
        self.num_preempted_total = 0

    # -- admission ----------------------------------------------------------
    def _key(self, req: EngineRequest) -> tuple[int, int]:
        return (req.priority if self.policy == "priority" else 0, req.seq)

    def add(self, req: EngineRequest) -> None:
        if req.request_id in self.requests:
            raise KeyError(req.request_id)
        self.requests[req.request_id] = req
        req.status = Status.WAITING
        req.events.append((EngineCoreEventType.QUEUED, self.clock()))
        self._push_waiting(req)

    def _push_waiting(self, req: EngineRequest) -> None:
        k = self._key(req)
        heapq.heappush(self._waiting, (k[0], k[1], req))
        self.num_waiting += 1

    def _peek_waiting(self) -> EngineRequest | None:
        while self._waiting:
            req = self._waiting[0][2]
            if req.status in (Status.WAITING, Status.PREEMPTED):
                return req
            heapq.heappop(self._waiting)  # finished while waiting: drop the stale entry
        return None

    # -- finishing ----------------------------------------------------------
    def finish(self, req: EngineRequest, *, free_blocks: bool = True) -> list[int]:
        """Remove ``req`` from the queues. Returns its blocks; frees them unless
        ``free_blocks`` is False (a KV connector keeps them pinned)."""
        if req.status is Status.FINISHED:
            return []
        if req.status is Status.RUNNING:
            self.running.remove(req)
        elif req.status in (Status.WAITING, Status.PREEMPTED):
            self.num_waiting -= 1
        req.status = Status.FINISHED
        self.requests.pop(req.request_id, None)
        blocks = req.block_ids
        req.block_ids = []
        if free_blocks:
            self.free_blocks(blocks)
        return blocks

    def finish_many(self, reqs: list[EngineRequest]) -> None:
        """Finish several requests at once (burst ABORT): one pass over ``running``."""
        running_gone = set()
        for req in reqs:
            if req.status is Status.FINISHED:
                continue
            if req.status is Status.RUNNING:
                running_gone.add(id(req))
            else:
                self.num_waiting -= 1
            req.status = Status.FINISHED
            self.requests.pop(req.request_id, None)
            self.free_blocks(req.block_ids)
            req.block_ids = []
        if running_gone:
            self.running = [r for r in self.running if id(r) not in running_gone]

    def free_blocks(self, blocks: list[int]) -> None:
        if blocks:
            self.pool.free(blocks)
            self._freed_blocks.extend(blocks)

    def preempt(self, req: EngineRequest) -> None:
        """Preempt a running request by recompute: free its blocks, requeue it."""
        self.running.remove(req)
        self.free_blocks(req.block_ids)
        req.block_ids = []
        req.num_computed_tokens = 0
        req.num_cached_blocks = 0
        req.status = Status.PREEMPTED
        req.num_preemptions += 1
        self.num_preempted_total += 1
        req.events.append((EngineCoreEventType.PREEMPTED, self.clock()))
        self._push_waiting(req)

    def preempt_all_running(self) -> list[EngineRequest]:
        victims = list(self.running)
        for req in reversed(victims):
            self.preempt(req)
        return victims

    # -- scheduling ---------------------------------------------------------
    def _blocks_needed(self, req: EngineRequest, num_new: int) -> int:
        total = -(-(req.num_computed_tokens + num_new) // self.block_size)
        return max(0, total - len(req.block_ids))

    def _pick_victim(self, candidates: list[EngineRequest]) -> EngineRequest:
        return max(candidates, key=self._key)

    def schedule(self, *, admit_new: bool = True, run_running: bool = True) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[EngineRequest, int]] = []
        preempted: list[EngineRequest] = []
        pool = self.pool
        bs = self.block_size
        running = self.running
        i = 0
        while run_running and i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed_tokens
            num_new = len(req.prompt_token_ids) + len(req.output_token_ids) - computed
            if num_new > budget:
                num_new = budget
            if num_new <= 0:
                i += 1
                continue
            # blocks to add so that the table covers computed + num_new positions (inlined: hot path)
            need = -(-(computed + num_new) // bs) - len(req.block_ids)
            while need > pool.num_free:
                victim = self._pick_victim(running[i:])
                self.preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status is not Status.RUNNING:
                running = self.running
                continue  # req itself was preempted; running[i] is now the next one
            if need > 0:
                req.block_ids.extend(pool.allocate(need))
            scheduled.append((req, num_new))
            budget -= num_new
            i += 1

        # Admit waiting requests, unless this step had to preempt (no room).
        while admit_new and not preempted and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self._peek_waiting()
            if req is None:
                break
            cached_blocks: list[int] = []
            if req.num_computed_tokens == 0 and not req.block_ids:
                # Never reuse the last token: one position must be computed to sample.
                max_hit_blocks = (req.num_tokens - 1) // self.block_size
                if not req.block_hashes or len(req.block_hashes) < max_hit_blocks:
                    parent = req.block_hashes[-1] if req.block_hashes else None
                    req.block_hashes.extend(hash_blocks(
                        req.token_slice(0, max_hit_blocks * self.block_size), self.block_size,
                        len(req.block_hashes), parent, req.hash_extra))
                if not req.sampling_params.skip_reading_prefix_cache:
                    cached_blocks = pool.lookup(req.block_hashes[:max_hit_blocks])
                if req.status is Status.WAITING:
                    pool.stats_requests += 1
                    pool.stats_queries += req.num_tokens
                    pool.stats_hits += len(cached_blocks) * self.block_size
            num_cached = len(cached_blocks) * self.block_size
            num_new = req.num_tokens - req.num_computed_tokens - num_cached
            if num_new > budget:
                if not self.enable_chunked_prefill:
                    break
                num_new = budget
            pool.touch(cached_blocks)
            req.block_ids.extend(cached_blocks)
            req.num_computed_tokens += num_cached
            need = self._blocks_needed(req, num_new)
            if need > pool.num_free:
                # undo the prefix hit and stop admitting: the pool is full
                req.block_ids = req.block_ids[:len(req.block_ids) - len(cached_blocks)]
                req.num_computed_tokens -= num_cached
                pool.free(cached_blocks)
                break
            req.block_ids.extend(pool.allocate(need))
            req.num_cached_blocks = len(cached_blocks)
            if req.status is Status.WAITING:
                req.num_prefix_cached_tokens = num_cached
            heapq.heappop(self._waiting)
            self.num_waiting -= 1
            req.status = Status.RUNNING
            req.events.append((EngineCoreEventType.SCHEDULED, self.clock()))
            self.running.append(req)
            scheduled.append((req, num_new))
            budget -= num_new

        spans: list[ScheduledSpan] = []
        n_prefill = n_decode = 0
        for req, n in scheduled:
            start = req.num_computed_tokens
            end = start + n
            prompt_len = len(req.prompt_token_ids)
            sample = end >= prompt_len + len(req.output_token_ids)
            if start < prompt_len:
                n_prefill += n
                toks = req.token_slice(start, end)
            else:
                n_decode += n
                toks = req.output_token_ids[start - prompt_len:end - prompt_len]
            spans.append(ScheduledSpan(
                request_id=req.request_id, token_ids=toks, start_position=start,
                block_table=req.block_ids, sample=sample, sampling_params=req.sampling_params,
                prompt_token_ids=req.prompt_token_ids, output_token_ids=req.output_token_ids,
                is_first_chunk=start == 0, seed=req.sampling_params.seed,
            ))
        freed, self._freed_blocks = self._freed_blocks, []
        return SchedulerOutput(StepBatch(spans, freed), scheduled, preempted, n_prefill, n_decode)

    def update(self, out: SchedulerOutput) -> None:
        """Book the computed tokens of a step and cache newly full blocks."""
        bs = self.block_size
        for req, n in out.scheduled:
            if req.status is not Status.RUNNING:
                continue
            req.num_computed_tokens += n
            full = req.num_computed_tokens // bs
            if full > req.num_cached_blocks and self.pool.enable_caching:
                if len(req.block_hashes) < full:
                    parent = req.block_hashes[-1] if req.block_hashes else None
                    start = len(req.block_hashes)
                    req.block_hashes.extend(hash_blocks(
                        req.token_slice(start * bs, full * bs), bs, 0, parent,
                        req.hash_extra if start == 0 else None))
                for b in range(req.num_cached_blocks, full):
                    self.pool.cache_block(req.block_ids[b], req.block_hashes[b])
                req.num_cached_blocks = full

    # -- introspection ------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        return bool(self.requests)
