"""A Llama / Qwen2-family decoder: RMSNorm, rotary embeddings, GQA, SwiGLU.

Module names follow the Hugging Face checkpoints (``model.layers.N.self_attn.q_proj``
…), so a ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` state dict loads by name.
The model runs on a flat batch of tokens from many sequences at once
(:meth:`CausalLM.forward`, paged KV cache), or on one whole sequence without a
cache (:meth:`CausalLM.forward_dense`): the latter is the reference the paged
path is tested against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .paged_attention import AttentionMetadata, PagedKVCache, paged_attention


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # normalise in float32 whatever the model dtype, as the HF models do
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotate-half rotary embeddings (the HF Llama convention), cos/sin from positions."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.head_dim
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        inv_freq = _scale_inv_freq(inv_freq, cfg.rope_scaling)
        # a plain attribute, not a buffer: ``model.to(bfloat16)`` must not round it
        self.inv_freq = inv_freq.float()

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[T, head_dim]`` (float32) for the given positions."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def _scale_inv_freq(inv_freq: torch.Tensor, scaling: dict | None) -> torch.Tensor:
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv_freq / factor
    # llama3: low frequencies slow down by ``factor``, high ones stay, a smooth ramp between
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` ``[T, H, D]``; cos/sin ``[T, D]``."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos[:, None] + rotated * sin[:, None]).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim ** -0.5
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)

    def _qkv(self, x, cos, sin):
        T = x.shape[0]
        q = apply_rotary(self.q_proj(x).view(T, self.num_heads, self.head_dim), cos, sin)
        k = apply_rotary(self.k_proj(x).view(T, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(T, self.num_kv_heads, self.head_dim)
        return q, k, v

    def forward(self, x, cos, sin, meta: AttentionMetadata, k_cache, v_cache) -> torch.Tensor:
        q, k, v = self._qkv(x, cos, sin)
        out = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale)
        return self.o_proj(out.flatten(1))

    def forward_dense(self, x, cos, sin) -> torch.Tensor:
        q, k, v = self._qkv(x, cos, sin)
        groups = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                             is_causal=True, scale=self.scale)
        return self.o_proj(out.transpose(0, 1).flatten(1))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, attend) -> torch.Tensor:
        x = x + attend(self.self_attn, self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(cfg)


class CausalLM(nn.Module):
    """``model`` + ``lm_head`` (absent when the embeddings are tied)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = DecoderModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                cache: PagedKVCache) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` of a flat batch; writes each token's K/V into ``cache``."""
        cos, sin = self.model.rotary_emb(positions)
        x = self.model.embed_tokens(input_ids)
        for i, layer in enumerate(self.model.layers):
            k_cache, v_cache = cache.layer(i)
            x = layer(x, lambda attn, h: attn(h, cos, sin, meta, k_cache, v_cache))
        return self.model.norm(x)

    @torch.inference_mode()
    def forward_dense(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Hidden states of one whole sequence, plain causal attention, no cache."""
        positions = torch.arange(input_ids.shape[0], device=input_ids.device)
        cos, sin = self.model.rotary_emb(positions)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, lambda attn, h: attn.forward_dense(h, cos, sin))
        return self.model.norm(x)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits ``[N, vocab]``."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    @torch.no_grad()
    def init_random_(self, seed: int) -> None:
        """Deterministic random weights: the same seed gives the same model on any device.

        Drawn on a CPU generator in float32 in parameter order, then copied, so
        CPU and CUDA runs of ``random:*`` serve identical weights. Scales keep
        activations O(1) and logits spread enough that sampling knobs matter.
        """
        gen = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            if name.endswith("layernorm.weight"):
                values = torch.ones(param.shape)
            elif name == "model.norm.weight":
                # sharpens the logits to a spread (std ~3) where sampling knobs matter
                values = torch.full(param.shape, 3.0)
            elif name.endswith(".bias"):
                values = torch.randn(param.shape, generator=gen) * 0.02
            elif name == "model.embed_tokens.weight":
                values = torch.randn(param.shape, generator=gen) / math.sqrt(param.shape[1])
            else:
                std = 1.0 / math.sqrt(param.shape[1])
                values = torch.randn(param.shape, generator=gen) * std
            param.copy_(values.to(param.dtype))
