"""Sampling on the device, with vLLM's semantics and order.

Per row (one request about to get a token), from the raw float32 logits:

1. logprobs, when asked, are ``log_softmax`` of the *raw* logits (vLLM's default
   ``raw_logprobs`` mode), so the knobs below never change reported logprobs;
2. hard constraints: ``allowed_token_ids``, ``logit_bias``, bad words
   (``_bad_words_token_ids``), and stop tokens masked while fewer than
   ``min_tokens`` tokens were generated (``stop_token_ids`` and the request's
   ``_eos_token_id`` unless ``ignore_eos``);
3. penalties: repetition (prompt and output tokens: positive logits divided,
   negative multiplied), frequency (minus ``f * count`` in the output) and
   presence (minus ``p`` once a token occurred in the output);
4. greedy rows (``temperature < 1e-5``) take the argmax here; the others are
   divided by the temperature, then min-p, top-k and top-p filter them;
5. random rows draw with the exponential-race trick (``argmax(p / q)``, ``q ~
   Exp(1)``), which needs one draw per vocabulary entry from the row's own
   ``torch.Generator`` when the request has a seed, else from the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ecp.spec import LogprobsLists, SamplingParams, Tensor

GREEDY_EPSILON = 1e-5


@dataclass
class SamplingRow:
    """One request to sample for, with the history penalties look at."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    #: the request's own generator (seeded requests), else None
    generator: torch.Generator | None = None


@dataclass
class SamplerOutput:
    tokens: list[int]
    #: per row: the LogprobsLists of the sampled token, or None when not asked
    logprobs: list[LogprobsLists | None] = field(default_factory=list)


def wants_logprobs(params: SamplingParams) -> bool:
    return params.logprobs is not None


class Sampler:
    def __init__(self, vocab_size: int, generator: torch.Generator) -> None:
        self.vocab_size = vocab_size
        self.generator = generator

    # -- the whole step ----------------------------------------------------------
    def sample(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        """``logits`` ``[B, vocab]`` float32 -> one token per row (and logprobs)."""
        raw_logprobs = None
        if any(wants_logprobs(r.params) for r in rows):
            raw_logprobs = torch.log_softmax(logits, dim=-1)
        processed = self.process(logits, rows)
        tokens = self._draw(processed, rows)
        token_list = tokens.tolist()
        out = SamplerOutput(tokens=token_list)
        for i, row in enumerate(rows):
            out.logprobs.append(
                sampled_logprobs(raw_logprobs[i], token_list[i], row.params.logprobs)
                if raw_logprobs is not None and wants_logprobs(row.params) else None)
        return out

    def process(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Steps 2-4 of the module docstring: the logits the draw sees.

        Greedy rows come back penalised but otherwise untouched (their argmax
        is the token); random rows come back tempered and filtered (-inf =
        excluded), so ``softmax`` of a row is its sampling distribution.
        """
        logits = logits.clone()
        for i, row in enumerate(rows):
            self._apply_constraints(logits[i], row)
        logits = apply_penalties(logits, rows)
        device = logits.device
        temps = torch.tensor([_temperature(r.params) for r in rows], device=device, dtype=logits.dtype)
        logits = logits / temps[:, None]
        random_rows = [r for r in rows if not r.params.is_greedy]
        if not random_rows:
            return logits
        min_p = torch.tensor([0.0 if r.params.is_greedy else r.params.min_p for r in rows], device=device)
        if bool((min_p > 0).any()):
            logits = apply_min_p(logits, min_p)
        top_k = torch.tensor([self._top_k(r.params) for r in rows], device=device)
        top_p = torch.tensor([1.0 if r.params.is_greedy else r.params.top_p for r in rows], device=device)
        if bool((top_k < self.vocab_size).any()) or bool((top_p < 1.0).any()):
            logits = apply_top_k_top_p(logits, top_k, top_p)
        return logits

    # -- pieces --------------------------------------------------------------------
    def _top_k(self, params: SamplingParams) -> int:
        k = params.top_k
        if params.is_greedy or k <= 0 or k >= self.vocab_size:
            return self.vocab_size
        return k

    def _apply_constraints(self, row_logits: torch.Tensor, row: SamplingRow) -> None:
        p = row.params
        V = self.vocab_size
        if p.allowed_token_ids:
            allowed = torch.tensor([t for t in p.allowed_token_ids if 0 <= t < V], dtype=torch.long,
                                   device=row_logits.device)
            keep = row_logits[allowed].clone()
            row_logits.fill_(float("-inf"))
            row_logits[allowed] = keep
        if p.logit_bias:
            for token, bias in p.logit_bias.items():
                if 0 <= int(token) < V:
                    row_logits[int(token)] += float(bias)
        for word in p._bad_words_token_ids or []:
            if not word:
                continue
            prefix = word[:-1]
            if not prefix or row.output_token_ids[-len(prefix):] == prefix:
                if 0 <= word[-1] < V:
                    row_logits[word[-1]] = float("-inf")
        if len(row.output_token_ids) < p.min_tokens:
            # the request's own stop set, as the engine's stop check sees it
            stops = set(p.all_stop_token_ids)
            if p.eos_token_id is not None and not p.ignore_eos:
                stops.add(p.eos_token_id)
            for t in stops:
                if 0 <= t < V:
                    row_logits[t] = float("-inf")

    def _draw(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        tokens = logits.argmax(dim=-1)
        random_idx = [i for i, r in enumerate(rows) if not r.params.is_greedy]
        if not random_idx:
            return tokens
        idx = torch.tensor(random_idx, device=logits.device)
        probs = torch.softmax(logits[idx], dim=-1)
        q = torch.empty_like(probs)
        unseeded = [j for j, i in enumerate(random_idx) if rows[i].generator is None]
        if unseeded:
            q[unseeded] = torch.empty((len(unseeded), probs.shape[1]), device=probs.device,
                                      dtype=probs.dtype).exponential_(generator=self.generator)
        for j, i in enumerate(random_idx):
            if rows[i].generator is not None:
                q[j].exponential_(generator=rows[i].generator)
        tokens[idx] = (probs / q).argmax(dim=-1)
        return tokens


def _temperature(params: SamplingParams) -> float:
    return 1.0 if params.is_greedy else params.temperature


def _padded(ids: list[list[int]], pad: int, device: torch.device) -> torch.Tensor:
    width = max((len(x) for x in ids), default=0) or 1
    out = torch.full((len(ids), width), pad, dtype=torch.long)
    for i, x in enumerate(ids):
        if x:
            out[i, :len(x)] = torch.tensor(x, dtype=torch.long)
    return out.to(device)


def apply_penalties(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    """Repetition / frequency / presence penalties on the rows that set any."""
    idx = [i for i, r in enumerate(rows) if r.params.repetition_penalty != 1.0
           or r.params.frequency_penalty != 0.0 or r.params.presence_penalty != 0.0]
    if not idx:
        return logits
    device = logits.device
    B, V = len(idx), logits.shape[1]
    sel = [rows[i] for i in idx]
    # pad with id V into one spare column, dropped afterwards
    outputs = _padded([r.output_token_ids for r in sel], V, device)
    counts = torch.zeros(B, V + 1, device=device, dtype=logits.dtype)
    counts.scatter_add_(1, outputs, torch.ones_like(outputs, dtype=logits.dtype))
    counts = counts[:, :V]
    prompts = _padded([r.prompt_token_ids for r in sel], V, device)
    in_prompt = torch.zeros(B, V + 1, device=device, dtype=torch.bool).scatter_(1, prompts, True)[:, :V]
    rep = torch.tensor([r.params.repetition_penalty for r in sel], device=device, dtype=logits.dtype)[:, None]
    freq = torch.tensor([r.params.frequency_penalty for r in sel], device=device, dtype=logits.dtype)[:, None]
    pres = torch.tensor([r.params.presence_penalty for r in sel], device=device, dtype=logits.dtype)[:, None]
    part = logits[idx]
    seen = in_prompt | (counts > 0)
    part = torch.where(seen, torch.where(part > 0, part / rep, part * rep), part)
    part = part - freq * counts - pres * (counts > 0).to(part.dtype)
    logits = logits.clone()
    logits[idx] = part
    return logits


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Drop tokens whose probability is below ``min_p`` times the row's top probability."""
    probs = torch.softmax(logits, dim=-1)
    threshold = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
    return logits.masked_fill(probs < threshold, float("-inf"))


def apply_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep each row's ``top_k`` best tokens, then the smallest prefix of them whose
    probability reaches ``top_p`` (the best token always survives)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    rank = torch.arange(logits.shape[1], device=logits.device)[None, :]
    sorted_logits = sorted_logits.masked_fill(rank >= top_k[:, None], float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop = (mass_before >= top_p[:, None]) & (rank > 0)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(1, order, sorted_logits)


def sampled_logprobs(row_logprobs: torch.Tensor, token: int, num: int) -> LogprobsLists:
    """vLLM's ``[1, K+1]`` layout: the sampled token first, then the top ``num`` (-1 = all).

    Rank is 1-based: the number of tokens at least as likely as the sampled one.
    """
    ids, lps, rank = top_logprobs(row_logprobs[None, :], torch.tensor([token], device=row_logprobs.device), num)
    return LogprobsLists(Tensor.from_numpy(ids), Tensor.from_numpy(lps), Tensor.from_numpy(rank), None)


def top_logprobs(logprobs: torch.Tensor, tokens: torch.Tensor, num: int):
    """numpy ``(ids int32 [N, K+1], logprobs float32 [N, K+1], ranks int64 [N])``."""
    k = logprobs.shape[1] if num == -1 else min(num, logprobs.shape[1])
    chosen = logprobs.gather(1, tokens[:, None])
    ranks = (logprobs >= chosen).sum(dim=-1)
    top_lp, top_ids = logprobs.topk(k, dim=-1) if k > 0 else (logprobs[:, :0], tokens[:, None][:, :0])
    ids = torch.cat((tokens[:, None], top_ids), dim=1).to(torch.int32)
    lps = torch.cat((chosen, top_lp), dim=1).float()
    return ids.cpu().numpy(), lps.cpu().numpy(), ranks.to(torch.int64).cpu().numpy()
