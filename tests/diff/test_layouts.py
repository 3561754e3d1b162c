"""Layout snapshots: the checked-in files, the introspection, the type grammar, validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ecp.spec import EngineCoreRequest, SamplingParams
from ecp.spec.layout import types as wt
from ecp.spec.layout.introspect import current_layout
from ecp.spec.layout.model import LayoutError, decode_layout, encode_layout
from ecp.spec.layout.resolve import load_shipped, resolve, shipped_names
from ecp.spec.utility_methods import UTILITY_METHODS

LAYOUTS = Path(__file__).resolve().parents[2] / "spec" / "layouts"


@pytest.mark.parametrize("name", shipped_names())
def test_shipped_layouts_are_generated_valid_and_canonically_formatted(name):
    raw = (LAYOUTS / f"{name}.json").read_bytes()
    layout = decode_layout(raw, name)
    assert layout.name == name
    assert encode_layout(layout) == raw
    prov = layout.provenance
    assert prov is not None and prov.tree == "wheel" and prov.extractor == "vllm-ast/1"
    assert prov.wheel.startswith(f"vllm-{prov.vllm_version}-") and len(prov.sha256) == 64
    assert layout.vllm_version == prov.vllm_version and name == "vllm-" + ".".join(prov.vllm_version.split(".")[:2])


def test_shipped_names_and_aliases():
    assert shipped_names() == [f"vllm-0.{n}" for n in range(20, 34)]  # 0.20 ... the newest, by version
    assert load_shipped("vllm-0.33.0").name == "vllm-0.33"
    assert resolve("vllm-0.22").vllm_version == "0.22.1"  # the newest patch of the minor
    assert resolve("current") == current_layout()


def test_ecp_spec_types_match_the_real_0_33_array_payloads():
    # The arrays whose positions matter most agree field by field with vLLM 0.33.0.
    ours, real = current_layout(), load_shipped("vllm-0.33")
    for name in ("EngineCoreRequest", "EngineCoreOutput", "EngineCoreOutputs", "UtilityOutput"):
        assert [f.name for f in ours.messages[name].fields] == [f.name for f in real.messages[name].fields], name


def test_introspection_matches_the_wire_facts():
    layout = current_layout()
    req = layout.messages["EngineCoreRequest"]
    assert (req.encoding, req.direction, req.frame) == ("array", "frontend->engine", "ADD")
    assert len(req.fields) == 22 and req.required_count == 9
    assert [f.name for f in req.fields][19:] == ["abort_immediately", "session_id", "kv_hints"]
    assert req.field("prompt_embeds").type == "tensor | nil"
    out = layout.messages["EngineCoreOutput"]
    assert len(out.fields) == 19 and out.field("finish_reason").type == "enum:FinishReason | nil"
    assert out.field("ec_transfer_params").index == 9
    sp = layout.messages["SamplingParams"]
    assert (sp.encoding, sp.omit_defaults, len(sp.fields)) == ("map", True, 43)
    assert sp.field("_all_stop_token_ids").type == "array[int]"  # a set travels as an array
    assert sp.field("output_kind").default == 0
    assert layout.messages["Hello"].tag == ["status", "HELLO"]
    # nested structs inherit the direction of the payload that carries them
    assert layout.messages["LoRARequest"].direction == "frontend->engine"
    assert layout.messages["UtilityResult"].direction == "engine->frontend"
    assert layout.enums["FinishReason"].values == {"STOP": 0, "LENGTH": 1, "ABORT": 2, "ERROR": 3, "REPETITION": 4}
    assert set(layout.enums) == {"FinishReason", "EngineCoreEventType", "RequestOutputKind"}
    assert [(t.byte, t.name, t.on_wire) for t in layout.request_types][3:] == [
        ("03", "UTILITY", True), ("04", "EXECUTOR_FAILED", False), ("05", "WAKEUP", False)]
    assert list(layout.utility_methods) == list(UTILITY_METHODS)
    assert [p.type for p in layout.utility_methods["sleep"].params] == ["int", "str"]


def test_introspection_follows_the_types():
    # The snapshot is derived, not hand-kept: it names exactly the struct's fields.
    layout = current_layout()
    assert [f.name for f in layout.messages["EngineCoreRequest"].fields] == list(EngineCoreRequest.__struct_fields__)
    assert [f.name for f in layout.messages["SamplingParams"].fields] == list(SamplingParams.__struct_fields__)


# --------------------------------------------------------------------------- type grammar
@pytest.mark.parametrize("text", [
    "int", "str | nil", "array[int] | nil", "map[str, any] | nil", "struct:SamplingParams | nil",
    "array[map[str, array[int]]]", "enum:FinishReason | nil", "int | str | nil", "tensor",
])
def test_type_strings_round_trip(text):
    assert str(wt.parse(text)) == text


@pytest.mark.parametrize("text", ["", "array[int", "map[str]", "strng", "struct:", "int |", "array[int]]"])
def test_bad_type_strings_are_refused(text):
    with pytest.raises(wt.TypeSyntaxError):
        wt.parse(text)


@pytest.mark.parametrize("old,new,rel", [
    ("int", "int", "same"),
    ("int", "float", "widened"),          # msgspec takes an int where a float is expected
    ("float", "int", "narrowed"),
    ("str | nil", "str", "narrowed"),
    ("str", "str | nil", "widened"),
    ("int", "str", "changed"),
    ("nil", "bool", "changed"),
    ("array[int]", "array[any]", "widened"),
    ("map[str, str]", "map[str, any]", "widened"),
    ("struct:A", "struct:B", "changed"),
    ("any", "int", "narrowed"),
    ("str | nil", "nil | str", "same"),
])
def test_type_relation(old, new, rel):
    assert wt.relation(wt.parse(old), wt.parse(new)) == rel


# --------------------------------------------------------------------------- validation
def _doc(**changes):
    doc = json.loads((LAYOUTS / "vllm-0.33.json").read_text())
    doc.update(changes)
    return doc


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["messages"]["Hello"]["fields"][0].update(type="boolean"), "Hello.local"),
    (lambda d: d["messages"]["Hello"]["fields"][0].update(type="struct:Nowhere"), "struct:Nowhere"),
    (lambda d: d["messages"]["Hello"]["fields"][1].update(index=5), "indexes"),
    (lambda d: d["messages"]["Hello"]["fields"][1].update(name="local"), "duplicate"),
    (lambda d: d["messages"]["Hello"]["fields"][1].update(default=False), "required field has no default"),
    (lambda d: d["provenance"].update(sha="x"), "not a valid layout"),
    (lambda d: d["request_types"].append({"byte": "00", "name": "X", "on_wire": True}), "listed twice"),
    (lambda d: d["request_types"].append({"byte": "0x7", "name": "X", "on_wire": True}), "hex"),
    (lambda d: d.update(format="other/9"), "format"),
    (lambda d: d["messages"]["Hello"].update(colour="red"), "not a valid layout"),
    (lambda d: d["utility_methods"]["sleep"].update(result="void"), "utility sleep result"),
])
def test_invalid_layouts_are_refused_with_the_offending_entry(mutate, needle):
    doc = _doc()
    mutate(doc)
    with pytest.raises(LayoutError, match=needle):
        decode_layout(json.dumps(doc), "fixture")


def test_not_json_is_refused():
    with pytest.raises(LayoutError, match="not JSON"):
        decode_layout(b"{nope", "fixture")


def test_the_reference_client_knows_only_methods_of_the_spec_table():
    # The client's aggregation table and the spec's UTILITY table describe the same methods.
    from ecp.reference.client.aggregation import UTILITY_RULES

    assert set(UTILITY_RULES) <= set(UTILITY_METHODS)
    for name, rule in UTILITY_RULES.items():
        if rule.result in ("bool", "str"):
            assert UTILITY_METHODS[name].result == rule.result, name
