"""Coalesced auto-aborts (``ECP-ABORT-5``/``-6``/``-7``), sans-IO.

Dropped streams and frontend stop-string matches queue ``(request_id,
cause)``. One drain takes whatever is queued, at most ``max_items`` ids and
never waiting for more (a lone abort goes out at once), removes each id from
the in-flight registry (ids no longer in flight are skipped: they finished
meanwhile), and groups the rest by owning engine keeping drop order. The
receiver sends one ABORT per engine per drain.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any, Callable

#: Most ids one drain takes (vLLM's Rust client: ``recv_many(batch, 1024)``).
MAX_DRAIN = 1024


class AbortCause(str, enum.Enum):
    """Why a stream was auto-aborted."""

    DROPPED_STREAM = "dropped_stream"
    STOP_STRING_MATCHED = "stop_string_matched"


class AbortCoalescer:
    """The auto-abort queue.

    ``token`` identifies the request *instance* that was dropped (the client
    uses the stream's sink): an id may finish and be reused by a new request
    before the drain, and that new request must not be aborted.
    ``take_owner(request_id, token)`` must remove the request from the
    in-flight registry if it is still that instance and return its engine
    rank, else return ``None``.
    """

    def __init__(self) -> None:
        self._queue: deque[tuple[str, AbortCause, Any]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def push(self, request_id: str, cause: AbortCause | str = AbortCause.DROPPED_STREAM,
             token: Any = None) -> None:
        self._queue.append((request_id, AbortCause(cause), token))

    def drain(self, take_owner: Callable[[str, Any], int | None], max_items: int = MAX_DRAIN,
              ) -> dict[int, list[str]]:
        """Take up to ``max_items`` queued ids; return ``{rank: [ids]}``, ranks ascending."""
        grouped: dict[int, list[str]] = {}
        for _ in range(min(max_items, len(self._queue))):
            request_id, _cause, token = self._queue.popleft()
            rank = take_owner(request_id, token)
            if rank is None:
                continue
            grouped.setdefault(rank, []).append(request_id)
        return dict(sorted(grouped.items()))
