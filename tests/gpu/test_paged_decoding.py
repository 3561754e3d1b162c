"""Paged incremental decoding gives the logits of a full-recompute forward pass."""

from __future__ import annotations

import pytest
import torch

from ecp.reference.engine.executor import StepBatch
from ecp.reference.engine.torch_executor import BlockTableError, InvalidTokenError

from .conftest import Sequence, dense_logits, make_executor

ATOL = 1e-4


def _prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 512, (n,), generator=g).tolist()


def _run(ex, *spans, freed=()):
    """Forward one step; per request the logits of every token of its span."""
    return ex.forward_logits(StepBatch(list(spans), list(freed)))


def _assert_matches_dense(ex, seq: Sequence, start: int, logits: torch.Tensor) -> None:
    expected = dense_logits(ex, seq.tokens[:start + logits.shape[0]])[start:]
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=1e-4)


def _greedy_next(logits: torch.Tensor) -> int:
    return int(logits[-1].argmax())


def test_chunked_prefill_and_decode_across_block_boundaries():
    ex = make_executor(block_size=4)
    # scattered, non-monotonic blocks: positions must follow the table, not the block ids
    seq = Sequence("a", _prompt(11, 1), blocks=[9, 2, 30, 5, 17, 40, 1])
    for upto in (5, 11):  # chunk 1 ends mid-block 2, chunk 2 ends mid-block 3
        start = seq.computed
        logits = _run(ex, seq.span(upto))["a"]
        _assert_matches_dense(ex, seq, start, logits)
    seq.output.append(_greedy_next(logits))
    for _ in range(14):  # decode through positions 11..24: four block boundaries
        start = seq.computed
        logits = _run(ex, seq.span())["a"]
        assert logits.shape[0] == 1
        _assert_matches_dense(ex, seq, start, logits)
        seq.output.append(_greedy_next(logits))


def test_mixed_prefill_and_decodes_in_one_forward():
    ex = make_executor(block_size=4)
    a = Sequence("a", _prompt(6, 2), blocks=[0, 1, 2, 3, 4])
    b = Sequence("b", _prompt(9, 3), blocks=[10, 11, 12, 13, 14])
    c = Sequence("c", _prompt(3, 4), blocks=[20, 21, 22, 23])
    la = _run(ex, a.span(), c.span())
    a.output.append(_greedy_next(la["a"]))
    c.output.append(_greedy_next(la["c"]))
    for i in range(5):
        # two decodes and (for the first two steps) a prefill chunk of b in the same forward
        spans = [a.span(), c.span()]
        starts = {"a": a.computed - 1, "c": c.computed - 1}
        if b.computed < len(b.prompt):
            starts["b"] = b.computed
            spans.append(b.span(min(b.computed + 5, len(b.prompt))))
        out = _run(ex, *spans)
        for seq in (a, b, c):
            if seq.request_id in out:
                _assert_matches_dense(ex, seq, starts[seq.request_id], out[seq.request_id])
        a.output.append(_greedy_next(out["a"]))
        c.output.append(_greedy_next(out["c"]))


def test_prefix_cache_hit_reuses_leading_full_blocks():
    ex = make_executor(block_size=4)
    shared = _prompt(8, 5)  # two full blocks
    a = Sequence("a", shared + _prompt(3, 6), blocks=[7, 3, 12])
    a.output.append(_greedy_next(_run(ex, a.span())["a"]))
    # b shares a's first two blocks: the scheduler hands them over already filled
    b = Sequence("b", shared + _prompt(5, 7), blocks=[7, 3, 25, 26, 27])
    b.computed = 8
    start = b.computed
    logits = _run(ex, b.span())["b"]
    _assert_matches_dense(ex, b, start, logits)
    b.output.append(_greedy_next(logits))
    for _ in range(4):
        start = b.computed
        logits = _run(ex, b.span())["b"]
        _assert_matches_dense(ex, b, start, logits)
        b.output.append(_greedy_next(logits))
    # a keeps decoding on its own (shared) blocks, untouched by b
    start = a.computed
    _assert_matches_dense(ex, a, start, _run(ex, a.span())["a"])


def test_preemption_recomputes_into_different_blocks():
    ex = make_executor(block_size=4)
    a = Sequence("a", _prompt(7, 8), blocks=[0, 1, 2, 3])
    logits = _run(ex, a.span())["a"]
    for _ in range(4):
        a.output.append(_greedy_next(logits))
        logits = _run(ex, a.span())["a"]
    a.output.append(_greedy_next(logits))
    # preempted: its blocks go to another request, which overwrites them
    other = Sequence("other", _prompt(16, 9), blocks=[2, 0, 3, 1])
    _run(ex, other.span(), freed=[0, 1, 2, 3])
    # resumed: prompt + outputs recomputed from position 0 into fresh blocks
    a.blocks = [40, 41, 42, 43, 44]
    a.computed = 0
    logits = _run(ex, a.span())["a"]
    _assert_matches_dense(ex, a, 0, logits)
    for _ in range(6):
        a.output.append(_greedy_next(logits))
        start = a.computed
        logits = _run(ex, a.span())["a"]
        _assert_matches_dense(ex, a, start, logits)


def test_execute_samples_the_greedy_token_of_the_dense_logits(executor):
    seq = Sequence("a", _prompt(10, 10), blocks=[5, 6, 7, 8, 9])
    for _ in range(6):
        result = executor.execute(StepBatch([seq.span()]))
        (token,) = result.sampled["a"]
        assert token == int(dense_logits(executor, seq.tokens)[-1].argmax())
        assert result.num_nans["a"] == 0
        seq.output.append(token)


def test_spans_without_sample_return_no_token(executor):
    seq = Sequence("a", _prompt(10, 11), blocks=[0, 1, 2])
    result = executor.execute(StepBatch([seq.span(6)]))
    assert result.sampled == {}
    result = executor.execute(StepBatch([seq.span()]))
    assert list(result.sampled) == ["a"]


def test_short_block_table_is_a_typed_error(executor):
    seq = Sequence("a", _prompt(9, 12), blocks=[0, 1])  # 9 tokens need 3 blocks of 4
    with pytest.raises(BlockTableError, match="cannot hold 9 positions"):
        executor.execute(StepBatch([seq.span()]))
    seq = Sequence("a", _prompt(3, 12), blocks=[64])  # the pool has blocks 0..63
    with pytest.raises(BlockTableError, match="outside the KV cache"):
        executor.execute(StepBatch([seq.span()]))


def test_out_of_vocabulary_token_is_rejected(executor):
    assert executor.check_prompt([1, 2, 3]) is None
    assert "outside the vocabulary" in executor.check_prompt([1, 512])
    seq = Sequence("a", [1, 512], blocks=[0])
    with pytest.raises(InvalidTokenError, match="'a'"):
        executor.execute(StepBatch([seq.span()]))


def test_bfloat16_cache_tracks_the_dense_forward():
    from ecp.reference.engine.torch_executor import TorchExecutor

    from .conftest import DEVICE

    ex = TorchExecutor("random:tiny", DEVICE, 0, "bfloat16")
    ex.initialize(16, 4)
    assert ex.cache.tensor.dtype == torch.bfloat16 and ex.dtype == "bfloat16"
    seq = Sequence("a", _prompt(9, 13), blocks=[3, 0, 7, 9])
    logits = _run(ex, seq.span())["a"]
    for _ in range(4):
        seq.output.append(_greedy_next(logits))
        start = seq.computed
        logits = _run(ex, seq.span())["a"]
        expected = dense_logits(ex, seq.tokens)[start:]
        torch.testing.assert_close(logits, expected, atol=0.15, rtol=0.05)


def test_available_blocks_sizes_the_pool_from_free_device_memory(monkeypatch, executor):
    gib = 1 << 30
    monkeypatch.setattr(executor, "device", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (60 * gib, 80 * gib))
    per_block = executor.block_bytes(16)
    # tiny, float32: 2 (K,V) * 2 layers * 16 tokens * 2 kv heads * 16 dims * 4 bytes
    assert per_block == 2 * 2 * 16 * 2 * 16 * 4
    # 0.9 * 80 GiB budget, 20 GiB already used, reserve max(1 GiB, 5 % of 80 GiB) = 4 GiB
    assert executor.available_blocks(16, 0.9) == int((0.9 * 80 * gib - 20 * gib - 4 * gib) // per_block)
    assert executor.available_blocks(16, 0.2) == 0
