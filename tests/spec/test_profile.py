"""Release profiles: every shipped release builds, its classes follow its layout, its codec
speaks its wire, and what it lacks is named."""

from __future__ import annotations

import msgspec
import pytest

from ecp import spec
from ecp.spec.errors import DecodeError, LocalProtocolError, UnknownRequestType
from ecp.spec.layout import wire
from ecp.spec.layout.model import LayoutError, encode_layout
from ecp.spec import VLLM_RELEASE
from ecp.spec.layout.resolve import load_shipped, shipped_names
from ecp.spec.profile import build_profile, resolve_profile, shipped_profile, shipped_releases

RELEASES = shipped_releases()
FIXTURE = "tests/diff/fixtures/engine-tree"  # a tree written for the tests whose layout is the shipped 0.33 one
DIRECTION = {"ADD": "input", "UTILITY": "input", "START_DP_WAVE": "input", "outputs": "output",
             "HELLO": "handshake", "READY": "handshake", "INIT": "init", "ready payload": "ready"}


def test_every_shipped_release_has_a_profile():
    # oldest first, the newest the release ecp.spec's typed messages are; one per shipped layout
    assert RELEASES[-1] == VLLM_RELEASE and RELEASES == sorted(RELEASES, key=lambda r: tuple(map(int, r.split("."))))
    assert len(RELEASES) == len(shipped_names()) and RELEASES[0] == "0.20"  # the oldest: docs/compatibility.md
    for release in RELEASES:
        p = shipped_profile(release)
        assert p.release == release and p.label == f"vLLM {release}"
        assert set(p.messages) == set(p.layout.messages) and set(p.enums) == set(p.layout.enums)
        assert p.widened == ()  # every union of every shipped layout is expressible
        assert p.request_types == {"ADD": b"\x00", "ABORT": b"\x01", "START_DP_WAVE": b"\x02", "UTILITY": b"\x03"}
        assert set(p.utility_methods) == set(p.layout.utility_methods)


@pytest.mark.parametrize("release", RELEASES)
def test_generated_classes_follow_the_layout(release):
    p = shipped_profile(release)
    for name, msg in p.layout.messages.items():
        info = msgspec.inspect.type_info(p.message(name))
        assert [f.encode_name for f in info.fields] == [f.name for f in msg.fields], name
        assert [f.required for f in info.fields] == [f.required for f in msg.fields], name
        assert info.array_like == (msg.encoding == "array"), name
        assert (info.tag_field, info.tag) == ((msg.tag[0], msg.tag[1]) if msg.tag else (None, None)), name
        for f, lf in zip(info.fields, msg.fields):
            if not f.required and lf.default is not None and not isinstance(lf.default, dict):
                default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
                if isinstance(default, set):  # an array the overlay holds as a set (Note.holds)
                    default = sorted(default)
                assert default == lf.default, f"{name}.{lf.name}"


@pytest.mark.parametrize("release", RELEASES)
def test_each_profile_decodes_and_reencodes_its_own_samples(release):
    p = shipped_profile(release)
    for frame, name in p.frames.items():
        for mode in ("full", "sparse"):
            payload = msgspec.msgpack.encode(wire.sample(p.layout, name, mode))
            frames = [p.request_types[frame], payload] if DIRECTION[frame] == "input" else [payload]
            message = p.codec.decode(frames, DIRECTION[frame])
            assert isinstance(message, p.message(name))
            if DIRECTION[frame] == "input":
                again = p.codec.encode_input(message)
                assert again[0] == frames[0]
            elif DIRECTION[frame] == "output":
                again = p.codec.encode_outputs(message)
            else:
                again = [p.codec.encode_handshake(message)]
            assert p.codec.decode(again, DIRECTION[frame]) == message, (frame, mode)
            if p.layout.messages[name].encoding == "array":  # senders write every element
                assert len(msgspec.msgpack.decode(again[-1])) == len(p.layout.messages[name].fields)


def test_a_release_decodes_its_own_array_lengths():
    p32, p33 = shipped_profile("0.32"), shipped_profile("0.33")
    assert len(p32.message("EngineCoreOutput").__struct_fields__) == 18
    assert len(p33.message("EngineCoreOutput").__struct_fields__) == 19
    assert p33.has_field("EngineCoreOutput", "error") and not p32.has_field("EngineCoreOutput", "error")
    assert not p32.has_field("NoSuchMessage", "error")
    out = p32.message("EngineCoreOutputs")(outputs=[p32.message("EngineCoreOutput")(request_id="r", new_token_ids=[5])])
    frames = p32.codec.encode_outputs(out)
    assert len(msgspec.msgpack.decode(frames[0])[1][0]) == 18
    assert p32.codec.decode_outputs(frames) == out
    # ecp.spec's codec (0.33) takes the shorter array too, defaulting the 19th element
    assert spec.decode_outputs(frames).outputs[0].error is None


def test_lora_positions_differ_where_the_layouts_say():
    # 0.31 has tensorizer_config_dict at position 4 of LoRARequest (removed in 0.32): a LoRA ADD
    # of either release fails the other, as between real 0.31 and 0.33 peers
    p31, p33 = shipped_profile("0.31"), shipped_profile("0.33")
    assert p31.message("LoRARequest").__struct_fields__[4] == "tensorizer_config_dict"
    add33 = msgspec.to_builtins(spec.EngineCoreRequest(
        "r", [1], None, None, None, 1.0, spec.LoRARequest("a", 1, "/p"), None, None))
    add31 = list(add33)
    add31[6] = ["a", 1, "/p", None, None, False, False]
    for frames, receiver, got in (([b"\x00", msgspec.msgpack.encode(add33)], p31, "bool"),
                                  ([b"\x00", msgspec.msgpack.encode(add31)], p33, "None")):
        with pytest.raises(DecodeError, match=f"got `{got}`") as err:
            receiver.codec.decode_input(frames)
        assert err.value.field_path == "$[6][4]"
    assert p31.codec.decode_input([b"\x00", msgspec.msgpack.encode(add31)]).lora_request.lora_path == "/p"


def test_an_enum_holds_exactly_the_release_members():
    p = shipped_profile("0.32")
    finish = p.enums["FinishReason"]
    assert [m.name for m in finish] == ["STOP", "LENGTH", "ABORT", "ERROR", "REPETITION"]
    bad = p.message("EngineCoreOutputs")(outputs=[p.message("EngineCoreOutput")(request_id="r", new_token_ids=[])])
    value = msgspec.to_builtins(bad)
    value[1][0][5] = 9  # finish_reason out of range
    with pytest.raises(DecodeError) as err:
        p.codec.decode_outputs([msgspec.msgpack.encode(value)])
    assert err.value.clause == "ECP-FRAME-2" and err.value.field_path == "$[1][0][5]"


def test_what_a_release_lacks_is_named():
    p32 = shipped_profile("0.32")
    with pytest.raises(LocalProtocolError, match=r"pause_generation: not in vLLM 0\.32") as err:
        p32.utility("pause_generation")
    assert err.value.clause == "ECP-COMPAT-1"
    assert shipped_profile("0.33").utility("pause_generation").arity == "0..2"
    with pytest.raises(LocalProtocolError, match="not in vLLM 0.21"):
        shipped_profile("0.21").message("SamplingMaskLists")


def test_utility_arities_are_the_release_ones():
    p32, p33 = shipped_profile("0.32"), shipped_profile("0.33")
    assert (p32.utility("profile").arity, p33.utility("profile").arity) == ("0..4", "0..5")
    p33.check_utility_call("profile", [True, None, None, None, None])
    with pytest.raises(LocalProtocolError, match=r"profile takes 0\.\.4 argument\(s\) in vLLM 0\.32, not 5"):
        p32.check_utility_call("profile", [True, None, None, None, None])
    assert p32.utility("add_lora").accepts(1) and not p32.utility("add_lora").accepts(0)
    assert "compute_weight_checksums" not in shipped_profile("0.31").utility_methods


def test_unknown_type_bytes_and_foreign_classes_are_refused():
    c = shipped_profile("0.32").codec
    with pytest.raises(UnknownRequestType, match="05 is not ADD/ABORT/START_DP_WAVE/UTILITY"):
        c.decode_input([b"\x05", b"\x90"])
    with pytest.raises(LocalProtocolError, match="not an input message of vLLM 0.32"):
        c.encode_input(spec.UtilityRequest(0, 1, "x", []))  # a 0.33 class
    assert c.encode_input(["a", "b"]) == [b"\x01", msgspec.msgpack.encode(["a", "b"])]
    assert c.decode_input(c.encode_input(("a",))) == ["a"]
    assert c.input_kind(c.decode_input(spec.encode_start_dp_wave(3, None))) == "START_DP_WAVE"


def test_limits_hold_through_a_profile():
    c = shipped_profile("0.30").codec
    deep: list = []
    for _ in range(200):
        deep = [deep]
    frames = spec.encode_utility(0, 1, "collective_rpc", ["m", None, deep, None])
    with pytest.raises(spec.LimitExceeded):
        c.decode_input(frames)
    with pytest.raises(spec.UnsafeExtType):
        c.decode_outputs([msgspec.msgpack.encode([0, [], None, 0.0, [1, None, msgspec.msgpack.Ext(1, b"x")]])])
    assert c.decode_outputs([spec.ENGINE_CORE_DEAD]) is spec.ENGINE_DEAD
    assert c.decode_ready_response(b"") is None


def test_sources_release_names_layout_files_and_vllm_trees(tmp_path):
    assert resolve_profile("0.32") is resolve_profile("0.32.0") is resolve_profile("vllm-0.32")
    path = tmp_path / "mine.json"
    path.write_bytes(encode_layout(load_shipped("vllm-0.31")))
    from_file = resolve_profile(str(path))
    assert from_file.release == "0.31" and from_file.layout == shipped_profile("0.31").layout
    tree = resolve_profile(FIXTURE)  # extracted statically from a vLLM tree
    def placeless(layout):  # the tree's modules are its own, not the wheel's: defined_in differs
        return {n: msgspec.structs.replace(m, defined_in=None) for n, m in layout.messages.items()}

    assert placeless(tree.layout) == placeless(shipped_profile("0.33").layout)
    assert tree.utility_methods == shipped_profile("0.33").utility_methods
    for bad in ("0.99", "nowhere/at/all", "vllm-1.0"):
        with pytest.raises(LayoutError):
            resolve_profile(bad)


def test_a_profile_is_built_from_any_layout_value():
    layout = load_shipped("vllm-0.33")
    layout.messages["StartDPWave"].fields.pop()  # a release whose START_DP_WAVE has one element
    p = build_profile(layout)
    assert p.message("StartDPWave").__struct_fields__ == ("new_wave",)
    assert p.codec.encode_input(p.message("StartDPWave")(new_wave=4)) == [b"\x02", msgspec.msgpack.encode([4])]
