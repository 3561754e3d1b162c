"""In-flight requests and their owning engines (sans-IO).

The registry is the exactly-once gate of a stream's end (``ECP-OUT-1``): a
request is ended by whoever :meth:`RequestRegistry.take` s it first (its
terminal output, a local abort, an auto-abort drain or a client failure);
everybody else finds it gone and does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Iterator, TypeVar

from .errors import DuplicateRequestId

S = TypeVar("S")


@dataclass(slots=True)
class InFlight(Generic[S]):
    """One admitted request: its id, owning engine and the stream sink it feeds."""

    request_id: str
    engine_rank: int
    sink: S


class RequestRegistry(Generic[S]):
    """Request id → :class:`InFlight`, with per-engine counts."""

    def __init__(self, ranks: tuple[int, ...] = ()) -> None:
        self._entries: dict[str, InFlight[S]] = {}
        self._per_engine: dict[int, int] = {r: 0 for r in ranks}
        #: ``get(request_id) -> InFlight | None``: the dict's own lookup, one C call per output
        #: in the output loop (a method around it is a Python frame per output)
        self.get = self._entries.get

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._entries

    def __iter__(self) -> Iterator[InFlight[S]]:
        return iter(list(self._entries.values()))

    def add(self, request_id: str, engine_rank: int, sink: S) -> InFlight[S]:
        """Register a request; raise :class:`DuplicateRequestId` if it is in flight (``ECP-REQ-8``)."""
        if request_id in self._entries:
            raise DuplicateRequestId(request_id)
        entry = InFlight(request_id, engine_rank, sink)
        self._entries[request_id] = entry
        self._per_engine[engine_rank] = self._per_engine.get(engine_rank, 0) + 1
        return entry

    def take(self, request_id: str) -> InFlight[S] | None:
        """Remove and return the request if still in flight, else ``None``."""
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            self._per_engine[entry.engine_rank] -= 1
        return entry

    def take_all(self) -> list[InFlight[S]]:
        """Remove and return every in-flight request, in admission order."""
        entries = list(self._entries.values())
        self._entries.clear()
        for rank in self._per_engine:
            self._per_engine[rank] = 0
        return entries

    def in_flight(self, engine_rank: int) -> int:
        return self._per_engine.get(engine_rank, 0)

    def counts(self) -> dict[int, int]:
        """In-flight requests per engine rank."""
        return dict(self._per_engine)

    def ids(self) -> list[str]:
        return list(self._entries)


def group_by_engine(entries: list[InFlight[Any]]) -> dict[int, list[str]]:
    """``{rank: [ids in the given order]}``, ranks ascending (the ABORT order)."""
    grouped: dict[int, list[str]] = {}
    for e in entries:
        grouped.setdefault(e.engine_rank, []).append(e.request_id)
    return dict(sorted(grouped.items()))
