"""Paged KV cache and attention over block tables, in plain torch.

The cache is one tensor ``[num_layers, 2, num_blocks, block_size, num_kv_heads,
head_dim]`` (index 0 = K, 1 = V). Token position ``p`` of a sequence lives in
slot ``block_table[p // block_size] * block_size + p % block_size`` of every
layer. A step first writes the new tokens' K/V into their slots, then each
span attends over the slots of positions ``0 .. end-1`` gathered through its
block table, with a causal mask on positions. Prefix-cache hits are blocks the
scheduler already filled; preemption just stops referencing blocks.

Spans are grouped so padding stays cheap: all single-token (decode) spans
attend in one batched call; each multi-token (prefill) span attends alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


class BlockTableError(ValueError):
    """A span's block table does not cover its positions, or names a block out of range."""


class PagedKVCache:
    """The device tensors holding every layer's K and V, addressed by slot."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.tensor = torch.zeros(num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim,
                                  dtype=dtype, device=device)

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of one layer, flattened to ``[num_slots, num_kv_heads, head_dim]``."""
        kv = self.tensor[index]
        return kv[0].flatten(0, 1), kv[1].flatten(0, 1)

    @staticmethod
    def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                        itemsize: int) -> int:
        return 2 * num_layers * block_size * num_kv_heads * head_dim * itemsize


@dataclass
class AttentionGroup:
    """Spans attended together: queries ``[B, Q]`` over keys ``[B, L]``.

    Either every decode span of the step (``Q = 1``, keys padded to the longest
    context and masked) or one prefill chunk (``B = 1``).
    """

    #: rows of the flat token batch the queries come from
    query_rows: torch.Tensor  # [B, Q] long
    #: cache slots of key positions 0..L-1 (padding points at a real slot, masked)
    key_slots: torch.Tensor  # [B, L] long
    #: ``[B, 1, Q, L]``: True where the query may see the key (causal, within the span)
    mask: torch.Tensor


@dataclass
class AttentionMetadata:
    """Everything the layers need to write and read the paged cache this step."""

    #: sequence position of every token of the flat batch
    positions: torch.Tensor  # [T] long
    #: cache slot of every token of the flat batch
    slot_mapping: torch.Tensor  # [T] long
    groups: list[AttentionGroup]


@dataclass
class SpanLayout:
    """One span as the cache sees it (built by the executor, in flat-batch order)."""

    start_position: int
    num_tokens: int
    block_table: list[int]


def block_tables(layouts: list[SpanLayout], block_size: int, num_blocks: int) -> torch.Tensor:
    """The spans' block tables as one ``[S, W]`` tensor (rows padded with block 0),
    checked to cover each span's end with blocks that exist."""
    needed = []
    for i, lay in enumerate(layouts):
        end = lay.start_position + lay.num_tokens
        n = -(-end // block_size)
        if len(lay.block_table) < n:
            raise BlockTableError(f"span {i}: block table of {len(lay.block_table)} blocks cannot hold "
                                  f"{end} positions of block size {block_size}")
        needed.append(n)
    width = max(max(len(lay.block_table) for lay in layouts), 1)
    tables = torch.tensor([lay.block_table + [0] * (width - len(lay.block_table)) for lay in layouts],
                          dtype=torch.long)
    used = torch.arange(width)[None, :] < torch.tensor(needed)[:, None]
    bad = ((tables < 0) | (tables >= num_blocks)) & used
    if bool(bad.any()):
        i = int(bad.any(dim=1).nonzero()[0])
        raise BlockTableError(f"span {i}: block table {layouts[i].block_table[:needed[i]]} names a block "
                              f"outside the KV cache (0..{num_blocks - 1})")
    return tables


def build_metadata(layouts: list[SpanLayout], block_size: int, num_blocks: int,
                   device: torch.device) -> AttentionMetadata:
    """Positions, slot mapping and attention groups for spans laid out back to back."""
    tables = block_tables(layouts, block_size, num_blocks)
    width = tables.shape[1]
    starts = torch.tensor([lay.start_position for lay in layouts], dtype=torch.long)
    counts = torch.tensor([lay.num_tokens for lay in layouts], dtype=torch.long)
    ends = starts + counts
    offsets = counts.cumsum(0) - counts
    span_of_token = torch.repeat_interleave(torch.arange(len(layouts)), counts)
    positions = starts[span_of_token] + torch.arange(int(counts.sum())) - offsets[span_of_token]

    def slots(rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # columns past a short table only occur under the mask; clamp to stay in bounds
        return rows[..., (pos // block_size).clamp(max=width - 1)] * block_size + pos % block_size

    slot_mapping = tables[span_of_token, positions // block_size] * block_size + positions % block_size
    groups: list[AttentionGroup] = []
    decode = (counts == 1).nonzero().flatten()
    if len(decode):
        key_pos = torch.arange(int(ends[decode].max()))
        mask = key_pos[None, :] < ends[decode][:, None]  # the query is the last position
        groups.append(AttentionGroup(offsets[decode][:, None].to(device),
                                     slots(tables[decode], key_pos).to(device),
                                     mask[:, None, None, :].to(device)))
    for i in (counts > 1).nonzero().flatten().tolist():
        key_pos = torch.arange(int(ends[i]))
        query_pos = torch.arange(int(starts[i]), int(ends[i]))
        mask = key_pos[None, :] <= query_pos[:, None]
        groups.append(AttentionGroup((offsets[i] + torch.arange(int(counts[i])))[None, :].to(device),
                                     slots(tables[i], key_pos)[None, :].to(device),
                                     mask[None, None].to(device)))
    return AttentionMetadata(positions.to(device), slot_mapping.to(device), groups)


def paged_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float) -> torch.Tensor:
    """Write ``k_new``/``v_new`` ``[T, Hkv, D]`` at their slots, then attend.

    ``q`` is ``[T, H, D]``; returns ``[T, H, D]``. Grouped-query attention:
    query head ``h`` uses KV head ``h // (H // Hkv)``. The ``G = H // Hkv``
    query heads sharing a KV head are folded into the query axis, so K/V are
    gathered once per KV head and never expanded.
    """
    k_cache.index_copy_(0, meta.slot_mapping, k_new.to(k_cache.dtype))
    v_cache.index_copy_(0, meta.slot_mapping, v_new.to(v_cache.dtype))
    out = torch.empty_like(q)
    T, H, D = q.shape
    kv_heads = k_cache.shape[1]
    G = H // kv_heads
    for g in meta.groups:
        B, Q = g.query_rows.shape
        rows = g.query_rows.flatten()
        # [B, Q, Hkv, G, D] -> [B, Hkv, G * Q, D] (row index = g * Q + q)
        qg = q[rows].view(B, Q, kv_heads, G, D).permute(0, 2, 3, 1, 4).reshape(B, kv_heads, G * Q, D)
        kg = k_cache[g.key_slots].transpose(1, 2).to(q.dtype)  # [B, Hkv, L, D]
        vg = v_cache[g.key_slots].transpose(1, 2).to(q.dtype)
        mask = g.mask if Q == 1 else g.mask.repeat(1, 1, G, 1)
        og = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, scale=scale)
        out[rows] = og.view(B, kv_heads, G, Q, D).permute(0, 3, 1, 2, 4).reshape(B * Q, H, D)
    return out
