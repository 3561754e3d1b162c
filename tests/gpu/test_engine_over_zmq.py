"""End to end: ``ecp engine --executor torch --device cpu --model random:tiny`` serves
requests over ZeroMQ to the reference client, with the model's real outputs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import torch

from ecp.reference.client import ClientConfig, EngineCoreClient
from ecp.spec import EngineCoreRequest, FinishReason, RequestOutputKind, SamplingParams

from .conftest import DEVICE, dense_logits, make_executor

BLOCK_SIZE = 16
TIMEOUT_S = 60.0


def _request(rid: str, prompt: list[int], **sampling) -> EngineCoreRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("ignore_eos", True)
    sp = SamplingParams(output_kind=RequestOutputKind.DELTA, **sampling)
    return EngineCoreRequest(rid, prompt, None, sp, None, time.time(), None, None, None)


async def _collect(client: EngineCoreClient, request: EngineCoreRequest) -> list:
    stream = await client.add(request)
    return [o async for o in stream]


def _tokens(outputs) -> list[int]:
    return [t for o in outputs for t in o.new_token_ids]


def _greedy(oracle, prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(dense_logits(oracle, tokens)[-1].argmax()))
    return tokens[len(prompt):]


@pytest.fixture
def engine_client():
    """A reference client bound to an ipc handshake, and one torch engine process."""
    tmp = tempfile.TemporaryDirectory(prefix="ecp-gpu-")
    procs: list[subprocess.Popen] = []

    async def start() -> EngineCoreClient:
        client = EngineCoreClient(ClientConfig(handshake_address=f"ipc://{tmp.name}/hs",
                                               handshake_timeout_s=TIMEOUT_S, ready_timeout_s=TIMEOUT_S))
        await client.bind()
        env = dict(os.environ, OMP_NUM_THREADS="1")  # a shared 2-core CI box: no spin-waiting threads
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", client.handshake_address,
             "--executor", "torch", "--device", DEVICE, "--model", "random:tiny", "--dtype", "float32",
             "--max-model-len", "256", "--num-gpu-blocks", "64", "--block-size", str(BLOCK_SIZE),
             "--max-num-batched-tokens", "40", "--handshake-timeout-s", str(TIMEOUT_S)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        try:
            await asyncio.wait_for(client.wait_ready(), TIMEOUT_S)
        except BaseException:
            await client.shutdown()
            raise
        return client

    try:
        yield start
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
            p.stderr.close()
        tmp.cleanup()


def test_engine_serves_the_model_over_zmq(engine_client):
    oracle = make_executor()  # same weights as the engine's random:tiny
    prompts = {
        "a": [5, 9, 14, 3, 77, 100],
        "b": list(range(20, 57)),  # 37 tokens: chunked over two steps (40-token budget)
        "c": [300, 301],
    }

    async def main() -> None:
        client = await engine_client()
        try:
            ready = client.ready_responses[0]
            assert (ready.dtype, ready.num_gpu_blocks, ready.block_size) == ("float32", 64, BLOCK_SIZE)
            assert ready.max_model_len == 256

            # three requests at once: prefill chunks and decodes share forwards
            results = await asyncio.wait_for(asyncio.gather(
                *(_collect(client, _request(rid, p, max_tokens=6)) for rid, p in prompts.items())), TIMEOUT_S)
            for (rid, prompt), outs in zip(prompts.items(), results):
                assert outs[-1].finish_reason == FinishReason.LENGTH
                assert _tokens(outs) == _greedy(oracle, prompt, 6), rid

            # a prefix-cache hit: same first two full blocks as "b", then new tokens
            shared = prompts["b"][:32] + [400, 401, 402]
            outs = await asyncio.wait_for(_collect(client, _request("d", shared, max_tokens=4)), TIMEOUT_S)
            assert _tokens(outs) == _greedy(oracle, shared, 4)

            # seeded sampling: the same seed gives the same tokens, with logprobs
            seeded = [_request(f"s{i}", prompts["a"], temperature=1.0, seed=1234, max_tokens=5, logprobs=2)
                      for i in range(2)]
            first, second = [await asyncio.wait_for(_collect(client, r), TIMEOUT_S) for r in seeded]
            assert _tokens(first) == _tokens(second)
            tokens = list(prompts["a"])
            for out in first:
                for tok in out.new_token_ids:
                    lp = out.new_logprobs
                    ids, values = lp.logprob_token_ids.to_numpy(), lp.logprobs.to_numpy()
                    assert ids[0, 0] == tok and ids.shape == (1, 3)
                    expected = torch.log_softmax(dense_logits(oracle, tokens)[-1], -1).cpu().numpy()
                    np.testing.assert_allclose(values[0], expected[ids[0]], atol=1e-4)
                    tokens.append(tok)

            # prompt logprobs ride on the first output, complete, after a prefix-cache bypass
            outs = await asyncio.wait_for(
                _collect(client, _request("p", prompts["b"], max_tokens=1, prompt_logprobs=1)), TIMEOUT_S)
            plp = outs[0].new_prompt_logprobs_tensors
            ids, values = plp.logprob_token_ids.to_numpy(), plp.logprobs.to_numpy()
            assert ids.shape == (len(prompts["b"]) - 1, 2)
            assert ids[:, 0].tolist() == prompts["b"][1:]
            expected = torch.log_softmax(dense_logits(oracle, prompts["b"]), -1).cpu().numpy()
            np.testing.assert_allclose(values[:, 0], expected[np.arange(len(ids)), ids[:, 0]], atol=1e-4)

            # outside the model's 512-token vocabulary: an ERROR output, the engine keeps serving
            outs = await asyncio.wait_for(_collect(client, _request("bad", [1, 2, 600])), TIMEOUT_S)
            assert outs[-1].finish_reason == FinishReason.ERROR
            assert outs[-1].error.code == "invalid_request"
            outs = await asyncio.wait_for(_collect(client, _request("after", prompts["c"], max_tokens=2)), TIMEOUT_S)
            assert _tokens(outs) == _greedy(oracle, prompts["c"], 2)
        finally:
            await client.shutdown()

    asyncio.run(main())
