"""Which shipped vLLM releases have a message, a field or a UTILITY method.

Computed from the shipped layouts (``spec/layouts/``), never written by hand.
A *feature* is named as one of:

* ``message:Name`` -- a message (``message:RequestError``);
* ``field:Message.name`` -- a field of a message, by its name on the wire
  (``field:EngineCoreOutput.error``);
* ``utility:name`` -- a UTILITY method (``utility:pause_generation``).

PROTOCOL.md renders the span of every field and method in its generated
tables (column ``vLLM``) and of every release-bound clause beside its keyword
(:data:`ecp.spec.clauses.RELEASE_BOUND`); a harness asks
:meth:`ecp.spec.clauses.Clause.holds_in` whether the release under test is bound
by such a clause.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .layout.model import Layout
from .layout.resolve import load_shipped, shipped_names

_RELEASE = re.compile(r"vllm-(\d+\.\d+)")


@lru_cache(maxsize=1)
def _layouts() -> tuple[tuple[str, Layout], ...]:
    return tuple((m.group(1), load_shipped(name)) for name in shipped_names() if (m := _RELEASE.fullmatch(name)))


def releases() -> list[str]:
    """The shipped releases, oldest first (``0.21`` ... ``0.33``)."""
    return [r for r, _ in _layouts()]


def features_of(layout: Layout) -> frozenset[str]:
    """Every feature one layout has."""
    out = set()
    for name, msg in layout.messages.items():
        out.add(f"message:{name}")
        out.update(f"field:{name}.{f.name}" for f in msg.fields)
    out.update(f"utility:{name}" for name in layout.utility_methods)
    return frozenset(out)


@lru_cache(maxsize=None)
def _presence() -> dict[str, tuple[str, ...]]:
    table: dict[str, list[str]] = {}
    for release, layout in _layouts():
        for feature in features_of(layout):
            table.setdefault(feature, []).append(release)
    return {k: tuple(v) for k, v in table.items()}


def releases_with(feature: str) -> tuple[str, ...]:
    """The shipped releases that have ``feature`` (empty for one no release has)."""
    return _presence().get(feature, ())


def span(feature_releases: tuple[str, ...] | list[str]) -> str:
    """``all``, ``0.33``, ``0.28–0.33``, or a list where the releases are not contiguous."""
    every = releases()
    have = [r for r in every if r in feature_releases]
    if not have:
        return "none"
    if have == every:
        return "all"
    first, last = every.index(have[0]), every.index(have[-1])
    if last - first + 1 != len(have):
        return ", ".join(have)
    return have[0] if first == last else f"{have[0]}–{have[-1]}"


def feature_span(feature: str) -> str:
    """:func:`span` of one feature (``field:EngineCoreOutput.error`` -> ``0.33``)."""
    return span(releases_with(feature))


def describe(feature: str) -> str:
    """A feature as a reader knows it: ``pause_generation``, ``EngineCoreOutput.error``."""
    return feature.split(":", 1)[1]
