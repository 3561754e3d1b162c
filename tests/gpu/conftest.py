"""Helpers for the torch executor tests: a tiny model on CPU and a span builder."""

from __future__ import annotations

import os

import pytest

import torch

from ecp.reference.engine.executor import ScheduledSpan, StepBatch
from ecp.spec import SamplingParams

#: ECP_TEST_DEVICE=cuda runs the same tests on a GPU
DEVICE = os.environ.get("ECP_TEST_DEVICE", "cpu")
GREEDY = SamplingParams(temperature=0.0)


def make_executor(num_blocks: int = 64, block_size: int = 4, seed: int = 0, model: str = "random:tiny"):
    from ecp.reference.engine.torch_executor import TorchExecutor

    ex = TorchExecutor(model, DEVICE, seed, "float32")
    ex.initialize(num_blocks, block_size)
    return ex


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core box torch's
    spin-waiting workers slow each op by an order of magnitude (engines run
    in-process in the conformance test, so this covers them too)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def executor():
    return make_executor()


class Sequence:
    """One request's token history and block table, as a scheduler would keep them."""

    def __init__(self, request_id: str, prompt: list[int], blocks: list[int],
                 params: SamplingParams = GREEDY) -> None:
        self.request_id = request_id
        self.prompt = list(prompt)
        self.output: list[int] = []
        self.blocks = list(blocks)
        self.params = params
        self.computed = 0  # positions already in the KV cache

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def span(self, upto: int | None = None) -> ScheduledSpan:
        """The next span: tokens ``computed .. upto-1`` (default: to the end)."""
        end = len(self.tokens) if upto is None else upto
        span = ScheduledSpan(
            request_id=self.request_id, token_ids=self.tokens[self.computed:end],
            start_position=self.computed, block_table=list(self.blocks), sample=end == len(self.tokens),
            sampling_params=self.params, prompt_token_ids=list(self.prompt),
            output_token_ids=list(self.output), is_first_chunk=self.computed == 0, seed=self.params.seed)
        self.computed = end
        return span


def step(ex, *spans, freed=()):
    return ex.execute(StepBatch(list(spans), list(freed)))


def dense_logits(ex, tokens: list[int]):
    """The reference: a full-recompute causal forward with no cache."""
    ids = torch.tensor(tokens, device=ex.device)
    return ex.model.compute_logits(ex.model.forward_dense(ids))
