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
    #: one line: how to make the change compatible (a break can also be accepted: see ``ACCEPT``)
    fix: str = ""


#: how a project accepts a deliberate break (the label the pull-request job of docs/ci.md checks)
ACCEPT = "label the PR `protocol-break` to accept"


_RULES: tuple[Rule, ...] = (
    # messages
    Rule("DIFF-001", "info", "message-added", "a message kind only NEW knows; OLD peers never see it",
         fix='none needed: OLD peers never see it'),
    Rule("DIFF-002", "breaking", "message-removed", "peers built against OLD still send or expect it",
         fix='keep the message until no supported release sends or expects it'),
    Rule("DIFF-003", "breaking", "encoding-changed", "array <-> map: every field is read from the wrong shape",
         fix='keep the encoding; add a new message for the other shape'),
    Rule("DIFF-004", "warning", "direction-changed", "the message now travels between other roles",
         fix='keep the direction; add a new message for the new roles'),
    Rule("DIFF-005", "breaking", "tag-changed", "the tag key or value of a tagged map changed",
         fix='keep the tag: receivers dispatch on it'),
    Rule("DIFF-006", "info", "not-compared", "one layout does not describe it (hand-written layouts list "
                                             "what their source did not show)",
         fix='none needed; describe it in both layouts to compare it'),
    # fields
    Rule("DIFF-010", "info", "field-added-optional", "a new optional trailing field (array) or optional key (map): "
                                                     "old receivers ignore it, new receivers default it",
         fix='none needed'),
    Rule("DIFF-011", "breaking", "field-added-required", "a new required field: senders built against OLD do not "
                                                         "send it and receivers built against NEW reject them",
         fix='give it a default (append it last with a default)'),
    Rule("DIFF-012", "breaking", "field-inserted", "a field inserted before existing positions of an array: every "
                                                   "later field is read from the wrong position",
         fix='append it last with a default instead of inserting it'),
    Rule("DIFF-013", "breaking", "field-removed", "a field removed: OLD peers still send or require it, and in an "
                                                  "array every later field shifts",
         fix='keep the field (deprecate it and keep sending its default)'),
    Rule("DIFF-014", "breaking", "fields-reordered", "array positions of existing fields changed",
         fix='restore the order; append new fields last with a default'),
    Rule("DIFF-015", "warning", "field-renamed-array", "renamed at the same array position: bytes unchanged, "
                                                       "meaning may differ",
         fix='none needed for the bytes; check that the meaning did not change'),
    Rule("DIFF-016", "breaking", "field-renamed-map", "a renamed map key: OLD and NEW peers miss each other's key",
         fix='keep the old key name'),
    Rule("DIFF-017", "breaking", "field-now-required", "an optional field became required: OLD senders may omit it",
         fix='keep a default so that OLD senders may leave it out'),
    Rule("DIFF-018", "info", "field-now-optional-array", "a required array field became optional: senders still "
                                                         "emit full-length arrays",
         fix='none needed'),
    Rule("DIFF-019", "warning", "default-changed", "absent fields are filled with a different value by each side",
         fix='keep the old default'),
    Rule("DIFF-020", "breaking", "type-narrowed", "NEW receivers refuse some values OLD senders send",
         fix='keep accepting every value the old type allows'),
    Rule("DIFF-021", "warning", "type-widened", "NEW senders may send values OLD receivers refuse",
         fix='send values of the old type to peers built against OLD'),
    Rule("DIFF-022", "breaking", "type-changed", "neither side accepts all of the other's values",
         fix='keep the old type; append a new field with a default for the new one'),
    Rule("DIFF-023", "warning", "field-now-optional-map", "a required map key became optional: NEW senders that "
                                                          "omit defaults leave out a key OLD receivers require",
         fix='keep sending the key even when it holds its default'),
    Rule("DIFF-024", "breaking", "type-retyped-widened", "the new type accepts the old values, but NEW senders send "
                                                         "every value as a type OLD receivers refuse (int -> float)",
         fix='keep the old type; append a new field with a default for the new one'),
    # enums
    Rule("DIFF-030", "info", "enum-added", "an enum only NEW uses",
         fix='none needed'),
    Rule("DIFF-031", "breaking", "enum-removed", "an enum OLD peers still send",
         fix='keep the enum while a field may carry it'),
    Rule("DIFF-032", "warning", "enum-value-added", "NEW senders may send a value OLD receivers reject",
         fix='send the new value only to peers built against NEW'),
    Rule("DIFF-033", "breaking", "enum-value-removed", "OLD senders may send a value NEW receivers reject",
         fix='keep the value'),
    Rule("DIFF-034", "breaking", "enum-value-reused", "an integer now means another member",
         fix='give the new member a new value; never reuse one'),
    Rule("DIFF-035", "breaking", "enum-value-renumbered", "a member now travels as another integer",
         fix="keep the member's value (write explicit values instead of relying on auto() order)"),
    # request types
    Rule("DIFF-040", "warning", "request-type-added", "NEW frontends may send a type byte OLD engines do not know",
         fix='send the new type byte only to engines that know it'),
    Rule("DIFF-041", "breaking", "request-type-removed", "OLD frontends still send this type byte",
         fix='keep accepting the type byte'),
    Rule("DIFF-042", "breaking", "request-type-byte-reused", "a type byte now means another request type",
         fix='use a new byte for the new request type'),
    Rule("DIFF-043", "warning", "request-type-wire-changed", "a type byte moved between engine-internal and on-wire",
         fix='keep the type byte where it was'),
    # utility methods
    Rule("DIFF-050", "breaking", "utility-method-added", "a method only NEW engines answer; NEW frontends call it "
                                                         "and OLD engines answer every call with a failure",
         fix='call it only on engines that define it (check READY\'s vllm_version first)'),
    Rule("DIFF-051", "breaking", "utility-method-removed", "OLD frontends still call it; NEW engines answer with a "
                                                           "failure",
         fix='keep the old method name as an alias'),
    Rule("DIFF-052", "breaking", "utility-signature-changed", "positional arguments added, removed, reordered or "
                                                              "retyped",
         fix='keep the old arguments; append new ones last with defaults'),
    Rule("DIFF-053", "warning", "utility-param-renamed", "arguments travel by position: bytes unchanged, meaning "
                                                         "may differ",
         fix='none needed for the bytes; check that the meaning did not change'),
    Rule("DIFF-054", "breaking", "utility-result-changed", "the result type changed incompatibly",
         fix='keep the result type'),
    Rule("DIFF-055", "warning", "utility-result-widened", "NEW engines may return values OLD frontends refuse",
         fix='return values of the old result type'),
    Rule("DIFF-056", "info", "utility-result-narrowed", "NEW engines return a subset of what OLD frontends accept",
         fix='none needed'),
    Rule("DIFF-057", "breaking", "utility-method-unhandled", "the frontend calls a method that no engine-side handler "
                                                             "of the same tree answers: every call fails",
         fix='define the method on the engine core (keep the old method name as an alias)'),
    # a peer's copy (Rust) against a release (Python): ecp.spec.diff.peer
    Rule("DIFF-060", "breaking", "peer-array-length", "the receiver's array takes another number of fields than "
                                                      "the sender writes",
         fix='copy every field, in order; give the trailing ones #[serde(default)]'),
    Rule("DIFF-061", "breaking", "peer-field-misplaced", "a field both sides know sits at another array position: "
                                                         "every value from there on lands in the wrong field",
         fix='put the field where the Python struct has it; append new ones last'),
    Rule("DIFF-062", "breaking", "peer-field-type", "the receiver's type does not accept what the sender writes",
         fix='declare the type the other side writes (an integer where Python has int, Option where nil travels)'),
    Rule("DIFF-063", "breaking", "peer-key-missing", "the receiver requires a field the sender leaves out",
         fix='send the field always, or give the reader a default (#[serde(default)] / Option)'),
    Rule("DIFF-064", "breaking", "peer-enum-value", "an enum member travels as another integer, or the reader "
                                                    "has no member for a value",
         fix='copy the values exactly (#[repr] discriminants equal to Python\'s)'),
    Rule("DIFF-065", "breaking", "peer-request-type", "a request-type byte means another request type",
         fix='use the bytes of EngineCoreRequestType exactly'),
    Rule("DIFF-066", "breaking", "peer-utility-unknown", "the peer calls a UTILITY method the engine does not "
                                                         "define",
         fix='call a method the engine defines (check the spelling)'),
    Rule("DIFF-067", "breaking", "peer-utility-arguments", "the peer passes a number of arguments the engine's "
                                                           "method does not take",
         fix='pass the arguments the engine method takes, in order'),
    Rule("DIFF-068", "warning", "peer-field-renamed", "an array position both sides name differently: same "
                                                      "bytes, the meaning may differ",
         fix='name the field as the Python struct does'),
    Rule("DIFF-069", "info", "peer-float32", "the peer sends float32 where Python sends float64; receivers "
                                             "accept both (ECP-COMPAT-2)",
         fix='none needed; send f64 where full precision matters'),
    Rule("DIFF-070", "info", "peer-keys-not-copied", "a map the peer's copy describes with fewer keys than the "
                                                     "release: receivers skip what they do not know, senders "
                                                     "leave Python's defaults in place",
         fix='none needed on the wire; copy the keys the peer should use'),
    Rule("DIFF-071", "breaking", "peer-unknown-key-refused", "the reader refuses keys it does not know "
                                                            "(#[serde(deny_unknown_fields)]) and the sender writes "
                                                            "some",
         fix='copy every key the other side writes, or drop deny_unknown_fields'),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}
