"""The synthetic executor: deterministic tokens without a model.

Token ``i`` (0-based among a request's generated tokens) is
:func:`synthetic_token` ``(request_key(…), i, vocab_size)``, keyed like a real
model would be: a **greedy** request (``temperature < 1e-5``) by its prompt
token ids (the same prompt always continues the same way), any other request
by its sampling ``seed`` when it has one, else by its request id; all mixed
with the engine ``seed``. The value
lies in ``[RESERVED_TOKEN_IDS, vocab_size)``: ids ``0..15`` are never produced
(that is where tokenizers keep BOS/EOS/padding), and neither is the request's
``_eos_token_id``. So a request stops with STOP only when a test asks for it:

* ``eos_every=N`` emits the request's EOS id (or the engine's ``eos_token_id``
  when the request names none) as generated token ``N-1, 2N-1, …``;
* ``stop_token_ids`` naming a token the request will produce (compute it with
  :func:`expected_tokens`).

When a request asks for ``logprobs=K`` each output carries vLLM's layout
(``[N, K+1]`` int32 ids: the sampled token first, then K alternatives;
float32 logprobs: the sampled token is the most likely, ``-0.05``,
alternatives ``-1, -2, …``; int64 ranks ``[N]``, all 1). ``K = -1`` (the whole
vocabulary) is capped at :data:`MAX_SYNTHETIC_LOGPROBS` entries.

Each sampling span yields ``output_token_chunk_size`` tokens (MTP / spec-decode
shaped outputs). The step cost model sleeps ``step_time_ms`` plus
``prefill_token_cost_us`` per prompt token and ``decode_token_cost_us`` per
decode token, so benchmarks can model a GPU; everything 0 runs flat out.
"""

from __future__ import annotations

import sys
import time
import zlib
from array import array

from ecp.spec import LogprobsLists, Tensor

from .executor import StepBatch, StepResult

#: Token ids below this are never generated.
RESERVED_TOKEN_IDS = 16
#: ``logprobs=-1`` returns this many alternatives at most.
MAX_SYNTHETIC_LOGPROBS = 1024

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    # splitmix64 finaliser: cheap, well distributed, deterministic everywhere
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def request_key(seed: int, request_id: str, sampling_seed: int | None,
                greedy_prompt: list[int] | None = None) -> int:
    """The per-request stream base: the prompt for greedy requests (pass
    ``greedy_prompt``), else the sampling seed if set, else the request id."""
    if greedy_prompt is not None:
        data = b"p" + array("q", greedy_prompt).tobytes()
    elif sampling_seed is not None:
        data = f"s{sampling_seed}".encode()
    else:
        data = f"r{request_id}".encode()
    return _mix(zlib.crc32(data) ^ (len(data) << 32) ^ (seed * 0x100000001B3 & _MASK))


def synthetic_token(base: int, index: int, vocab_size: int, avoid: int | None = None) -> int:
    """Generated token ``index`` of the stream ``base`` (see :func:`request_key`)."""
    span = vocab_size - RESERVED_TOKEN_IDS
    salt = 0
    while True:
        tok = RESERVED_TOKEN_IDS + _mix(base ^ (index * 0x9E3779B97F4A7C15 + salt) & _MASK) % span
        if tok != avoid or span == 1:
            return tok
        salt += 1


def expected_tokens(request_id: str, n: int, *, seed: int = 0, sampling_seed: int | None = None,
                    greedy_prompt: list[int] | None = None, vocab_size: int = 32000,
                    eos_token_id: int | None = None, eos_every: int = 0) -> list[int]:
    """The first ``n`` tokens the synthetic executor generates for a request
    (before any stop condition cuts them); pass ``greedy_prompt`` for a greedy one."""
    base = request_key(seed, request_id, sampling_seed, greedy_prompt)
    out = []
    for i in range(n):
        if eos_every and (i + 1) % eos_every == 0 and eos_token_id is not None:
            out.append(eos_token_id)
        else:
            out.append(synthetic_token(base, i, vocab_size, eos_token_id))
    return out


class SyntheticExecutor:
    """Implements :class:`~ecp.reference.engine.executor.Executor` without a model."""

    dtype = "float32"

    def __init__(self, *, seed: int = 0, vocab_size: int = 32000, output_token_chunk_size: int = 1,
                 step_time_ms: float = 0.0, prefill_token_cost_us: float = 0.0,
                 decode_token_cost_us: float = 0.0, eos_every: int = 0, eos_token_id: int = 2) -> None:
        self.seed = seed
        self.vocab_size = vocab_size
        self.chunk = output_token_chunk_size
        self.step_time_s = step_time_ms / 1e3
        self.prefill_cost_s = prefill_token_cost_us / 1e6
        self.decode_cost_s = decode_token_cost_us / 1e6
        self.eos_every = eos_every
        self.eos_token_id = eos_token_id
        self._bases: dict[str, int] = {}
        self.num_blocks = 0
        self.steps = 0

    def initialize(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks

    def available_blocks(self, block_size: int, memory_utilization: float) -> int | None:
        return None

    def execute(self, batch: StepBatch) -> StepResult:
        result = StepResult()
        prefill = decode = 0
        for span in batch.spans:
            n = len(span.token_ids)
            if span.start_position < len(span.prompt_token_ids):
                prefill += n
            else:
                decode += n
            if not span.sample:
                continue
            base = self._bases.get(span.request_id)
            if base is None:
                sp = span.sampling_params
                base = self._bases[span.request_id] = request_key(
                    self.seed, span.request_id, span.seed, span.prompt_token_ids if sp.is_greedy else None)
            sp = span.sampling_params
            eos = sp._eos_token_id
            first = len(span.output_token_ids)
            toks = []
            for i in range(first, first + self.chunk):
                if self.eos_every and (i + 1) % self.eos_every == 0:
                    toks.append(eos if eos is not None else self.eos_token_id)
                else:
                    toks.append(synthetic_token(base, i, self.vocab_size, eos))
            result.sampled[span.request_id] = toks
            if sp.logprobs is not None:
                result.logprobs[span.request_id] = self._logprobs(base, first, toks, sp.logprobs)
        self.steps += 1
        cost = self.step_time_s + prefill * self.prefill_cost_s + decode * self.decode_cost_s
        if cost > 0:
            time.sleep(cost)  # models device time; the IO loop queues inputs meanwhile
        return result

    def _logprobs(self, base: int, first: int, toks: list[int], num: int) -> LogprobsLists:
        # never more alternatives than the vocabulary holds: the search below must end
        k = min(MAX_SYNTHETIC_LOGPROBS, self.vocab_size - 1) if num < 0 else min(num, self.vocab_size - 1)
        ids = array("i")
        lps = array("f")
        for row, tok in enumerate(toks):
            ids.append(tok)
            lps.append(-0.05)
            alt_base = _mix(base ^ 0xA17E)
            seen = {tok}
            j = 0
            while len(seen) < k + 1:
                alt = synthetic_token(alt_base, (first + row) * 4099 + j, self.vocab_size)
                j += 1
                if alt not in seen:
                    seen.add(alt)
                    ids.append(alt)
                    lps.append(-float(len(seen) - 1))
                if j > 8 * (k + 1):  # a tiny vocabulary: fill with what is left
                    for alt in range(self.vocab_size):
                        if len(seen) >= k + 1:
                            break
                        if alt not in seen:
                            seen.add(alt)
                            ids.append(alt)
                            lps.append(-float(len(seen) - 1))
                    break
        n = len(toks)
        width = len(ids) // n
        ranks = array("q", [1] * n)
        if sys.byteorder == "big":  # the wire carries little-endian buffers
            for a in (ids, lps, ranks):
                a.byteswap()
        return LogprobsLists(Tensor("<i4", (n, width), ids.tobytes()), Tensor("<f4", (n, width), lps.tobytes()),
                             Tensor("<i8", (n,), ranks.tobytes()), None)

    def release(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self._bases.pop(rid, None)
