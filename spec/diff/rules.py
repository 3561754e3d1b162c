"""The rules of ``ecp spec diff``: stable ids, severities, meaning.

Ids are ``DIFF-<nnn>``; they are stable and never reused (they are not spec
clauses, so they stay out of the ``ECP-<AREA>-n`` namespace). Severity says
what a peer must expect when one side is built against the OLD layout and
the other against the NEW one:

* ``breaking``: some messages fail to decode or decode into the wrong fields;
* ``warning``: the wire still decodes, but meaning may be lost or new values
  may be refused by old receivers;
* ``info``: compatible in both directions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["breaking", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("breaking", "warning", "info")


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    name: str
    summary: str


_RULES: tuple[Rule, ...] = (
    # messages
    Rule("DIFF-001", "info", "message-added", "a message kind only NEW knows; OLD peers never see it"),
    Rule("DIFF-002", "breaking", "message-removed", "peers built against OLD still send or expect it"),
    Rule("DIFF-003", "breaking", "encoding-changed", "array <-> map: every field is read from the wrong shape"),
    Rule("DIFF-004", "warning", "direction-changed", "the message now travels between other roles"),
    Rule("DIFF-005", "breaking", "tag-changed", "the tag key or value of a tagged map changed"),
    Rule("DIFF-006", "info", "not-compared", "one layout does not describe it (hand-written layouts list "
                                             "what their source did not show)"),
    # fields
    Rule("DIFF-010", "info", "field-added-optional", "a new optional trailing field (array) or optional key (map): "
                                                     "old receivers ignore it, new receivers default it"),
    Rule("DIFF-011", "breaking", "field-added-required", "a new required field: senders built against OLD do not "
                                                         "send it and receivers built against NEW reject them"),
    Rule("DIFF-012", "breaking", "field-inserted", "a field inserted before existing positions of an array: every "
                                                   "later field is read from the wrong position"),
    Rule("DIFF-013", "breaking", "field-removed", "a field removed: OLD peers still send or require it, and in an "
                                                  "array every later field shifts"),
    Rule("DIFF-014", "breaking", "fields-reordered", "array positions of existing fields changed"),
    Rule("DIFF-015", "warning", "field-renamed-array", "renamed at the same array position: bytes unchanged, "
                                                       "meaning may differ"),
    Rule("DIFF-016", "breaking", "field-renamed-map", "a renamed map key: OLD and NEW peers miss each other's key"),
    Rule("DIFF-017", "breaking", "field-now-required", "an optional field became required: OLD senders may omit it"),
    Rule("DIFF-018", "info", "field-now-optional-array", "a required array field became optional: senders still "
                                                         "emit full-length arrays"),
    Rule("DIFF-019", "warning", "default-changed", "absent fields are filled with a different value by each side"),
    Rule("DIFF-020", "breaking", "type-narrowed", "NEW receivers refuse some values OLD senders send"),
    Rule("DIFF-021", "warning", "type-widened", "NEW senders may send values OLD receivers refuse"),
    Rule("DIFF-022", "breaking", "type-changed", "neither side accepts all of the other's values"),
    Rule("DIFF-023", "warning", "field-now-optional-map", "a required map key became optional: NEW senders that "
                                                          "omit defaults leave out a key OLD receivers require"),
    # enums
    Rule("DIFF-030", "info", "enum-added", "an enum only NEW uses"),
    Rule("DIFF-031", "breaking", "enum-removed", "an enum OLD peers still send"),
    Rule("DIFF-032", "warning", "enum-value-added", "NEW senders may send a value OLD receivers reject"),
    Rule("DIFF-033", "breaking", "enum-value-removed", "OLD senders may send a value NEW receivers reject"),
    Rule("DIFF-034", "breaking", "enum-value-reused", "an integer now means another member"),
    Rule("DIFF-035", "breaking", "enum-value-renumbered", "a member now travels as another integer"),
    # request types
    Rule("DIFF-040", "warning", "request-type-added", "NEW frontends may send a type byte OLD engines do not know"),
    Rule("DIFF-041", "breaking", "request-type-removed", "OLD frontends still send this type byte"),
    Rule("DIFF-042", "breaking", "request-type-byte-reused", "a type byte now means another request type"),
    Rule("DIFF-043", "warning", "request-type-wire-changed", "a type byte moved between engine-internal and on-wire"),
    # utility methods
    Rule("DIFF-050", "info", "utility-method-added", "a method only NEW engines answer"),
    Rule("DIFF-051", "breaking", "utility-method-removed", "OLD frontends still call it; NEW engines answer with a "
                                                           "failure"),
    Rule("DIFF-052", "breaking", "utility-signature-changed", "positional arguments added, removed, reordered or "
                                                              "retyped"),
    Rule("DIFF-053", "warning", "utility-param-renamed", "arguments travel by position: bytes unchanged, meaning "
                                                         "may differ"),
    Rule("DIFF-054", "breaking", "utility-result-changed", "the result type changed incompatibly"),
    Rule("DIFF-055", "warning", "utility-result-widened", "NEW engines may return values OLD frontends refuse"),
    Rule("DIFF-056", "info", "utility-result-narrowed", "NEW engines return a subset of what OLD frontends accept"),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}
