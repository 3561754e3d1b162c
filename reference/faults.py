"""The record every role's fault table is made of (``--bug NAME``).

The reference peers implement the protocol correctly; the conformance suite
proves itself by running against a peer that breaks one rule on purpose. Each
role keeps its faults in one module (``reference/engine/faults.py``,
``reference/client/faults.py``, ``reference/frontend/faults.py``): a table of
:class:`Fault` rows and a layer that carries them out at a seam around the
correct code, so no branch of the reference implementation knows about them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Fault:
    """One named fault: ``clause`` is the rule it breaks, ``does`` says how."""

    name: str
    clause: str
    does: str


def table(*faults: Fault) -> dict[str, Fault]:
    """A role's fault table, keyed by name."""
    return {f.name: f for f in faults}


def check_names(names: Iterable[str], faults: Mapping[str, Fault], role: str) -> frozenset[str]:
    """``names`` as a set; ``ValueError`` naming the known faults if one is not in ``faults``."""
    chosen = frozenset(names)
    unknown = chosen - set(faults)
    if unknown:
        raise ValueError(f"unknown fault(s) {sorted(unknown)} for {role}; known: {', '.join(faults)}")
    return chosen
