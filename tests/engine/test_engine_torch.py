"""The engine drives the torch executor (``--executor torch``) through the same interface."""

from __future__ import annotations

import pytest

from engine_rawfront import make_request

from ecp.spec import FinishReason


@pytest.mark.torch
def test_torch_executor_serves_requests(rig):
    fe, _ = rig.start(1, executor="torch", model="random:tiny", device="cpu", dtype="float32",
                      max_model_len=128, num_gpu_blocks=64, block_size=16)
    rr = fe.ready_payloads[(0, 0)]
    assert rr.dtype == "float32"
    fe.add(0, make_request("t1", [1, 2, 3, 4, 5], max_tokens=6, temperature=0.0))
    fe.add(0, make_request("t2", [1, 2, 3, 4, 5], max_tokens=6, temperature=0.0, logprobs=2))
    fe.add(0, make_request("big", [600], max_tokens=2))  # outside the tiny model's 512-token vocabulary
    done = fe.wait_finished(["t1", "t2", "big"], timeout=60)
    assert done["t1"].finish_reason == FinishReason.LENGTH and len(fe.tokens("t1")) == 6
    assert fe.tokens("t1") == fe.tokens("t2")  # greedy is deterministic; the shared prefix is reused
    assert all(0 <= t < 512 for t in fe.tokens("t1"))
    assert all(o.new_logprobs is not None for o in fe.outputs_for("t2"))
    assert done["big"].finish_reason == FinishReason.ERROR and done["big"].error.code == "invalid_request"
