"""Paged KV block pool with reference counts and a hash-based prefix cache (sans-IO).

Blocks hold ``block_size`` token positions each. A block is *in use* while its
reference count is positive (several requests share a cached prefix block); at
zero it sits in the free queue in LRU order, still findable by its hash until
it is handed out again (evicted). Only full blocks are cached; a block's hash
chains its parent's hash, its token ids and, for the first block, the
request's cache salt and LoRA name, so equal hashes mean equal prefixes.

Nothing here knows about requests beyond the token ids and block lists the
scheduler passes in.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence


class NoFreeBlocks(Exception):
    """Raised by :meth:`BlockPool.allocate` when the pool cannot satisfy a request."""


def block_hash(parent: int | None, tokens: Sequence[int], extra: Any = None) -> int:
    """Hash of one full block. Python's tuple hash is stable within a process,
    which is all an in-memory prefix cache needs."""
    return hash((parent, tuple(tokens), extra))


def hash_blocks(token_ids: Sequence[int], block_size: int, start_block: int, parent: int | None,
                extra: Any = None, limit_blocks: int | None = None) -> list[int]:
    """Hashes of the full blocks of ``token_ids`` from ``start_block`` on."""
    out: list[int] = []
    n_full = len(token_ids) // block_size
    if limit_blocks is not None:
        n_full = min(n_full, limit_blocks)
    for b in range(start_block, n_full):
        parent = block_hash(parent, token_ids[b * block_size:(b + 1) * block_size],
                            extra if b == 0 else None)
        out.append(parent)
    return out


class BlockPool:
    """``num_blocks`` reference-counted blocks; ids are ``0 .. num_blocks-1``."""

    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.hash_of: list[int | None] = [None] * num_blocks
        # free blocks, least recently freed first (evicted first)
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}  # hash -> block id
        # prefix-cache counters since the last take_stats()
        self.stats_queries = 0
        self.stats_hits = 0
        self.stats_requests = 0
        self.stats_reset = False

    # -- queries ------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        return self.num_used / self.num_blocks

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (not yet referenced)."""
        found: list[int] = []
        if not self.enable_caching:
            return found
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    # -- mutation -----------------------------------------------------------
    def touch(self, blocks: Sequence[int]) -> None:
        """Take a reference on cached blocks found by :meth:`lookup`."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self._free[b]
            self.ref_cnt[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Hand out ``n`` fresh blocks (evicting cached ones, LRU first)."""
        if n > len(self._free):
            raise NoFreeBlocks(f"need {n} blocks, {len(self._free)} free")
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            h = self.hash_of[b]
            if h is not None:
                if self._cached.get(h) == b:
                    del self._cached[h]
                self.hash_of[b] = None
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block. Tail blocks go to the free queue
        first so that a prefix's head stays cached longest."""
        for b in reversed(blocks):
            cnt = self.ref_cnt[b] - 1
            if cnt < 0:
                raise RuntimeError(f"block {b} freed more often than referenced")
            self.ref_cnt[b] = cnt
            if cnt == 0:
                self._free[b] = None

    def cache_block(self, block: int, h: int) -> None:
        """Make a full, computed block findable by its hash."""
        if not self.enable_caching or self.hash_of[block] is not None:
            return
        if h in self._cached:  # an identical block is already cached; keep that one
            return
        self._cached[h] = block
        self.hash_of[block] = h

    def reset(self) -> bool:
        """Forget every cached hash. Refused (False) while any block is in use, as vLLM."""
        if self.num_used:
            return False
        self._cached.clear()
        self.hash_of = [None] * self.num_blocks
        self.stats_reset = True
        return True

    def take_stats(self) -> dict[str, Any]:
        out = {"reset": self.stats_reset, "requests": self.stats_requests,
               "queries": self.stats_queries, "hits": self.stats_hits}
        self.stats_reset = False
        self.stats_requests = self.stats_queries = self.stats_hits = 0
        return out
