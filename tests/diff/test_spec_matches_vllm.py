"""ecp.spec's own types against the layout extracted from the vLLM 0.33.0 wheel.

Every finding of ``ecp spec diff vllm-0.33 current`` must be a listed
deviation (:mod:`ecp.spec.layout.deviations`) with its reason; none of them
may move a field, drop one or change how many arguments a method takes.
"""

from __future__ import annotations

import json
import re

import pytest

from ecp.spec.diff.compare import Finding, diff_layouts
from ecp.spec.diff.rules import RULES
from ecp.spec.layout.deviations import BASELINE, DEVIATIONS
from ecp.spec.layout.introspect import current_layout
from ecp.spec.layout.model import Layout, decode_layout, encode_layout
from ecp.spec.layout.resolve import load_shipped

#: rules whose findings mean values land in the wrong place or are refused whatever they hold:
#: never acceptable as a deviation
STRUCTURAL = {"DIFF-003", "DIFF-005", "DIFF-011", "DIFF-012", "DIFF-013", "DIFF-014", "DIFF-016", "DIFF-017",
              "DIFF-019", "DIFF-023", "DIFF-031", "DIFF-033", "DIFF-034", "DIFF-035", "DIFF-041", "DIFF-042",
              "DIFF-051", "DIFF-053", "DIFF-054"}


def _key(f: Finding) -> tuple[str, str, str]:
    return (f.rule.id, f.subject, f.message)


def _unlisted(layout: Layout) -> tuple[list[str], list[str]]:
    """(findings not listed as deviations, listed deviations no finding matches)."""
    findings = {_key(f): f for f in diff_layouts(load_shipped(BASELINE), layout)}
    listed = {d.key for d in DEVIATIONS}
    new = [f"{f.severity} {f.rule.id} {f.subject}: {f.message}" for k, f in findings.items() if k not in listed]
    stale = [f"{d.rule} {d.subject}: {d.message}" for d in DEVIATIONS if d.key not in findings]
    return new, stale


def test_every_difference_from_vllm_0_33_is_a_listed_deviation():
    new, stale = _unlisted(current_layout())
    assert not new, "ecp.spec diverges from vLLM 0.33.0; fix the types (or list a deliberate deviation):\n" + \
        "\n".join(new)
    assert not stale, "listed deviations that no longer occur; remove them:\n" + "\n".join(stale)


def test_deviations_are_well_formed_and_listed_once():
    assert len({d.key for d in DEVIATIONS}) == len(DEVIATIONS)
    for d in DEVIATIONS:
        assert d.rule in RULES and d.rule not in STRUCTURAL, d
        assert len(d.reason) > 20, d


def test_no_deviation_moves_a_field_or_changes_an_argument_count():
    real, ours = load_shipped(BASELINE), current_layout()
    renamed = {d.subject for d in DEVIATIONS if d.rule == "DIFF-015"}
    for name, msg in real.messages.items():
        if name not in ours.messages:
            continue
        mine = ours.messages[name]
        assert mine.encoding == msg.encoding, name
        if msg.encoding == "array":
            assert len(mine.fields) == len(msg.fields), name
            for theirs, own in zip(msg.fields, mine.fields):
                assert own.name == theirs.name or f"{name}.{own.name}" in renamed, (name, own.name)
    for name, method in real.utility_methods.items():
        assert name in ours.utility_methods, name
        if method.params is not None:
            # names, and which arguments a caller may leave out (the engine's defaults)
            assert [(p.name, p.required) for p in ours.utility_methods[name].params] == \
                [(p.name, p.required) for p in method.params], name


def test_structs_written_as_maps_are_maps_in_vllm():
    # a "map" or "stats" deviation claims that the bytes are a map either way: check it on the
    # extracted layout
    real = load_shipped(BASELINE)
    for d in DEVIATIONS:
        if d.kind not in ("map", "stats"):
            continue
        names = re.findall(r"struct:(\w+)", d.message) or ([d.subject] if d.rule == "DIFF-002" else [])
        assert names, d
        for name in names:
            assert real.messages[name].encoding == "map", (d.subject, name)


def _edited(edit) -> Layout:
    doc = json.loads(encode_layout(current_layout()))
    edit(doc)
    return decode_layout(json.dumps(doc), "edited")


@pytest.mark.parametrize("edit,needle", [
    # the 0.31 LoRARequest: an element inserted at position 4
    (lambda d: d["messages"]["LoRARequest"]["fields"].insert(
        4, {"index": 4, "name": "tensorizer_config_dict", "type": "map[str, any] | nil", "required": False,
            "default": None}), "DIFF-012 LoRARequest.tensorizer_config_dict"),
    # a required key made optional
    (lambda d: d["messages"]["KvHintAction"]["fields"][3].update(
        type="map[str, any] | nil", required=False, default=None), "KvHintAction.payload"),
    # a utility argument dropped
    (lambda d: d["utility_methods"]["profile"]["params"].pop(), "DIFF-052 utility profile"),
    # a listed deviation changing shape is a new finding too
    (lambda d: d["messages"]["Ready"]["fields"][3].update(type="str | nil"), "Ready.coord_store_port"),
])
def test_a_new_divergence_is_caught(edit, needle):
    layout = _edited(lambda d: _renumber(d, edit))
    new, _ = _unlisted(layout)
    assert any(needle in line for line in new), new


def _renumber(doc, edit) -> None:
    edit(doc)
    for msg in doc["messages"].values():
        for i, f in enumerate(msg["fields"]):
            f["index"] = i
