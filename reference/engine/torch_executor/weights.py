"""Build the model: seeded random weights, or a local Hugging Face checkpoint.

A checkpoint directory holds ``config.json`` and one ``model.safetensors`` or
several shards (``model-00001-of-00002.safetensors`` …, listed by
``model.safetensors.index.json`` when present). Tensor names are the usual HF
ones; rotary ``inv_freq`` buffers are ignored and a tied model ignores a stored
``lm_head.weight``. Every parameter must be found exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import ModelConfig, ModelConfigError, parse_model_spec
from .model import CausalLM


def load_model(model: str, device: torch.device, dtype: torch.dtype) -> CausalLM:
    """``random:tiny|small[:SEED]`` or a checkpoint directory -> model on ``device`` in ``dtype``."""
    cfg = parse_model_spec(model)
    lm = CausalLM(cfg)
    if cfg.is_random:
        lm.init_random_(cfg.random_seed)
    else:
        load_checkpoint_(lm, Path(model))
    return lm.to(device=device, dtype=dtype).eval()


def checkpoint_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / n for n in names]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelConfigError(f"no *.safetensors files in {path}")
    return files


def load_checkpoint_(lm: CausalLM, path: Path) -> None:
    """Copy every checkpoint tensor into the parameter of the same name."""
    from safetensors import safe_open

    params = dict(lm.named_parameters())
    seen: set[str] = set()
    for file in checkpoint_files(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if name.endswith("rotary_emb.inv_freq"):
                    continue
                if name == "lm_head.weight" and lm.lm_head is None:
                    continue  # tied: the embedding matrix is the head
                param = params.get(name)
                if param is None:
                    raise ModelConfigError(f"{file.name}: unexpected tensor {name!r}")
                tensor = f.get_tensor(name)
                if tuple(tensor.shape) != tuple(param.shape):
                    raise ModelConfigError(
                        f"{file.name}: {name} has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}")
                with torch.no_grad():
                    param.copy_(tensor.to(param.dtype))
                seen.add(name)
    missing = sorted(set(params) - seen)
    if missing:
        raise ModelConfigError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:3]}")


def save_checkpoint(lm: CausalLM, path: Path, shards: int = 1) -> None:
    """Write ``lm`` as an HF-style directory (tests and tools build checkpoints with it)."""
    from safetensors.torch import save_file

    cfg: ModelConfig = lm.config
    path.mkdir(parents=True, exist_ok=True)
    hf = {
        "model_type": "qwen2" if cfg.qkv_bias else "llama",
        "architectures": ["Qwen2ForCausalLM" if cfg.qkv_bias else "LlamaForCausalLM"],
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling, "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings, "eos_token_id": cfg.eos_token_id,
        "hidden_act": "silu", "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(hf, indent=1))
    tensors = {n: p.detach().cpu().contiguous() for n, p in lm.named_parameters()}
    names = list(tensors)
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"))
        return
    weight_map = {}
    per = -(-len(names) // shards)
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i * per:(i + 1) * per]
        save_file({n: tensors[n] for n in part}, str(path / fname))
        weight_map.update({n: fname for n in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
