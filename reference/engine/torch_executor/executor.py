"""``TorchExecutor``: the reference engine's real model runner (CPU or CUDA).

One :meth:`TorchExecutor.execute` = one forward over every scheduled span,
packed back to back (prefill chunks and decodes together), K/V written into
and read from the paged cache through each span's block table, then one
batched sampling call for the spans that end their known sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ecp.spec import LogprobsTensors, Tensor

from ..executor import ScheduledSpan, StepBatch, StepResult
from .config import ModelConfig
from .paged_attention import PagedKVCache, SpanLayout, build_metadata
from .sampler import Sampler, SamplingRow, top_logprobs
from .weights import load_model

DTYPES = {
    "float32": torch.float32, "float": torch.float32,
    "float16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16,
}

#: memory kept free for activations, logits and sampling temporaries when
#: sizing the block pool: the larger of this many bytes and 5 % of the device
ACTIVATION_RESERVE_BYTES = 1 << 30


class InvalidTokenError(ValueError):
    """A span carries a token id outside ``0 .. vocab_size-1`` (the engine must
    reject such prompts at admission, ``ECP-REQ-3``; see :meth:`TorchExecutor.check_prompt`)."""


def resolve_device(device: str) -> torch.device:
    """``auto`` = CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for but torch sees no CUDA device")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu, cuda or auto, got {device!r}")
    return dev


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """None/``auto``: float32 on CPU, bfloat16 on CUDA (float16 where bf16 is unsupported)."""
    if dtype in (None, "auto"):
        if device.type == "cpu":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} or auto, got {dtype!r}") from None


@dataclass
class _PromptLogprobState:
    """Prompt logprob rows gathered chunk by chunk until the prefill completes."""

    rows: list[tuple]  # (ids, logprobs, ranks) numpy chunks in position order


class TorchExecutor:
    """Runs a Llama/Qwen2-family model over a paged KV cache.

    ``model``: ``random:tiny|small[:SEED]`` or a local HF checkpoint directory.
    ``seed`` seeds the generator of unseeded requests (weights of ``random:*``
    models depend only on the model spec, so every engine of a deployment
    serves the same model). ``dtype``: None/``auto``, ``float32``,
    ``bfloat16`` or ``float16``.
    """

    def __init__(self, model: str, device: str = "auto", seed: int = 0, dtype: str | None = None) -> None:
        self.device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, self.device)
        self.torch_dtype = torch_dtype
        #: torch dtype name for the ready payload
        self.dtype = str(torch_dtype).removeprefix("torch.")
        self.model = load_model(model, self.device, torch_dtype)
        self.config: ModelConfig = self.model.config
        self.vocab_size = self.config.vocab_size
        self.eos_token_id = self.config.eos_token_id
        self.max_model_len = self.config.max_position_embeddings
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.sampler = Sampler(self.vocab_size, self.generator)
        self.cache: PagedKVCache | None = None
        self._request_generators: dict[str, torch.Generator] = {}
        self._prompt_logprobs: dict[str, _PromptLogprobState] = {}
        self._prompt_logprobs_sent: set[str] = set()

    # -- memory ------------------------------------------------------------------
    def block_bytes(self, block_size: int) -> int:
        c = self.config
        return PagedKVCache.bytes_per_block(c.num_hidden_layers, block_size, c.num_key_value_heads,
                                            c.head_dim, self.torch_dtype.itemsize)

    def available_blocks(self, block_size: int, memory_utilization: float) -> int | None:
        """CUDA: blocks that fit in ``utilization * total`` minus what is already in
        use (weights, other processes) and an activation reserve. CPU: None."""
        if self.device.type != "cuda":
            return None
        free, total = torch.cuda.mem_get_info(self.device)
        reserve = max(ACTIVATION_RESERVE_BYTES, total // 20)
        budget = total * memory_utilization - (total - free) - reserve
        return max(0, int(budget // self.block_bytes(block_size)))

    def initialize(self, num_blocks: int, block_size: int) -> None:
        c = self.config
        self.cache = PagedKVCache(c.num_hidden_layers, num_blocks, block_size, c.num_key_value_heads,
                                  c.head_dim, self.torch_dtype, self.device)

    # -- requests ----------------------------------------------------------------
    def check_prompt(self, token_ids: list[int]) -> str | None:
        """An error message when a token id is outside the vocabulary, else None."""
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            return f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})"
        return None

    def release(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self._request_generators.pop(rid, None)
            self._prompt_logprobs.pop(rid, None)
            self._prompt_logprobs_sent.discard(rid)

    # -- one step ----------------------------------------------------------------
    def execute(self, batch: StepBatch) -> StepResult:
        result = StepResult()
        if not batch.spans:
            return result
        hidden, offsets = self._forward(batch.spans)
        sample_spans = [(i, s) for i, s in enumerate(batch.spans) if s.sample]
        if sample_spans:
            rows = torch.tensor([offsets[i] + len(s.token_ids) - 1 for i, s in sample_spans], device=self.device)
            logits = self.model.compute_logits(hidden[rows])
            nans = torch.isnan(logits).sum(dim=-1).tolist()
            out = self.sampler.sample(logits, [self._sampling_row(s) for _, s in sample_spans])
            for j, (_, span) in enumerate(sample_spans):
                result.sampled[span.request_id] = [out.tokens[j]]
                result.num_nans[span.request_id] = nans[j]
                if out.logprobs[j] is not None:
                    result.logprobs[span.request_id] = out.logprobs[j]
        for i, span in enumerate(batch.spans):
            if span.sampling_params.prompt_logprobs is not None:
                done = self._prompt_logprobs_chunk(span, hidden, offsets[i])
                if done is not None:
                    result.prompt_logprobs[span.request_id] = done
        return result

    def forward_logits(self, batch: StepBatch) -> dict[str, torch.Tensor]:
        """Run the step's forward (writing the cache) and return every span's float32
        logits ``[len(token_ids), vocab]``, without sampling. For tests and tools."""
        hidden, offsets = self._forward(batch.spans)
        return {s.request_id: self.model.compute_logits(hidden[offsets[i]:offsets[i] + len(s.token_ids)])
                for i, s in enumerate(batch.spans)}

    def _forward(self, spans: list[ScheduledSpan]) -> tuple[torch.Tensor, list[int]]:
        if self.cache is None:
            raise RuntimeError("TorchExecutor.initialize() must run before execute()")
        ids: list[int] = []
        offsets: list[int] = []
        layouts: list[SpanLayout] = []
        for span in spans:
            if not span.token_ids:
                raise ValueError(f"span of request {span.request_id!r} has no tokens")
            message = self.check_prompt(span.token_ids)
            if message:
                raise InvalidTokenError(f"request {span.request_id!r}: {message}")
            offsets.append(len(ids))
            ids.extend(span.token_ids)
            layouts.append(SpanLayout(span.start_position, len(span.token_ids), span.block_table))
        meta = build_metadata(layouts, self.cache.block_size, self.cache.num_blocks, self.device)
        hidden = self.model(torch.tensor(ids, device=self.device), meta.positions, meta, self.cache)
        return hidden, offsets

    def _sampling_row(self, span: ScheduledSpan) -> SamplingRow:
        seed = span.seed if span.seed is not None else span.sampling_params.seed
        gen = None
        if seed is not None:
            # one generator for the request's life: it survives preemption, so a
            # preempted seeded request draws exactly what it would have drawn
            gen = self._request_generators.get(span.request_id)
            if gen is None:
                gen = torch.Generator(device=self.device).manual_seed(seed)
                self._request_generators[span.request_id] = gen
        return SamplingRow(span.sampling_params, span.prompt_token_ids, span.output_token_ids, gen)

    def _prompt_logprobs_chunk(self, span: ScheduledSpan, hidden: torch.Tensor, offset: int
                               ) -> LogprobsTensors | None:
        """Gather the prompt logprob rows this span covers; the full
        ``[P-1, K+1]`` tensors once the prompt's prefill is complete.

        The logits at position i score prompt token i+1. Requests asking for
        prompt logprobs skip prefix-cache reads (``skip_reading_prefix_cache``),
        so their prefill starts at position 0; a recompute after preemption
        does not send them again.
        """
        rid = span.request_id
        if rid in self._prompt_logprobs_sent:
            return None
        prompt = span.prompt_token_ids
        P = len(prompt)
        start, end = span.start_position, span.start_position + len(span.token_ids)
        if start == 0 or rid not in self._prompt_logprobs:
            self._prompt_logprobs[rid] = _PromptLogprobState(rows=[])
        state = self._prompt_logprobs[rid]
        last = min(end, P - 1)  # exclusive: rows for positions start..last-1
        if last > start:
            h = hidden[offset:offset + (last - start)]
            logprobs = torch.log_softmax(self.model.compute_logits(h), dim=-1)
            targets = torch.tensor(prompt[start + 1:last + 1], device=self.device)
            state.rows.append(top_logprobs(logprobs, targets, span.sampling_params.prompt_logprobs))
        if end < P:
            return None
        del self._prompt_logprobs[rid]
        self._prompt_logprobs_sent.add(rid)
        return _prompt_logprobs_tensors(state.rows, span.sampling_params.prompt_logprobs, self.vocab_size)


def _prompt_logprobs_tensors(rows: list[tuple], num: int, vocab_size: int) -> LogprobsTensors:
    import numpy as np

    k1 = (vocab_size if num == -1 else min(num, vocab_size)) + 1
    if rows:
        ids = np.concatenate([r[0] for r in rows])
        lps = np.concatenate([r[1] for r in rows])
        ranks = np.concatenate([r[2] for r in rows])
    else:
        ids = np.zeros((0, k1), np.int32)
        lps = np.zeros((0, k1), np.float32)
        ranks = np.zeros((0,), np.int64)
    # vLLM keeps prompt logprobs as torch tensors: torch dtype names on the wire
    return LogprobsTensors(
        Tensor("int32", tuple(ids.shape), ids.astype("<i4").tobytes()),
        Tensor("float32", tuple(lps.shape), lps.astype("<f4").tobytes()),
        Tensor("int64", tuple(ranks.shape), ranks.astype("<i8").tobytes()),
        None,
    )
