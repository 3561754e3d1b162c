"""How a fanned-out utility call's per-engine answers become one result.

The table (:data:`UTILITY_RULES`) is derived from the spec's method table
(:data:`ecp.spec.utility_methods.UTILITY_METHODS`): method → (rule, clause,
result type); each engine's value is checked against that result type. Every utility call goes to every engine and waits for all of them
(``ECP-UTIL-7``) — except under the ``first-engine-is-sleeping`` bug knob —
and then:

=============  =====================================================================
rule           result
=============  =====================================================================
consensus      the common value; :class:`InconsistentUtilityResults` on disagreement
               (``ECP-UTIL-4``)
and            ``all(values)`` (``ECP-UTIL-5``)
flatten        per-engine lists concatenated in rank order; a non-list counts as one
               element (``ECP-UTIL-6``)
unit           ``None``; the values are discarded (``ECP-UTIL-7``)
raw            ``{rank: value}`` for the caller to interpret (also methods not in the table,
               ``ECP-UTIL-11``)
=============  =====================================================================

Before combining: any ``failure_message`` → :class:`UtilityCallFailed`
naming every failed engine (``ECP-UTIL-3``); a missing envelope or a value of
the wrong type → :class:`UtilityResultDecode` (``ECP-UTIL-9``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

from ecp.spec import UtilityOutput
from ecp.spec.layout.types import value_matches
from ecp.spec.utility_methods import UTILITY_METHODS

from .errors import InconsistentUtilityResults, UtilityCallFailed, UtilityResultDecode


class Rule(str, enum.Enum):
    CONSENSUS = "consensus"
    AND = "and"
    FLATTEN = "flatten"
    UNIT = "unit"
    RAW = "raw"


@dataclass(frozen=True)
class MethodRule:
    """How one method's answers are checked and combined."""

    rule: Rule
    clause: str
    #: each engine's value type (layout type grammar), taken from the spec's method table
    result: str = "any"


#: method name → the client's rule, derived from the conforming aggregation recorded in
#: the spec's method table (:data:`ecp.spec.utility_methods.UTILITY_METHODS`), the one
#: place where each method's rule, clause and result type are defined.
UTILITY_RULES: Mapping[str, MethodRule] = {
    m.name: MethodRule(Rule(m.aggregation), m.aggregation_clause, m.result)
    for m in UTILITY_METHODS.values()
}

#: methods in neither table: sent to every engine, ``{rank: value}`` returned (``ECP-UTIL-11``)
DEFAULT_RULE = MethodRule(Rule.RAW, "ECP-UTIL-11")


class UtilityAggregation:
    """The aggregation table: which engines a call goes to and how their replies combine."""

    def __init__(self, rules: Mapping[str, MethodRule] = UTILITY_RULES) -> None:
        self.rules = rules

    def rule(self, method: str) -> MethodRule:
        return self.rules.get(method, DEFAULT_RULE)

    def targets(self, method: str, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The engines a call goes to: all of them (``ECP-UTIL-4``/``-7``)."""
        return ranks

    def value_of(self, method: str, rank: int, reply: UtilityOutput) -> Any:
        """One engine's value, type-checked; failures are left to :meth:`aggregate`."""
        rule = self.rule(method)
        if reply.result is None:
            if rule.rule is Rule.UNIT:
                return None  # a nil result is a unit answer (the Rust client's reading)
            raise UtilityResultDecode(method, rank, "[type_info, value] envelope", None)
        value = reply.result.value
        if rule.rule in (Rule.UNIT, Rule.FLATTEN):
            return value  # discarded / a non-list counts as one element (the Rust client's reading)
        if not value_matches(rule.result, value):
            raise UtilityResultDecode(method, rank, rule.result, value)
        return value

    def aggregate(self, method: str, replies: Mapping[int, UtilityOutput], *, each: bool = False) -> Any:
        """Combine every engine's reply (``{rank: UtilityOutput}``) into one result; with
        ``each``, ``(result, {rank: value})``, so that a caller can say which engine answered what."""
        ranks = sorted(replies)
        failures = {r: replies[r].failure_message for r in ranks
                    if replies[r].failure_message is not None}
        values: dict[int, Any] = {}
        decode_error: UtilityResultDecode | None = None
        for r in ranks:
            if r in failures:
                continue
            try:
                values[r] = self.value_of(method, r, replies[r])
            except UtilityResultDecode as exc:
                decode_error = decode_error or exc
        if failures:
            raise UtilityCallFailed(method, failures, values)  # type: ignore[arg-type]
        if decode_error is not None:
            raise decode_error
        result = self.combine(method, values)
        return (result, dict(sorted(values.items()))) if each else result

    def combine(self, method: str, values: Mapping[int, Any]) -> Any:
        """Apply the method's rule to already type-checked values."""
        rule = self.rule(method).rule
        ordered = [values[r] for r in sorted(values)]
        if rule is Rule.UNIT:
            return None
        if rule is Rule.RAW:
            return dict(sorted(values.items()))
        if not ordered:
            raise InconsistentUtilityResults(method, {})
        if rule is Rule.CONSENSUS:
            first = ordered[0]
            if any(v != first or type(v) is not type(first) for v in ordered[1:]):
                raise InconsistentUtilityResults(method, dict(sorted(values.items())))
            return first
        if rule is Rule.AND:
            return all(ordered)
        if rule is Rule.FLATTEN:
            flat: list[Any] = []
            for v in ordered:
                flat.extend(v if isinstance(v, list) else [v])
            return flat
        raise AssertionError(rule)
