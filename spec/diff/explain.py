"""Which ``ecp spec diff`` findings explain a message that one release writes and another refuses.

Both the static model (:mod:`.features`) and the live check of a monitored pairing
(:mod:`ecp.spec.profile.cross`) name the rule behind a break with these functions, so that a
prediction and an observation of the same break carry the same ``DIFF-nnn`` code.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..layout.model import Layout
from .clauses import reachable
from .compare import Finding

#: severities that can explain a refusal, most telling first
EXPLAINING = ("breaking", "warning")


def explaining(findings: Iterable[Finding], layouts: Sequence[Layout], roots: Sequence[str]) -> list[Finding]:
    """The findings about ``roots`` or any message they hold in any of ``layouts`` (breaking first)."""
    names: set[str] = set()
    for layout in layouts:
        for root in roots:
            names.update(reachable(layout, root))
    found = [f for f in findings if f.severity in EXPLAINING and f.subject.split(".")[0] in names]
    return sorted(found, key=lambda f: EXPLAINING.index(f.severity))


def about_method(findings: Iterable[Finding], method: str) -> list[Finding]:
    """The findings about UTILITY method ``method`` itself (removed, added, signature changed)."""
    return [f for f in findings if f.subject == f"utility {method}" and f.severity in EXPLAINING]
