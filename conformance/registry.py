"""The conformance case registry: role-neutral catalogue of numbered cases.

A *case* is one checkable requirement, run against one role (the harness
plays the other side). Case ids live in their own namespace so they can never
be mistaken for spec clauses (``ECP-<AREA>-<n>``, :mod:`ecp.spec.clauses`):

* ``ENG-<AREA>-<n>`` -- engine-role cases (the harness plays the frontend);
* ``FE-<AREA>-<n>``  -- frontend-role cases (the harness plays the engines).

Every case cites the spec clause it checks. Ids are stable and never reused:
a withdrawn case moves to :data:`RETIRED` and its id stays taken.

Each role keeps its catalogue as data in a module listed in
:data:`ROLE_CATALOGS` (a tuple ``CASES``); the test functions that implement
the cases carry ``@case("ENG-HS-1")``. :func:`check_implementations` is the
collection-time check: duplicate ids, unknown clauses, ids outside the
catalogue and catalogue entries without a test all fail collection.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from ecp.spec import clauses as spec_clauses

Level = Literal["MUST", "SHOULD", "MAY"]

#: role name -> (case-id prefix, module holding that role's ``CASES``)
ROLE_CATALOGS: dict[str, tuple[str, str]] = {
    "engine": ("ENG", "ecp.conformance.engine.catalog"),
    "frontend": ("FE", "ecp.conformance.frontend.catalog"),
}

#: Ids that were once used and must never be given to another case.
RETIRED: frozenset[str] = frozenset()

_ID_RE = re.compile(r"^(?P<prefix>ENG|FE)-(?P<area>[A-Z]+)-(?P<n>[1-9][0-9]*)$")
_SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MARKER = "ecp_case"


class RegistryError(Exception):
    """The catalogue or its implementations are inconsistent (a harness error, exit 2)."""


@dataclass(frozen=True)
class Case:
    """One numbered conformance case."""

    id: str
    clause: str
    level: Level
    roles: tuple[str, ...]
    requirement: str
    slug: str
    #: optional capability the peer may declare it lacks (-> UNSUPPORTED)
    feature: str | None = None
    tags: tuple[str, ...] = field(default=())
    #: set only where a case deliberately differs from its clause's conformance level
    level_override: str | None = None
    #: further clauses the case checks besides ``clause``, and the ``ECP-HTTP-n`` clause of every
    #: HTTP route it drives (a frontend-role case relies on no HTTP behaviour the text leaves open)
    also: tuple[str, ...] = ()
    #: the normative sentences (``ECP-HS-5.2``, :func:`ecp.spec.clauses.sentences`) the case checks. Citing
    #: a clause covers none of its sentences: sentence coverage counts only what a case names here
    checks: tuple[str, ...] = ()

    @property
    def http(self) -> tuple[str, ...]:
        """The HTTP clauses among :attr:`clause` and :attr:`also`."""
        return tuple(c for c in (self.clause, *self.also) if c.startswith("ECP-HTTP-"))

    @property
    def clauses(self) -> tuple[str, ...]:
        """Every clause the case cites: its own first."""
        return (self.clause, *self.also)

    @property
    def area(self) -> str:
        return self.id.split("-")[1]

    @property
    def conformance_level(self) -> str:
        """``interop`` or ``hardened``: the cited clause's level (:mod:`ecp.spec.clauses`) unless overridden."""
        if self.level_override is not None:
            return self.level_override
        clause = spec_clauses.CLAUSES.get(self.clause)
        return clause.conformance_level if clause is not None else "interop"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "clause": self.clause, "level": self.level,
                "conformance_level": self.conformance_level, "roles": list(self.roles),
                "requirement": self.requirement, "slug": self.slug, "feature": self.feature,
                "also": list(self.also), "checks": list(self.checks)}


def case_factory(*roles: str) -> Callable[..., Case]:
    """``_c(id, clause, level, slug, requirement, feature=None, also=(), checks=())`` for one role's
    catalogue: keeps the catalogue tables one line per field, in the order a reader scans them."""
    def make(id: str, clause: str, level: str, slug: str, requirement: str, feature: str | None = None,
             conformance_level: str | None = None, also: tuple[str, ...] = (), checks: tuple[str, ...] = ()) -> Case:
        return Case(id=id, clause=clause, level=level, roles=roles, requirement=requirement,  # type: ignore[arg-type]
                    slug=slug, feature=feature, level_override=conformance_level, also=tuple(also),
                    checks=tuple(checks))

    return make


def validate_cases(cases: Iterable[Case], role: str | None = None) -> list[Case]:
    """Check a catalogue; return it as a list or raise :class:`RegistryError` listing every problem."""
    problems: list[str] = []
    seen: set[str] = set()
    out = list(cases)
    for c in out:
        m = _ID_RE.match(c.id)
        if not m:
            problems.append(f"{c.id}: case ids look like ENG-<AREA>-<n> or FE-<AREA>-<n>")
        elif role is not None and m.group("prefix") != ROLE_CATALOGS[role][0]:
            problems.append(f"{c.id}: a {role}-role case id starts with {ROLE_CATALOGS[role][0]}-")
        if c.id in seen:
            problems.append(f"{c.id}: duplicate case id")
        seen.add(c.id)
        if c.id in RETIRED:
            problems.append(f"{c.id}: retired case ids are never reused")
        if c.clause not in spec_clauses.CLAUSES:
            problems.append(f"{c.id}: unknown spec clause {c.clause!r}")
        elif spec_clauses.CLAUSES[c.clause].withdrawn:
            problems.append(f"{c.id}: cites withdrawn clause {c.clause}")
        for other in c.also:
            if other not in spec_clauses.CLAUSES:
                problems.append(f"{c.id}: unknown spec clause {other!r} in also")
            elif other == c.clause or c.also.count(other) > 1:
                problems.append(f"{c.id}: clause {other} cited twice")
        sentences = spec_clauses.sentences()
        for sid in c.checks:
            if sid not in sentences:
                problems.append(f"{c.id}: unknown sentence id {sid!r} in checks (ecp spec sentences lists them)")
            elif c.checks.count(sid) > 1:
                problems.append(f"{c.id}: sentence {sid} cited twice")
        if c.level not in ("MUST", "SHOULD", "MAY"):
            problems.append(f"{c.id}: level must be MUST, SHOULD or MAY")
        if c.level_override is not None and c.level_override not in spec_clauses.CONFORMANCE_LEVELS:
            problems.append(f"{c.id}: conformance level must be one of {', '.join(spec_clauses.CONFORMANCE_LEVELS)}")
        if not c.roles or (role is not None and role not in c.roles):
            problems.append(f"{c.id}: roles {c.roles!r} do not include {role!r}")
        if not _SLUG_RE.match(c.slug):
            problems.append(f"{c.id}: slug {c.slug!r} is not lower-case-with-dashes")
        if not c.requirement or "\n" in c.requirement:
            problems.append(f"{c.id}: requirement must be one non-empty line")
    if problems:
        raise RegistryError("invalid case catalogue:\n  " + "\n  ".join(problems))
    return out


def load_role(role: str) -> list[Case]:
    """The validated catalogue of one role."""
    try:
        _, module = ROLE_CATALOGS[role]
    except KeyError:
        raise RegistryError(f"unknown role {role!r} (known: {', '.join(ROLE_CATALOGS)})") from None
    return validate_cases(importlib.import_module(module).CASES, role)


def load_all() -> dict[str, Case]:
    """Every case of every role, by id (ids are unique across roles)."""
    out: dict[str, Case] = {}
    for role in ROLE_CATALOGS:
        for c in load_role(role):
            if c.id in out:
                raise RegistryError(f"{c.id}: duplicate case id across roles")
            out[c.id] = c
    return out


def case(case_id: str):
    """Decorator linking a test function to its catalogue entry (``@case("ENG-HS-1")``)."""
    import pytest

    if not _ID_RE.match(case_id):
        raise RegistryError(f"{case_id!r} is not a case id")
    return getattr(pytest.mark, MARKER)(case_id)


def check_implementations(catalogue: Iterable[Case], implemented: dict[str, list[str]]) -> None:
    """Collection-time check: ``implemented`` maps case id -> test node ids carrying it.

    Fails on a test citing an id outside the catalogue, an id implemented
    twice, and a catalogue entry that no test implements.
    """
    known = {c.id for c in catalogue}
    problems = []
    for cid, nodes in sorted(implemented.items()):
        if cid not in known:
            problems.append(f"{cid}: test {nodes[0]} cites a case id missing from the catalogue")
        elif len(nodes) > 1:
            problems.append(f"{cid}: implemented by more than one test: {', '.join(nodes)}")
    for cid in sorted(known - implemented.keys()):
        problems.append(f"{cid}: catalogue entry without a test")
    if problems:
        raise RegistryError("case registry check failed:\n  " + "\n  ".join(problems))
