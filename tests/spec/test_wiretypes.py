"""One source of wire types: every release's classes are generated from its layout (plus the hand-written
overlay) as modules a reader can open -- committed for the shipped layouts, written to a cache folder and
imported for any other."""

from __future__ import annotations

import copy
import importlib.util
import inspect
from pathlib import Path

import msgspec
import pytest

from ecp.spec import clauses, codec
from ecp.spec.cli import main
from ecp.spec.layout import types as wt
from ecp.spec.layout import wire
from ecp.spec.layout.codegen import _Types, render
from ecp.spec.layout.model import FieldLayout, LayoutError, MessageLayout, encode_layout
from ecp.spec.layout.resolve import load_shipped, shipped_names
from ecp.spec.overlay import OVERLAY, Note
from ecp.spec.profile import resolve_profile, shipped_profile
from ecp.spec.version import VLLM_RELEASE
from ecp.spec import wiretypes


def test_the_committed_modules_are_the_shipped_layouts_rendered():
    expected = wiretypes.expected_modules()  # (what `ecp spec types` writes and --check compares)
    assert sorted(p.name for p in wiretypes.HERE.glob("*.py") if p.name != "__init__.py") == sorted(expected)
    stale = [name for name, source in expected.items() if (wiretypes.HERE / name).read_text() != source]
    assert stale == [], "regenerate with: ecp spec types"


def test_a_stale_module_is_named_by_the_check(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(wiretypes, "HERE", tmp_path)
    for name in wiretypes.expected_modules():
        (tmp_path / name).write_text("")
    (tmp_path / "vllm_0_1.py").write_text("")
    assert main(["spec", "types", "--check"]) == 1
    err = capsys.readouterr().err
    assert "vllm_0_20.py" in err and "current.py" in err
    assert "differs from its layout" in err and "vllm_0_1.py" in err and "ecp spec types" in err
    assert len(list(tmp_path.glob("*.py"))) == len(wiretypes.expected_modules()) + 1  # --check wrote nothing


def test_every_shipped_profile_takes_its_classes_from_its_committed_module():
    for name in shipped_names():
        release = name[len("vllm-"):]
        profile = shipped_profile(release)
        module = profile.module
        assert module.__name__ == f"ecp.spec.wiretypes.vllm_{release.replace('.', '_')}"
        assert Path(module.__file__).parent == wiretypes.HERE and module.LAYOUT == name
        assert all(cls.__module__ == module.__name__ and wiretypes.is_generated(cls)
                   for cls in [*profile.messages.values(), *profile.enums.values()])
        assert list(profile.messages) == list(profile.layout.messages)
        for cls in profile.messages.values():  # every field's type is one msgspec decodes
            msgspec.msgpack.Decoder(cls, dec_hook=codec._dec_hook)


def test_every_overlay_key_names_something_a_shipped_layout_has_and_every_clause_exists():
    layouts = [load_shipped(n) for n in shipped_names()]
    names = set()
    for lay in layouts:
        names |= set(lay.messages) | set(lay.enums)
        names |= {f"{m}.{f.name}" for m, msg in lay.messages.items() for f in msg.fields}
        names |= {f"{e}.{k}" for e, en in lay.enums.items() for k in en.values}
    assert sorted(set(OVERLAY) - names) == []
    assert sorted(n.clause for n in OVERLAY.values() if n.clause and n.clause not in clauses.CLAUSES) == []


def test_the_overlay_is_applied_to_every_release_that_has_the_message_or_field():
    for name in shipped_names():
        module = shipped_profile(name[len("vllm-"):]).module
        request = inspect.getdoc(module.EngineCoreRequest)
        assert "The ADD payload" in request and "Clause: ECP-REQ-1." in request
        source = inspect.getsource(module.EngineCoreRequest)
        assert "#: The client (``output[i]``) the engine answers this request on.\n    client_index: int = 0" in source
        assert "Invariant: ``inputs`` and ``outputs``" in inspect.getdoc(module.EngineZmqAddresses)


def test_an_unshipped_layout_gets_the_same_source_written_and_imported(tmp_path, monkeypatch):
    monkeypatch.setenv("ECP_CACHE_DIR", str(tmp_path / "cache"))
    layout = copy.deepcopy(load_shipped(f"vllm-{VLLM_RELEASE}"))
    request = layout.messages["EngineCoreRequest"]
    request.fields.append(FieldLayout(index=len(request.fields), name="next_hint", type="str | nil",
                                      required=False, default=None))
    layout.name = "vllm-9.9"
    layout.vllm_version = "9.9.0"
    file = tmp_path / "next.json"
    file.write_bytes(encode_layout(layout))
    profile = resolve_profile(str(file))
    cls = profile.message("EngineCoreRequest")
    assert wiretypes.is_generated(cls) and cls.__module__.startswith("ecp.spec.wiretypes.vllm_9_9_")
    path = Path(inspect.getsourcefile(cls))
    assert path.parent == tmp_path / "cache" / "wiretypes"
    assert path.read_text() == render(layout)  # the committed modules' generator, nothing else
    assert "    next_hint: str | None = None\n" in inspect.getsource(cls)
    value = cls(request_id="r", prompt_token_ids=[1], mm_features=None, sampling_params=None, pooling_params=None,
                arrival_time=0.0, lora_request=None, cache_salt=None, data_parallel_rank=None, next_hint="x")
    assert profile.codec.decode_input(profile.codec.encode_input(value)) == value
    assert wiretypes.load(layout) is profile.module  # imported once


def _layout_with(types: dict[str, str]):
    layout = copy.deepcopy(load_shipped(f"vllm-{VLLM_RELEASE}"))
    layout.messages["Probe"] = MessageLayout(encoding="map", direction="both", fields=[
        FieldLayout(index=i, name=n, type=t, required=True) for i, (n, t) in enumerate(types.items())])
    layout.name = "vllm-probe"
    return layout


#: unions msgspec decodes as one type, and unions it does not
UNIONS = {
    "ok_scalar": ("int | float | str | bool | nil", True),
    "str_and_bytes": ("str | bytes", False),
    "ok_containers": ("array[int] | map[str, int] | nil", True),
    "ok_struct": ("struct:EngineCoreOutput | map[str, int] | str", True),
    "two_structs": ("struct:EngineCoreOutput | struct:SchedulerStats", False),
    "ok_tensor": ("tensor | nil", True),
    "ok_tagged": ("struct:Hello | struct:Ready", True),
    "two_ints": ("int | enum:FinishReason", False),
    "two_arrays": ("array[int] | struct:EngineCoreOutput", False),
    "two_maps": ("map[str, int] | struct:SchedulerStats", False),
    "tensor_and_list": ("tensor | array[int]", False),
    "nested": ("array[int | enum:FinishReason]", False),
    "nested_map": ("map[str, str | bytes]", False),
    "repeated": ("int | int | nil", True),
}


def test_the_generator_widens_exactly_the_unions_msgspec_cannot_decode():
    layout = _layout_with({name: t for name, (t, _) in UNIONS.items()})
    types = _Types(layout)
    module = wiretypes.load(layout)
    for name, (text, decodable) in UNIONS.items():
        parsed = wt.parse(text)
        assert types.decodable(parsed) is decodable, name
        try:  # msgspec's own verdict on the type the generator would have written
            msgspec.msgpack.Decoder(eval(types.type(parsed), vars(module)), dec_hook=codec._dec_hook)
        except TypeError:
            assert not decodable, name
        else:
            assert decodable, name
    assert module.WIDENED == tuple(f"Probe.{n}" for n, (_, ok) in UNIONS.items() if not ok)
    msgspec.msgpack.Decoder(module.Probe, dec_hook=codec._dec_hook)


def test_every_field_of_the_newest_layout_is_judged_as_msgspec_judges_it():
    layout = load_shipped(f"vllm-{VLLM_RELEASE}")
    types, module = _Types(layout), shipped_profile(VLLM_RELEASE).module
    for name, msg in layout.messages.items():
        for f in msg.fields:
            msgspec.msgpack.Decoder(eval(types.type(f.wire_type), vars(module)), dec_hook=codec._dec_hook)
            assert types.decodable(f.wire_type), f"{name}.{f.name}"


def test_a_name_python_cannot_take_is_refused_or_renamed():
    layout = _layout_with({"class": "int", "ok": "str"})
    source = render(layout)
    assert '    field_0: int = msgspec.field(name="class")\n' in source
    module = wiretypes.load(layout)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode({"class": 1, "ok": "x"}), type=module.Probe).field_0 == 1
    bad = _layout_with({"x": "int"})
    bad.messages["msgspec"] = bad.messages.pop("Probe")
    with pytest.raises(LayoutError, match="cannot be a Python class name"):
        render(bad)


def test_a_note_renders_its_doc_invariant_and_clause():
    assert Note("Doc.", clause="ECP-REQ-1", invariant="x > 0.").text() == "Doc.\n\nInvariant: x > 0.\n\nClause: ECP-REQ-1."


def test_a_pin_replaces_only_an_any_and_a_decode_limit_keeps_messages_untyped(tmp_path):
    # every pin of the overlay lands on a field some shipped layout types ``any`` (and render() refuses it
    # on any other field: a pin is knowledge the extractor lacked, never a second opinion on a typed field)
    pins = {k: n for k, n in OVERLAY.items() if n.pin}
    assert pins and all(n.why for n in pins.values())
    for key in pins:
        message, field = key.split(".")
        types = {str(f.wire_type) for n in shipped_names() for f in load_shipped(n).messages.get(
            message, MessageLayout("map", "both", [])).fields if f.name == field}
        assert types == {"any"}, key
    layout = _layout_with({"pinned": "any", "typed": "int", "stats": "array[struct:PrefillStats] | nil",
                           "ids": "array[str] | nil"})
    overlay = {**OVERLAY, "Probe.pinned": Note(pin="struct:UtilityResult | nil"), "Probe.stats": Note(receive="any"),
               "Probe.ids": Note(holds="set")}
    source = render(layout, overlay)
    assert "    pinned: envelope.UtilityResult | None\n" in source and "    stats: list[Any] | None\n" in source
    assert "    ids: set[str] | None\n" in source
    (tmp_path / "probe_overlay.py").write_text(source)
    spec_ = importlib.util.spec_from_file_location("probe_overlay", tmp_path / "probe_overlay.py")
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    probe = module.Probe
    value = msgspec.msgpack.decode(msgspec.msgpack.encode(
        {"pinned": [None, 7], "typed": 1, "stats": [{"num_prompt_tokens": "not checked"}], "ids": ["a", "a"]}),
        type=probe)
    assert value.pinned.value == 7 and value.stats == [{"num_prompt_tokens": "not checked"}] and value.ids == {"a"}
    with pytest.raises(LayoutError, match="Probe.typed is typed int there.*may only replace any"):
        render(layout, {**overlay, "Probe.typed": Note(pin="str")})


#: ecp.spec's public wire types: every one is the newest release's generated class (what they do beyond their
#: fields is a base of spec/behaviour.py the overlay names)
GENERATED_API = ("EngineCoreRequest", "MultiModalFeatureSpec", "SamplingParams", "EngineCoreOutputs", "EngineCoreOutput",
                 "SchedulerStats", "UtilityOutput", "Ready", "EngineCoreReadyResponse", "Hello", "EngineCoreEvent", "RequestError", "PrefillStats", "LogprobsLists", "LogprobsTensors",
                 "SamplingMaskLists", "LoRARequest", "LateInteractionParams", "LateChunkingParams", "PoolingParams",
                 "KvHintAction", "KvHintsEnvelope", "EngineZmqAddresses", "EngineHandshakeMetadata", "FinishReason",
                 "EngineCoreEventType", "RequestOutputKind")


def test_the_public_api_takes_the_newest_release_s_generated_classes():
    from ecp import spec
    from ecp.spec.wiretypes import current

    newest = shipped_profile(VLLM_RELEASE)
    assert current.LAYOUT == f"vllm-{VLLM_RELEASE}" and current.MESSAGES is newest.module.MESSAGES
    for name in GENERATED_API:
        cls = getattr(spec, name)
        assert cls is (newest.messages.get(name) or newest.enums.get(name)), name
    assert spec.UtilityResult is spec.envelope.UtilityResult  # the one message of ours a pin names
    assert msgspec.inspect.type_info(spec.UtilityOutput).fields[2].type.types[0].cls is spec.UtilityResult
    # one class per message, whichever codec decoded it
    out = spec.EngineCoreOutput("r", [1], events=[spec.EngineCoreEvent(spec.EngineCoreEventType.QUEUED, 1.0)])
    decoded = spec.decode_outputs(spec.encode_outputs(spec.EngineCoreOutputs(outputs=[out])))
    assert type(decoded.outputs[0].events[0]) is newest.messages["EngineCoreEvent"]
    assert decoded.outputs[0].events[0].type is newest.enums["EngineCoreEventType"].QUEUED


def test_a_base_an_overlay_note_names_is_behaviour_in_every_release_that_has_the_name():
    from ecp.spec import behaviour
    from ecp.spec.errors import InvalidMessageError, RemoteProtocolError

    assert sorted(n.base for n in OVERLAY.values() if n.base and not hasattr(behaviour, n.base)) == []
    for name in shipped_names():
        p = shipped_profile(name[len("vllm-"):])
        assert str(p.enums["FinishReason"].STOP) == "stop"
        addresses = p.messages["EngineZmqAddresses"]
        with pytest.raises(InvalidMessageError, match="equal, non-empty"):
            addresses(inputs=["ipc://a"], outputs=[])
        init = msgspec.msgpack.encode({"addresses": {"inputs": [], "outputs": []}, "parallel_config": {}})
        with pytest.raises(RemoteProtocolError) as err:  # checked while it decodes, whichever release
            p.codec.decode_init(init)
        assert err.value.clause == "ECP-HS-2"
        sampling = p.messages["SamplingParams"]  # normalised while it decodes, checked on demand
        sp = msgspec.msgpack.decode(msgspec.msgpack.encode({"stop": "x", "stop_token_ids": [9], "n": 0}), type=sampling)
        assert sp.stop == ["x"] and sp.bad_words == [] and sp.all_stop_token_ids == {9}
        assert sp.validation_errors() == ["n must be at least 1, got 0"]
        request = p.messages["EngineCoreRequest"]
        add = wire.sample(p.layout, "EngineCoreRequest", "sparse")
        add[request.__struct_fields__.index("sampling_params")] = {"extra_args": {"kv_transfer_params": {"k": 1}}}
        add = msgspec.msgpack.decode(msgspec.msgpack.encode(add), type=request, dec_hook=codec._dec_hook)
        assert add.kv_transfer_params == {"k": 1}
        outputs = p.messages["EngineCoreOutputs"](wave_complete=3)
        assert outputs.is_dp_control and not outputs.is_utility
        assert p.messages["EngineCoreOutput"](request_id="r", new_token_ids=[],
                                              finish_reason=p.enums["FinishReason"].STOP).finished
