"""Parity of the torch executor's decoder with Hugging Face ``transformers``.

Not part of the test suite (``transformers`` is no dependency of the project):
a one-off check that the decoder written for this engine computes what the
reference Llama / Qwen2 implementations compute. For each variant it writes a
random tiny checkpoint in HF layout (2 shards), loads it with
``AutoModelForCausalLM`` and with ``TorchExecutor``, runs 150 tokens through
the executor *paged* (two prefill chunks, then 50 single-token decode steps,
on a reversed block table) and compares every position's logits with the
single dense HF forward.

    pip install transformers && python -m lab.gpu_hf_parity [--device cuda]

Exit 0 when every variant is within tolerance, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path


def variants():
    from ecp.reference.engine.torch_executor.config import PRESETS

    tiny = replace(PRESETS["tiny"], random_seed=None)
    return {
        "qwen2 (qkv bias, tied)": tiny,
        "llama (untied)": replace(tiny, tie_word_embeddings=False, qkv_bias=False),
        "llama3 rope scaling": replace(tiny, qkv_bias=False, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}),
    }


def paged_logits(executor, tokens: list[int], prefill_chunks: list[int]):
    import torch

    from ecp.reference.engine.executor import ScheduledSpan, StepBatch
    from ecp.spec import SamplingParams

    params = SamplingParams(temperature=0.0)
    blocks = list(range(executor.cache.num_blocks - 1, -1, -1))
    out, pos = [], 0
    for end in prefill_chunks + list(range(prefill_chunks[-1] + 1, len(tokens) + 1)):
        span = ScheduledSpan("r", tokens[pos:end], pos, blocks, False, params, tokens[:prefill_chunks[-1]], [])
        out.append(executor.forward_logits(StepBatch([span]))["r"])
        pos = end
    return torch.cat(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tokens", type=int, default=150)
    p.add_argument("--atol", type=float, default=1e-4)
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from ecp.reference.engine.torch_executor import TorchExecutor
    from ecp.reference.engine.torch_executor.model import CausalLM
    from ecp.reference.engine.torch_executor.weights import save_checkpoint

    tokens = torch.randint(0, 512, (args.tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    ok = True
    for name, cfg in variants().items():
        with tempfile.TemporaryDirectory() as d:
            source = CausalLM(cfg)
            source.init_random_(3)
            save_checkpoint(source, Path(d), shards=2)
            hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(args.device).eval()
            with torch.no_grad():
                ref = hf(torch.tensor([tokens], device=args.device)).logits[0].float()
            ex = TorchExecutor(d, args.device, 0, "float32")
            ex.initialize(-(-args.tokens // 8) + 2, 8)
            got = paged_logits(ex, tokens, [60, 100])
            diff = (got - ref).abs().max().item()
            agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
            ok &= diff <= args.atol
            print(f"{name:24s} max |logit diff| {diff:.2e} (logit std {ref.std().item():.2f}), "
                  f"argmax agreement {agree:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
