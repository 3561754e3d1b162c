"""The executor interface: what the scheduler asks a model runner to do each step.

The scheduler owns requests, KV block allocation and prefix caching; the
executor owns the KV *contents* and the model. One call per step:
:meth:`Executor.execute` takes a :class:`StepBatch` (every scheduled span of
every request, with its block table) and returns the sampled tokens (and
logprobs when asked). The synthetic executor fabricates deterministic tokens;
the torch executor (``ecp.reference.engine.torch_executor``) runs a real
transformer over a paged KV cache on CPU or CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ecp.spec import LogprobsLists, LogprobsTensors, SamplingParams


@dataclass
class ScheduledSpan:
    """One request's share of one step.

    ``token_ids`` are the tokens to run through the model now: a (chunk of the)
    prompt during prefill, or the last sampled token during decode. They sit at
    positions ``start_position .. start_position + len(token_ids) - 1``. Tokens
    before ``start_position`` are already in the KV cache (computed earlier or
    reused from the prefix cache) in the blocks of ``block_table``, which
    covers every position up to the end of this span.
    """

    request_id: str
    token_ids: list[int]
    start_position: int
    block_table: list[int]
    #: True when the span reaches the end of the known sequence, so a token is sampled.
    sample: bool
    sampling_params: SamplingParams
    prompt_token_ids: list[int]
    #: tokens generated so far (penalties, seeded sampling use them)
    output_token_ids: list[int]
    #: True on the request's first span of a prefill chunk that starts at position 0
    is_first_chunk: bool = False
    #: per-request seed (``sampling_params.seed``), or None for the engine's generator
    seed: int | None = None


@dataclass
class StepBatch:
    spans: list[ScheduledSpan]
    #: blocks freed since the last step (executors may clear or reuse their contents)
    freed_blocks: list[int] = field(default_factory=list)


@dataclass
class StepResult:
    #: request id -> newly sampled token ids (one for an ordinary decode step; the
    #: synthetic executor may return several to model multi-token outputs)
    sampled: dict[str, list[int]] = field(default_factory=dict)
    logprobs: dict[str, LogprobsLists] = field(default_factory=dict)
    prompt_logprobs: dict[str, LogprobsTensors] = field(default_factory=dict)
    #: number of NaNs seen in each request's logits
    num_nans: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class Executor(Protocol):
    """What the engine core needs from a model runner."""

    #: torch dtype name reported in the ready payload (``"float32"``, ``"bfloat16"`` …)
    dtype: str

    def initialize(self, num_blocks: int, block_size: int) -> None:
        """Allocate the KV cache for ``num_blocks`` blocks of ``block_size`` tokens."""

    def available_blocks(self, block_size: int, memory_utilization: float) -> int | None:
        """How many KV blocks fit in the device memory budget, or None when the
        executor has no memory model (the engine then uses ``--num-gpu-blocks``)."""

    def execute(self, batch: StepBatch) -> StepResult:
        """Run one step; return sampled tokens for every span with ``sample=True``."""

    def release(self, request_ids: list[str]) -> None:
        """Forget per-request state (seeded generators) of finished requests."""
