"""The frontend's index of in-flight choices, for the abort APIs.

An id given to ``/abort_requests`` or ``/v1/abort_requests`` matches a choice
by its base id, its response id (``cmpl-…``/``chatcmpl-…``), its per-prompt
external id or its internal id (see :mod:`.ids`). Lookups return snapshots, so
callers may iterate while requests finish concurrently.
"""

from __future__ import annotations

from typing import Iterable

from .choice import Choice


class InFlightIndex:
    def __init__(self) -> None:
        self._by_internal: dict[str, Choice] = {}
        self._by_key: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._by_internal)

    @staticmethod
    def _keys(c: Choice) -> set[str]:
        return {c.base_id, c.response_id, c.external_id, c.internal_id}

    def add(self, c: Choice) -> None:
        self._by_internal[c.internal_id] = c
        for k in self._keys(c):
            self._by_key.setdefault(k, set()).add(c.internal_id)

    def remove(self, c: Choice) -> None:
        if self._by_internal.pop(c.internal_id, None) is None:
            return
        for k in self._keys(c):
            ids = self._by_key.get(k)
            if ids is not None:
                ids.discard(c.internal_id)
                if not ids:
                    del self._by_key[k]

    def resolve(self, ids: Iterable[str]) -> tuple[list[Choice], list[str]]:
        """Choices matching any of ``ids`` (each once, in first-match order),
        and the ids that matched nothing."""
        found: dict[str, Choice] = {}
        not_found: list[str] = []
        for i, matched in self.resolve_each(ids):
            if not matched:
                not_found.append(i)
            for c in matched:
                found.setdefault(c.internal_id, c)
        return list(found.values()), not_found

    def resolve_each(self, ids: Iterable[str]) -> list[tuple[str, list[Choice]]]:
        """Each of ``ids`` with the choices it matches now (``[]``: none), in order."""
        out = []
        for i in ids:
            matched = self._by_key.get(i) or ()
            out.append((i, [self._by_internal[internal] for internal in sorted(matched)
                            if internal in self._by_internal]))
        return out

    def all(self) -> list[Choice]:
        return list(self._by_internal.values())
