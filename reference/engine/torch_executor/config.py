"""Model configuration: Llama / Qwen2-family decoders, from ``config.json`` or a preset.

``--model`` is either ``random:tiny`` / ``random:small`` (optionally
``random:tiny:SEED`` to pick other deterministic weights) or a local directory
in Hugging Face layout (``config.json`` + ``*.safetensors``). Nothing is ever
fetched from a hub.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

#: architectures whose tensors and maths this decoder reproduces
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


class ModelConfigError(ValueError):
    """The model spec or its ``config.json`` names something this decoder cannot run."""


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    #: HF ``rope_scaling`` map (``llama3`` and ``linear`` are supported) or None
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 4096
    #: Qwen2 puts a bias on the q/k/v projections
    qkv_bias: bool = False
    tie_word_embeddings: bool = False
    eos_token_id: int | None = None
    #: torch dtype name the checkpoint was saved in (``config.json`` ``torch_dtype``)
    torch_dtype: str | None = None
    #: seed of the deterministic random weights (``random:*`` models only)
    random_seed: int | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelConfigError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise ModelConfigError(f"rotary embeddings need an even head_dim, got {self.head_dim}")

    @property
    def is_random(self) -> bool:
        return self.random_seed is not None


PRESETS: dict[str, ModelConfig] = {
    # a couple of layers, tiny dims: the CPU test model. Qwen2-style bias and tied
    # embeddings so those paths are exercised on every test run.
    "tiny": ModelConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, qkv_bias=True,
        tie_word_embeddings=True, eos_token_id=2, max_position_embeddings=8192, name="random:tiny",
    ),
    # ~200M parameters (~0.4 GB in bfloat16): a benchmarking model for one GPU.
    "small": ModelConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=4, head_dim=64, tie_word_embeddings=True,
        eos_token_id=2, max_position_embeddings=8192, name="random:small",
    ),
}


def parse_model_spec(model: str) -> ModelConfig:
    """``random:NAME[:SEED]`` -> preset config; a directory -> its ``config.json``."""
    if model.startswith("random:"):
        parts = model.split(":")
        if len(parts) not in (2, 3) or parts[1] not in PRESETS:
            raise ModelConfigError(
                f"unknown random model {model!r}; use random:tiny or random:small (optionally :SEED)")
        seed = 0
        if len(parts) == 3:
            try:
                seed = int(parts[2])
            except ValueError:
                raise ModelConfigError(f"random model seed must be an integer, got {parts[2]!r}") from None
        return replace(PRESETS[parts[1]], random_seed=seed, name=model)
    path = Path(model)
    if not (path / "config.json").is_file():
        raise ModelConfigError(f"{model!r} is neither random:tiny|small nor a directory with config.json")
    return config_from_hf(json.loads((path / "config.json").read_text()), path)


def config_from_hf(cfg: dict[str, Any], path: Path | None = None) -> ModelConfig:
    """Read the fields of a Hugging Face ``config.json`` this decoder needs."""
    model_type = cfg.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelConfigError(f"model_type {model_type!r} is not supported (supported: {SUPPORTED_MODEL_TYPES})")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ModelConfigError(f"hidden_act {act!r} is not supported (SwiGLU needs silu)")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if k not in cfg]
    if missing:
        raise ModelConfigError(f"config.json lacks {', '.join(missing)}")
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    eos = cfg.get("eos_token_id")
    if eos is None and path is not None and (path / "generation_config.json").is_file():
        eos = json.loads((path / "generation_config.json").read_text()).get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    scaling = cfg.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind not in ("llama3", "linear", "default"):
            raise ModelConfigError(f"rope_scaling type {kind!r} is not supported (llama3, linear)")
        if kind == "default":
            scaling = None
    return ModelConfig(
        vocab_size=cfg["vocab_size"],
        hidden_size=hidden,
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or hidden // heads,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=cfg.get("rope_theta", 10000.0),
        rope_scaling=scaling,
        max_position_embeddings=cfg.get("max_position_embeddings", 4096),
        qkv_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        eos_token_id=eos,
        torch_dtype=cfg.get("torch_dtype"),
        name=str(path) if path is not None else model_type,
    )
