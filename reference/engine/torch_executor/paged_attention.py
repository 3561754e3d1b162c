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
    """Spans attended together: queries ``[B, Q]`` over keys ``[B, L]``, padded."""

    #: rows of the flat token batch each query comes from (padding repeats a valid row)
    query_rows: torch.Tensor  # [B, Q] long
    #: True where ``query_rows`` is a real query (padding rows are discarded)
    query_valid: torch.Tensor  # [B, Q] bool
    #: cache slots of positions 0..L-1 of each span (padding points at slot 0)
    key_slots: torch.Tensor  # [B, L] long
    #: attention mask ``[B, 1, Q, L]``: causal on positions, padding excluded
    mask: torch.Tensor


@dataclass
class AttentionMetadata:
    """Everything the layers need to write and read the paged cache this step."""

    #: cache slot of every token of the flat batch
    slot_mapping: torch.Tensor  # [T] long
    groups: list[AttentionGroup]


@dataclass
class SpanLayout:
    """Where one span sits in the flat batch and the cache (built by the executor)."""

    start_position: int
    num_tokens: int
    block_table: list[int]


def span_slots(layout: SpanLayout, block_size: int, num_blocks: int, upto: int) -> torch.Tensor:
    """Cache slots (CPU long tensor) of positions ``0 .. upto-1`` through the span's block table."""
    needed = -(-upto // block_size)
    table = layout.block_table
    if len(table) < needed:
        raise BlockTableError(
            f"block table of {len(table)} blocks cannot hold {upto} positions of block size {block_size}")
    blocks = torch.tensor(table[:needed], dtype=torch.long)
    if needed and (int(blocks.min()) < 0 or int(blocks.max()) >= num_blocks):
        raise BlockTableError(f"block table {table[:needed]} names a block outside the KV cache "
                              f"(0..{num_blocks - 1})")
    pos = torch.arange(upto)
    return blocks[pos // block_size] * block_size + pos % block_size


def build_metadata(layouts: list[SpanLayout], block_size: int, num_blocks: int,
                   device: torch.device) -> AttentionMetadata:
    """Slot mapping and attention groups for spans laid out back to back."""
    slot_mapping: list[torch.Tensor] = []
    decode: list[tuple[int, torch.Tensor, int]] = []  # (row, key slots, position)
    groups: list[AttentionGroup] = []
    row = 0
    for lay in layouts:
        end = lay.start_position + lay.num_tokens
        slots = span_slots(lay, block_size, num_blocks, end)
        slot_mapping.append(slots[lay.start_position:])
        if lay.num_tokens == 1:
            decode.append((row, slots, lay.start_position))
        else:
            groups.append(_group([list(range(row, row + lay.num_tokens))], [slots],
                                 [list(range(lay.start_position, end))], device))
        row += lay.num_tokens
    if decode:
        groups.insert(0, _group([[r] for r, _, _ in decode], [s for _, s, _ in decode],
                                [[p] for _, _, p in decode], device))
    return AttentionMetadata(torch.cat(slot_mapping).to(device), groups)


def _group(rows: list[list[int]], slots: list[torch.Tensor], positions: list[list[int]],
           device: torch.device) -> AttentionGroup:
    B = len(rows)
    Q = max(len(r) for r in rows)
    L = max(len(s) for s in slots)
    query_rows = torch.zeros(B, Q, dtype=torch.long)
    query_valid = torch.zeros(B, Q, dtype=torch.bool)
    query_pos = torch.zeros(B, Q, dtype=torch.long)
    key_slots = torch.zeros(B, L, dtype=torch.long)
    key_len = torch.zeros(B, dtype=torch.long)
    for b in range(B):
        n = len(rows[b])
        query_rows[b, :n] = torch.tensor(rows[b])
        query_rows[b, n:] = rows[b][-1]
        query_valid[b, :n] = True
        query_pos[b, :n] = torch.tensor(positions[b])
        query_pos[b, n:] = positions[b][-1]
        key_slots[b, :len(slots[b])] = slots[b]
        key_len[b] = len(slots[b])
    key_pos = torch.arange(L)
    mask = (key_pos[None, None, :] <= query_pos[:, :, None]) & (key_pos[None, None, :] < key_len[:, None, None])
    return AttentionGroup(query_rows.to(device), query_valid.to(device), key_slots.to(device),
                          mask[:, None].to(device))


def paged_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float) -> torch.Tensor:
    """Write ``k_new``/``v_new`` ``[T, Hkv, D]`` at their slots, then attend.

    ``q`` is ``[T, H, D]``; returns ``[T, H, D]``. Grouped-query attention: each
    KV head serves ``H // Hkv`` query heads.
    """
    k_cache.index_copy_(0, meta.slot_mapping, k_new.to(k_cache.dtype))
    v_cache.index_copy_(0, meta.slot_mapping, v_new.to(v_cache.dtype))
    out = torch.empty_like(q)
    heads, kv_heads = q.shape[1], k_cache.shape[1]
    for g in meta.groups:
        B, Q = g.query_rows.shape
        qg = q[g.query_rows.flatten()].view(B, Q, heads, -1).transpose(1, 2)  # [B, H, Q, D]
        kg = _expand_kv(k_cache[g.key_slots], heads // kv_heads)  # [B, H, L, D]
        vg = _expand_kv(v_cache[g.key_slots], heads // kv_heads)
        og = F.scaled_dot_product_attention(qg, kg.to(qg.dtype), vg.to(qg.dtype), attn_mask=g.mask, scale=scale)
        og = og.transpose(1, 2)  # [B, Q, H, D]
        valid = g.query_valid
        out[g.query_rows[valid]] = og[valid]
    return out


def _expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """``[B, L, Hkv, D]`` -> ``[B, Hkv * groups, L, D]`` (query head h uses KV head h // groups)."""
    x = x.transpose(1, 2)
    if groups == 1:
        return x
    B, Hkv, L, D = x.shape
    return x[:, :, None].expand(B, Hkv, groups, L, D).reshape(B, Hkv * groups, L, D)
