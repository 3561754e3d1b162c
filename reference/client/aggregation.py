"""How a fanned-out utility call's per-engine answers become one result.

THE table (:data:`UTILITY_RULES`) is data: method → (rule, result type,
clause). Every utility call goes to every engine and waits for all of them
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
raw            ``{rank: value}`` for the caller to interpret (methods not in the table)
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

from .config import BUG_FIRST_ENGINE_IS_SLEEPING, BUG_RESET_PREFIX_CACHE_ANY
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
    #: expected type of each engine's value: "bool", "str", "list", "list[str]", "any"
    result: str
    clause: str


def _r(rule: Rule, result: str, clause: str) -> MethodRule:
    return MethodRule(rule, result, clause)


_CONS, _AND, _FLAT, _UNIT, _RAW = Rule.CONSENSUS, Rule.AND, Rule.FLATTEN, Rule.UNIT, Rule.RAW

#: method name → rule. The one place the client's aggregation is defined.
UTILITY_RULES: Mapping[str, MethodRule] = {
    # consensus (ECP-UTIL-4)
    "is_sleeping": _r(_CONS, "bool", "ECP-UTIL-4"),
    "is_scheduler_paused": _r(_CONS, "bool", "ECP-UTIL-4"),
    "get_weight_version": _r(_CONS, "str", "ECP-UTIL-4"),
    # AND (ECP-UTIL-5)
    "reset_prefix_cache": _r(_AND, "bool", "ECP-UTIL-5"),
    "wake_up": _r(_AND, "bool", "ECP-UTIL-5"),
    "add_lora": _r(_AND, "bool", "ECP-UTIL-5"),
    "remove_lora": _r(_AND, "bool", "ECP-UTIL-5"),
    # flatten (ECP-UTIL-6)
    "collective_rpc": _r(_FLAT, "any", "ECP-UTIL-6"),
    "compute_weight_checksums": _r(_FLAT, "any", "ECP-UTIL-6"),
    # unit (ECP-UTIL-7: wait for every engine, discard the values)
    "sleep": _r(_UNIT, "any", "ECP-UTIL-7"),
    "pause_scheduler": _r(_UNIT, "any", "ECP-UTIL-7"),
    "pause_generation": _r(_UNIT, "any", "ECP-UTIL-7"),
    "resume_scheduler": _r(_UNIT, "any", "ECP-UTIL-7"),
    "profile": _r(_UNIT, "any", "ECP-UTIL-7"),
    "reset_mm_cache": _r(_UNIT, "any", "ECP-UTIL-7"),
    "reset_encoder_cache": _r(_UNIT, "any", "ECP-UTIL-7"),
    "release_kv_cache_memory": _r(_UNIT, "any", "ECP-UTIL-7"),
    "set_weight_version": _r(_UNIT, "any", "ECP-UTIL-7"),
    "execute_dummy_batch": _r(_UNIT, "any", "ECP-UTIL-7"),
    "add_remote_kv_handshake": _r(_UNIT, "any", "ECP-UTIL-7"),
    "save_sharded_state": _r(_UNIT, "any", "ECP-UTIL-7"),
    # raw: one typed value per engine (ECP-UTIL-9)
    "get_supported_tasks": _r(_RAW, "list[str]", "ECP-UTIL-9"),
    "list_loras": _r(_RAW, "list", "ECP-UTIL-9"),
    "pin_lora": _r(_RAW, "bool", "ECP-UTIL-9"),
    "get_kv_connector_handshake_entries": _r(_RAW, "list", "ECP-UTIL-9"),
}

DEFAULT_RULE = _r(_RAW, "any", "ECP-UTIL-7")

_MISSING = object()


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "any":
        return True
    if expected == "bool":
        return isinstance(value, bool)
    if expected == "str":
        return isinstance(value, str)
    if expected == "list":
        return isinstance(value, list)
    if expected == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    raise ValueError(f"unknown result type {expected!r} in the aggregation table")


class UtilityAggregation:
    """The aggregation table plus the bug knobs that bend it."""

    def __init__(self, bugs: frozenset[str] = frozenset(),
                 rules: Mapping[str, MethodRule] = UTILITY_RULES) -> None:
        self.rules = rules
        self.bugs = bugs

    def rule(self, method: str) -> MethodRule:
        return self.rules.get(method, DEFAULT_RULE)

    def targets(self, method: str, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The engines a call goes to: all of them (``ECP-UTIL-4``/``-7``)."""
        if BUG_FIRST_ENGINE_IS_SLEEPING in self.bugs and self.rule(method).rule is Rule.CONSENSUS:
            return ranks[:1]
        return ranks

    def value_of(self, method: str, rank: int, reply: UtilityOutput) -> Any:
        """One engine's value, type-checked; failures are left to :meth:`aggregate`."""
        rule = self.rule(method)
        if reply.result is None:
            if rule.rule is Rule.UNIT:
                return None  # a nil result is a unit answer (the Rust client's reading)
            raise UtilityResultDecode(method, rank, "[type_info, value] envelope", None)
        value = reply.result.value
        if not _type_ok(rule.result, value):
            raise UtilityResultDecode(method, rank, rule.result, value)
        return value

    def aggregate(self, method: str, replies: Mapping[int, UtilityOutput]) -> Any:
        """Combine every engine's reply (``{rank: UtilityOutput}``) into one result."""
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
        return self.combine(method, values)

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
            if method == "reset_prefix_cache" and BUG_RESET_PREFIX_CACHE_ANY in self.bugs:
                return any(ordered)
            return all(ordered)
        if rule is Rule.FLATTEN:
            flat: list[Any] = []
            for v in ordered:
                flat.extend(v if isinstance(v, list) else [v])
            return flat
        raise AssertionError(rule)
