"""Sampling knobs, seeds and logprobs of the torch executor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ecp.reference.engine.executor import StepBatch
from ecp.reference.engine.torch_executor.sampler import Sampler, SamplingRow
from ecp.spec import EngineCoreOutput, EngineCoreOutputs, SamplingParams, decode_outputs, encode_outputs

from .conftest import DEVICE, Sequence, dense_logits, make_executor

V = 32


def _sampler(seed: int = 0) -> Sampler:
    return Sampler(V, generator=torch.Generator(device=DEVICE).manual_seed(seed))


def _logits(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, V, generator=g) * 2).to(DEVICE)


def _row(prompt=(), output=(), **params) -> SamplingRow:
    return SamplingRow(SamplingParams(**params), list(prompt), list(output))


def _dist(sampler: Sampler, logits: torch.Tensor, row: SamplingRow) -> torch.Tensor:
    return torch.softmax(sampler.process(logits, [row]), dim=-1)[0]


def _draws(sampler: Sampler, logits: torch.Tensor, row: SamplingRow, n: int = 200) -> list[int]:
    return sampler.sample(logits.expand(n, V).contiguous(), [row] * n).tokens


# -- filters -------------------------------------------------------------------------
def test_top_k_one_equals_greedy():
    s, logits = _sampler(), _logits(1)
    greedy = s.sample(logits, [_row(temperature=0.0)]).tokens[0]
    assert greedy == int(logits.argmax())
    assert set(_draws(s, logits, _row(temperature=1.5, top_k=1))) == {greedy}


def test_top_k_keeps_exactly_the_k_best():
    s, logits = _sampler(), _logits(2)
    probs = _dist(s, logits, _row(top_k=5))
    kept = set(torch.nonzero(probs > 0).flatten().tolist())
    assert kept == set(logits[0].topk(5).indices.tolist())
    torch.testing.assert_close(probs.sum(), torch.tensor(1.0, device=probs.device))
    assert set(_draws(s, logits, _row(top_k=5))) <= kept


def test_top_p_keeps_the_smallest_nucleus():
    s, logits = _sampler(), _logits(3)
    full = torch.softmax(logits[0], dim=-1)
    order = full.argsort(descending=True)
    cum = full[order].cumsum(0)
    need = int((cum < 0.6).sum()) + 1  # the smallest prefix reaching 0.6
    probs = _dist(s, logits, _row(top_p=0.6))
    assert set(torch.nonzero(probs > 0).flatten().tolist()) == set(order[:need].tolist())
    # renormalised, same ratios as before
    kept = order[:need]
    torch.testing.assert_close(probs[kept], full[kept] / full[kept].sum())


def test_min_p_drops_tokens_below_the_scaled_top_probability():
    s, logits = _sampler(), _logits(4)
    full = torch.softmax(logits[0], dim=-1)
    probs = _dist(s, logits, _row(min_p=0.2))
    assert set(torch.nonzero(probs > 0).flatten().tolist()) == set(
        torch.nonzero(full >= 0.2 * full.max()).flatten().tolist())


def test_temperature_flattens_and_sharpens():
    s, logits = _sampler(), _logits(5)
    base = _dist(s, logits, _row(temperature=1.0))
    hot = _dist(s, logits, _row(temperature=2.0))
    cold = _dist(s, logits, _row(temperature=0.5))
    top = int(logits.argmax())
    assert cold[top] > base[top] > hot[top]
    torch.testing.assert_close(hot, torch.softmax(logits[0] / 2.0, dim=-1))


# -- penalties -------------------------------------------------------------------------
def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    s = _sampler()
    logits = torch.zeros(1, V, device=DEVICE)
    logits[0, 4], logits[0, 5], logits[0, 6] = 3.0, -2.0, 3.0
    out = s.process(logits, [_row(prompt=[4], output=[5], repetition_penalty=2.0, temperature=0.0)])[0]
    assert out[4].item() == pytest.approx(1.5)  # in the prompt, positive: divided
    assert out[5].item() == pytest.approx(-4.0)  # in the output, negative: multiplied
    assert out[6].item() == pytest.approx(3.0)  # never seen: untouched


def test_frequency_and_presence_penalties_lower_repeated_output_tokens():
    s, logits = _sampler(), _logits(6)
    row = _row(prompt=[9], output=[7, 7, 7, 8], frequency_penalty=0.5, presence_penalty=0.25, temperature=0.0)
    out = s.process(logits, [row])[0]
    base = logits[0]
    assert out[7].item() == pytest.approx(base[7].item() - 3 * 0.5 - 0.25, abs=1e-5)
    assert out[8].item() == pytest.approx(base[8].item() - 0.5 - 0.25, abs=1e-5)
    # prompt tokens are not output tokens: no frequency/presence penalty
    assert out[9].item() == pytest.approx(base[9].item(), abs=1e-6)


def test_penalties_apply_per_row():
    s, logits = _sampler(), _logits(7).expand(2, V).contiguous()
    rows = [_row(output=[3], presence_penalty=1.0, temperature=0.0), _row(output=[3], temperature=0.0)]
    out = s.process(logits, rows)
    assert out[0, 3].item() == pytest.approx(logits[0, 3].item() - 1.0, abs=1e-5)
    assert out[1, 3].item() == pytest.approx(logits[1, 3].item(), abs=1e-6)


# -- constraints ---------------------------------------------------------------------
def test_min_tokens_masks_eos_and_stop_tokens_until_reached():
    s = _sampler()
    logits = torch.zeros(1, V, device=DEVICE)
    logits[0, 2] = 10.0  # eos
    logits[0, 11] = 9.0  # a stop token
    row = _row(output=[5], min_tokens=2, stop_token_ids=[11], temperature=0.0, _eos_token_id=2)
    tok = s.sample(logits, [row]).tokens[0]
    assert tok not in (2, 11)
    row_done = _row(output=[5, 6], min_tokens=2, stop_token_ids=[11], temperature=0.0, _eos_token_id=2)
    assert s.sample(logits, [row_done]).tokens == [2]
    ignoring = _row(output=[5], min_tokens=2, stop_token_ids=[11], temperature=0.0, _eos_token_id=2,
                    ignore_eos=True)
    assert s.sample(logits, [ignoring]).tokens == [2]  # EOS is no stop token then


def test_allowed_token_ids_logit_bias_and_bad_words():
    s, logits = _sampler(), _logits(8)
    probs = _dist(s, logits, _row(allowed_token_ids=[3, 17, 20]))
    assert set(torch.nonzero(probs > 0).flatten().tolist()) == {3, 17, 20}
    biased = s.process(logits, [_row(logit_bias={12: 100.0}, temperature=0.0)])
    assert int(biased.argmax()) == 12
    greedy = int(logits.argmax())
    bad = _row(output=[4], temperature=0.0, _bad_words_token_ids=[[4, greedy]])
    assert s.sample(logits, [bad]).tokens[0] != greedy
    not_matching = _row(output=[5], temperature=0.0, _bad_words_token_ids=[[4, greedy]])
    assert s.sample(logits, [not_matching]).tokens[0] == greedy


# -- seeds -----------------------------------------------------------------------------
def _generate(ex, params: SamplingParams, steps: int = 8, request_id: str = "r") -> list[int]:
    seq = Sequence(request_id, [5, 9, 14, 3, 77], blocks=list(range(8)), params=params)
    for _ in range(steps):
        seq.output.extend(ex.execute(StepBatch([seq.span()])).sampled[request_id])
    return seq.output


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    a = _generate(make_executor(seed=1), SamplingParams(temperature=1.0, seed=42))
    b = _generate(make_executor(seed=2), SamplingParams(temperature=1.0, seed=42))
    c = _generate(make_executor(seed=1), SamplingParams(temperature=1.0, seed=43))
    assert a == b  # same request seed, different engine seeds
    assert a != c


def test_unseeded_sampling_follows_the_engine_seed():
    params = SamplingParams(temperature=1.0)
    assert _generate(make_executor(seed=5), params) == _generate(make_executor(seed=5), params)
    assert _generate(make_executor(seed=5), params) != _generate(make_executor(seed=6), params)


def test_seeded_request_is_unaffected_by_batch_neighbours():
    ex = make_executor()
    alone = _generate(ex, SamplingParams(temperature=1.0, seed=7), request_id="x")
    ex.release(["x"])
    seq = Sequence("x", [5, 9, 14, 3, 77], blocks=list(range(8)), params=SamplingParams(temperature=1.0, seed=7))
    other = Sequence("y", [1, 2, 3], blocks=list(range(10, 16)), params=SamplingParams(temperature=1.0))
    for _ in range(8):
        res = ex.execute(StepBatch([other.span(), seq.span()]))
        seq.output.extend(res.sampled["x"])
        other.output.extend(res.sampled["y"])
    assert seq.output == alone


# -- logprobs --------------------------------------------------------------------------
def test_logprobs_match_log_softmax_of_the_logits(executor):
    seq = Sequence("a", [5, 9, 14, 3, 77, 100], blocks=list(range(6)),
                   params=SamplingParams(temperature=1.0, seed=3, logprobs=4))
    for _ in range(5):
        res = executor.execute(StepBatch([seq.span()]))
        token = res.sampled["a"][0]
        lp = res.logprobs["a"]
        ids = lp.logprob_token_ids.to_numpy()
        values = lp.logprobs.to_numpy()
        rank = lp.sampled_token_ranks.to_numpy()
        assert ids.shape == values.shape == (1, 5) and rank.shape == (1,)
        expected = torch.log_softmax(dense_logits(executor, seq.tokens)[-1], dim=-1).cpu().numpy()
        assert ids[0, 0] == token
        np.testing.assert_allclose(values[0], expected[ids[0]], atol=1e-4)
        top4 = np.argsort(-expected)[:4]
        assert ids[0, 1:].tolist() == top4.tolist()
        assert rank[0] == int((expected >= expected[token]).sum())
        seq.output.append(token)


def test_prompt_logprobs_over_chunked_prefill(executor):
    prompt = [5, 9, 14, 3, 77, 100, 42, 8, 250, 31, 6]
    seq = Sequence("a", prompt, blocks=list(range(3)), params=SamplingParams(temperature=0.0, prompt_logprobs=2))
    first = executor.execute(StepBatch([seq.span(4)]))
    assert first.prompt_logprobs == {}  # sent once, when the prompt is complete
    res = executor.execute(StepBatch([seq.span()]))
    plp = res.prompt_logprobs["a"]
    ids, values = plp.logprob_token_ids.to_numpy(), plp.logprobs.to_numpy()
    ranks = plp.selected_token_ranks.to_numpy()
    assert ids.shape == (len(prompt) - 1, 3) and ranks.shape == (len(prompt) - 1,)
    expected = torch.log_softmax(dense_logits(executor, prompt), dim=-1).cpu().numpy()
    for i in range(len(prompt) - 1):
        assert ids[i, 0] == prompt[i + 1]
        np.testing.assert_allclose(values[i], expected[i, ids[i]], atol=1e-4)
        assert ranks[i] == int((expected[i] >= expected[i, prompt[i + 1]]).sum())
    assert plp.logprob_token_ids.dtype == "int32" and plp.logprobs.dtype == "float32"


def test_full_vocab_logprobs_travel_in_aux_frames(executor):
    seq = Sequence("a", [5, 9, 14], blocks=[0], params=SamplingParams(temperature=0.0, logprobs=-1))
    res = executor.execute(StepBatch([seq.span()]))
    lp = res.logprobs["a"]
    assert lp.logprobs.shape == (1, executor.vocab_size + 1)
    frames = encode_outputs(EngineCoreOutputs(outputs=[EngineCoreOutput("a", res.sampled["a"], new_logprobs=lp)]))
    assert len(frames) > 1  # >= 256-byte buffers leave the payload frame
    decoded = decode_outputs(frames)
    assert decoded.outputs[0].new_logprobs == lp
    np.testing.assert_allclose(np.exp(lp.logprobs.to_numpy()[0, 1:]).sum(), 1.0, rtol=1e-4)


def test_prompt_logprobs_are_sent_once_even_after_preemption(executor):
    prompt = [5, 9, 14, 3, 77]
    seq = Sequence("a", prompt, blocks=[0, 1, 2], params=SamplingParams(temperature=0.0, prompt_logprobs=0))
    res = executor.execute(StepBatch([seq.span()]))
    assert res.prompt_logprobs["a"].logprobs.shape == (4, 1)
    seq.output.extend(res.sampled["a"])
    seq.blocks, seq.computed = [5, 6, 7], 0  # preempted and recomputed from position 0
    res = executor.execute(StepBatch([seq.span()]))
    assert res.prompt_logprobs == {} and list(res.sampled) == ["a"]
    executor.release(["a"])  # a new request reusing the id gets them again
    fresh = Sequence("a", prompt, blocks=[8, 9], params=SamplingParams(temperature=0.0, prompt_logprobs=0))
    assert executor.execute(StepBatch([fresh.span()])).prompt_logprobs["a"].logprobs.shape == (4, 1)
