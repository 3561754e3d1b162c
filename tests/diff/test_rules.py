"""Every diff rule fires on its before/after fixture, and only there."""

from __future__ import annotations

import copy
import json

import pytest

from ecp.spec.diff.compare import diff_layouts
from ecp.spec.diff.rules import RULES
from ecp.spec.layout.model import FORMAT, decode_layout


def field(i, name, type_="int", required=False, default=0):
    f = {"index": i, "name": name, "type": type_, "required": required}
    if not required:
        f["default"] = default
    return f


def base() -> dict:
    """A small two-message layout: an array request (frontend->engine), a map reply."""
    return {
        "format": FORMAT, "name": "before", "vllm_version": "0.0.1", "source": "test fixture",
        "messages": {
            "Req": {"encoding": "array", "direction": "frontend->engine", "frame": "ADD", "fields": [
                field(0, "id", "str", required=True),
                field(1, "count", "int", required=True),
                field(2, "reason", "enum:Why | nil", default=None),
                field(3, "flag", "bool", default=False),
            ]},
            "Reply": {"encoding": "map", "direction": "engine->frontend", "omit_defaults": True, "fields": [
                field(0, "size", "int", required=True),
                field(1, "label", "str | nil", default=None),
            ]},
        },
        "enums": {"Why": {"values": {"STOP": 0, "LENGTH": 1}}},
        "request_types": [
            {"byte": "00", "name": "ADD", "on_wire": True},
            {"byte": "01", "name": "ABORT", "on_wire": True},
            {"byte": "04", "name": "INTERNAL", "on_wire": False},
        ],
        "utility_methods": {
            "sleep": {"result": "nil", "params": [{"name": "level", "type": "int"}]},
            "is_sleeping": {"result": "bool", "params": []},
        },
    }


def fields(doc, message):
    return doc["messages"][message]["fields"]


def reindex(doc, message):
    for i, f in enumerate(fields(doc, message)):
        f["index"] = i


def insert(doc, message, at, f):
    fields(doc, message).insert(at, f)
    reindex(doc, message)


def remove(doc, message, name):
    doc["messages"][message]["fields"] = [f for f in fields(doc, message) if f["name"] != name]
    reindex(doc, message)


def set_field(doc, message, fname, **changes):
    for f in fields(doc, message):
        if f["name"] == fname:
            f.update(changes)
            if f.get("required"):
                f.pop("default", None)


# rule id -> function that edits a copy of base() into the "after" layout
EDITS = {
    "DIFF-001": lambda d: d["messages"].update(
        {"Extra": {"encoding": "map", "direction": "engine->frontend", "fields": [field(0, "x")]}}),
    "DIFF-002": lambda d: d["messages"].pop("Reply"),
    "DIFF-003": lambda d: d["messages"]["Reply"].update(encoding="array", omit_defaults=False),
    "DIFF-004": lambda d: d["messages"]["Reply"].update(direction="frontend->engine"),
    "DIFF-005": lambda d: d["messages"]["Reply"].update(tag=["status", "REPLY"]),
    "DIFF-006": lambda d: (d["messages"].pop("Reply"), d.update(not_described=["Reply"])),
    "DIFF-010": lambda d: fields(d, "Req").append(field(4, "extra", "str | nil", default=None)),
    "DIFF-011": lambda d: fields(d, "Reply").append(field(2, "needed", "int", required=True)),
    "DIFF-012": lambda d: insert(d, "Req", 2, field(2, "wedge", "str | nil", default=None)),
    "DIFF-013": lambda d: remove(d, "Req", "flag"),
    "DIFF-014": lambda d: (fields(d, "Req").reverse(), reindex(d, "Req"),
                           [set_field(d, "Req", n, required=False, default=None) for n in ("id", "count")]),
    "DIFF-015": lambda d: set_field(d, "Req", "flag", name="enabled"),
    "DIFF-016": lambda d: set_field(d, "Reply", "label", name="title"),
    "DIFF-017": lambda d: set_field(d, "Req", "flag", required=True),
    "DIFF-018": lambda d: set_field(d, "Req", "count", required=False, default=1),
    "DIFF-019": lambda d: set_field(d, "Req", "flag", default=True),
    "DIFF-020": lambda d: set_field(d, "Reply", "label", type="str"),
    "DIFF-021": lambda d: set_field(d, "Req", "count", type="int | str"),
    "DIFF-022": lambda d: set_field(d, "Req", "count", type="str"),
    "DIFF-024": lambda d: set_field(d, "Req", "count", type="float"),
    "DIFF-023": lambda d: set_field(d, "Reply", "size", required=False, default=0),
    "DIFF-030": lambda d: d["enums"].update({"Kind": {"values": {"A": 0}}}),
    "DIFF-031": lambda d: (d["enums"].pop("Why"), set_field(d, "Req", "reason", type="int | nil")),
    "DIFF-032": lambda d: d["enums"]["Why"]["values"].update(ABORT=2),
    "DIFF-033": lambda d: d["enums"]["Why"]["values"].pop("LENGTH"),
    "DIFF-034": lambda d: d["enums"]["Why"].update(values={"STOP": 0, "ABORT": 1}),
    "DIFF-035": lambda d: d["enums"]["Why"]["values"].update(LENGTH=5),
    "DIFF-040": lambda d: d["request_types"].append({"byte": "02", "name": "WAVE", "on_wire": True}),
    "DIFF-041": lambda d: d["request_types"].pop(1),
    "DIFF-042": lambda d: d["request_types"][1].update(name="CANCEL"),
    "DIFF-043": lambda d: d["request_types"][2].update(on_wire=True),
    "DIFF-050": lambda d: d["utility_methods"].update({"wake_up": {"result": "bool", "params": []}}),
    "DIFF-051": lambda d: d["utility_methods"].pop("is_sleeping"),
    "DIFF-052": lambda d: d["utility_methods"]["sleep"]["params"].append({"name": "mode", "type": "str"}),
    "DIFF-053": lambda d: d["utility_methods"]["sleep"]["params"][0].update(name="depth"),
    "DIFF-054": lambda d: d["utility_methods"]["is_sleeping"].update(result="str"),
    "DIFF-055": lambda d: d["utility_methods"]["is_sleeping"].update(result="bool | nil"),
    "DIFF-056": lambda d: d["utility_methods"]["sleep"].update(result="nil"),
    "DIFF-057": lambda d: d["utility_methods"].update(is_sleeping={"result": "any", "handled": False}),
}
# Edits of the "before" side, where the rule needs a different starting point.
BEFORE_EDITS = {"DIFF-056": lambda d: d["utility_methods"]["sleep"].update(result="bool | nil")}


def layouts(rule_id):
    before, after = base(), base()
    BEFORE_EDITS.get(rule_id, lambda d: None)(before)
    EDITS[rule_id](after)
    after["name"] = "after"
    return decode_layout(json.dumps(before)), decode_layout(json.dumps(after))


#: rules between a peer's Rust copy and a Python release: their fixtures are Rust crates
#: (tests/diff/test_rust.py)
PEER_RULES = {r for r in RULES if RULES[r].name.startswith("peer-")}


def test_every_rule_has_a_fixture():
    assert set(EDITS) == set(RULES) - PEER_RULES


@pytest.mark.parametrize("rule_id", sorted(set(RULES) - PEER_RULES))
def test_rule_fires_on_its_fixture(rule_id):
    old, new = layouts(rule_id)
    findings = diff_layouts(old, new)
    fired = {f.rule.id for f in findings}
    assert rule_id in fired, [f.message for f in findings]
    # Each fixture changes one thing, so only its rule fires, except where the
    # edit cannot help touching something else (listed here).
    implied = {
        "DIFF-014": {"DIFF-018"},  # reversing puts optional fields first: the required ones become optional
        "DIFF-031": {"DIFF-022"},  # the field that used the removed enum is retyped
    }
    assert fired == {rule_id} | implied.get(rule_id, set()), sorted(fired)


@pytest.mark.parametrize("rule_id", sorted(set(RULES) - PEER_RULES))
def test_fixture_is_clean_against_itself(rule_id):
    old, new = layouts(rule_id)
    assert diff_layouts(old, old) == []
    assert diff_layouts(new, new) == []


def test_severity_and_direction_of_key_rules():
    old, new = layouts("DIFF-011")
    (f,) = diff_layouts(old, new)
    assert f.severity == "breaking" and f.affects == "old->new"
    assert f.impact() == "engines built against OLD -> frontends built against NEW"
    old, new = layouts("DIFF-010")
    (f,) = diff_layouts(old, new)
    assert f.severity == "info" and f.affects == "none"
    # a rename warns for an array but breaks a map
    assert {f.severity for f in diff_layouts(*layouts("DIFF-015"))} == {"warning"}
    assert {f.severity for f in diff_layouts(*layouts("DIFF-016"))} == {"breaking"}


def test_inserted_field_names_the_shifted_ones():
    (f,) = diff_layouts(*layouts("DIFF-012"))
    assert f.subject == "Req.wedge"
    assert "shifts reason, flag" in f.message


def test_required_array_field_appended_breaks_old_senders():
    before = base()
    after = copy.deepcopy(before)
    fields(after, "Req").append(field(4, "must", "int", required=True))
    (f,) = diff_layouts(decode_layout(json.dumps(before)), decode_layout(json.dumps(after)))
    assert (f.rule.id, f.affects) == ("DIFF-011", "old->new")
    assert f.impact().startswith("frontends built against OLD")
