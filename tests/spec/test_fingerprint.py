"""The release fingerprint: which vLLM release traffic fits, and why; ``ecp decode --vllm``.

"Recorded" frames of each release are the frames a peer of that release writes: the layout's
full and sparse samples (every array at its release's length, as a sender writes it), its ready
payload, and UTILITY replies; for 0.33 also the golden vectors captured from real peers.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from ecp.spec import golden
from ecp.spec.cli import main
from ecp.spec.frames import KIND_DIRECTION
from ecp.spec.layout import wire
from ecp.spec.layout.model import encode_layout
from ecp.spec.profile import shipped_profile, shipped_releases
from ecp.spec.profile.fingerprint import Fingerprint
from ecp.spec.utility_methods import failure_message, no_such_method

RELEASES = shipped_releases()


def _reply(release: str, call_id: int, failure: str | None) -> list[bytes]:
    """An outputs message of ``release`` carrying only a UTILITY reply."""
    layout = shipped_profile(release).layout
    value = wire.sample(layout, "EngineCoreOutputs", "sparse")
    value[layout.messages["EngineCoreOutputs"].field("outputs").index] = []
    value[layout.messages["EngineCoreOutputs"].field("utility_output").index] = [call_id, failure, [None, None]]
    return [msgspec.msgpack.encode(value)]


def _recorded(release: str, version: bool = True) -> list[tuple[list[bytes], str]]:
    """The frames a peer of ``release`` writes: outputs and ADDs (full and sparse), its ready
    payload, and its answer to a pause_generation call (a reply, or the no-such-method failure)."""
    layout = shipped_profile(release).layout
    frames: list[tuple[list[bytes], str]] = []
    for mode in ("full", "sparse"):
        frames.append(([msgspec.msgpack.encode(wire.sample(layout, "EngineCoreOutputs", mode))], "output"))
        frames.append(([b"\x00", msgspec.msgpack.encode(wire.sample(layout, "EngineCoreRequest", mode))], "input"))
    ready = wire.sample(layout, "EngineCoreReadyResponse", "full")
    ready["vllm_version"] = layout.vllm_version if version else "s"
    frames.append(([msgspec.msgpack.encode(ready)], "ready"))
    frames.append(([b"\x03", msgspec.msgpack.encode([0, 41, "pause_generation", []])], "input"))
    failure = (None if "pause_generation" in layout.utility_methods
               else failure_message("pause_generation", no_such_method("pause_generation")))
    frames.append((_reply(release, 41, failure), "output"))
    return frames


def _verdict(frames: list[tuple[list[bytes], str]]):
    fp = Fingerprint()
    for f, direction in frames:
        fp.observe(f, direction)
    return fp.verdict()


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_is_recognised_from_its_own_frames(release):
    verdict = _verdict(_recorded(release))
    assert verdict.best == [release]
    assert verdict.sentence(under_test=release) is None
    # from shapes alone (no vllm_version) the release is among the best; releases with the same
    # shapes cannot be told apart, and are named together
    shapes_only = _verdict(_recorded(release, version=False))
    assert release in shapes_only.best
    for other in shapes_only.best:
        a, b = shipped_profile(release).layout, shipped_profile(other).layout
        for name in ("EngineCoreOutputs", "EngineCoreOutput", "EngineCoreRequest"):
            assert len(a.messages[name].fields) == len(b.messages[name].fields)


def test_a_032_engine_under_the_033_suite_is_named_with_its_reasons():
    verdict = _verdict(_recorded("0.32"))
    assert verdict.against("0.33")[:2] == ["EngineCoreOutput has 18 elements", "no pause_generation"]
    assert verdict.sentence(under_test="0.33", limit=2) == (
        "this engine speaks vLLM 0.32 (EngineCoreOutput has 18 elements; no pause_generation), not 0.33: "
        "rerun with --vllm 0.32")
    assert verdict.facts["no pause_generation"] == RELEASES[:-1]
    assert verdict.facts["vllm_version 0.32.0"] == ["0.32"]


def test_releases_that_fit_alike_are_named_together():
    layout = shipped_profile("0.24").layout  # 0.24 and 0.25 write the same outputs
    fp = Fingerprint()
    fp.observe([msgspec.msgpack.encode(wire.sample(layout, "EngineCoreOutputs", "full"))], "output")
    verdict = fp.verdict()
    assert verdict.best == ["0.20", "0.21", "0.22", "0.23", "0.24", "0.25"] and verdict.release == "0.25"
    assert verdict.sentence(under_test="0.33").startswith("this engine speaks vLLM 0.20 or ... or 0.25 (")
    assert verdict.sentence(under_test="0.22") is None  # fits as well as any


def test_answered_utilities_count_too():
    fp = Fingerprint()
    fp.observe([b"\x03", msgspec.msgpack.encode([0, 9, "compute_weight_checksums", []])], "input")
    fp.observe(_reply("0.33", 9, None), "output")
    verdict = fp.verdict()
    assert verdict.facts == {"EngineCoreOutputs has 9 elements": ["0.32", "0.33"],
                             "answers compute_weight_checksums": ["0.32", "0.33"]}
    assert verdict.best == ["0.32", "0.33"]
    fp.observe([b"\x03", msgspec.msgpack.encode([0, 10, "pause_generation", []])], "input")
    fp.observe(_reply("0.33", 10, failure_message("pause_generation", no_such_method("pause_generation"))), "output")
    assert fp.verdict().best == ["0.32"]


def test_real_033_traffic_fits_033():
    fp = Fingerprint()
    for v in golden.load_vectors():
        direction = KIND_DIRECTION[v.kind]
        frames = list(v.frames)
        if direction == "input" and len(frames[0]) == 2:  # captured on a ROUTER: identity first
            frames = frames[1:]
        fp.observe(frames, direction)
    verdict = fp.verdict()
    assert "0.33" in verdict.best and verdict.sentence(under_test="0.33") is None
    assert any(f.startswith("vllm_version 0.33") for f in verdict.facts)


def test_nothing_telling_gives_no_verdict():
    fp = Fingerprint()
    fp.observe([b"\x01", msgspec.msgpack.encode(["a"])], "input")  # an ABORT says nothing
    fp.observe([b"\x00", b"\xc1"], "input")  # not msgpack: skipped, the decoder reports it
    verdict = fp.verdict()
    assert verdict.best == [] and verdict.release is None and verdict.sentence() is None


# ------------------------------------------------------------------ ecp decode --vllm
def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _hex(frames: list[bytes]) -> str:
    return " ".join(f.hex() for f in frames)


def test_decode_as_a_release_and_say_when_the_frames_fit_another(capsys):
    frames = [msgspec.msgpack.encode(wire.sample(shipped_profile("0.32").layout, "EngineCoreOutputs", "sparse"))]
    rc, out, err = _run(capsys, "decode", "--vllm", "0.32", _hex(frames))
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert doc["kind"] == "outputs" and len(doc["value"]["outputs"][0]) == 18
    rc, out, err = _run(capsys, "decode", "--vllm", "0.33", _hex(frames))
    assert rc == 0 and len(json.loads(out)["value"]["outputs"][0]) == 19
    assert err.strip() == ("ecp decode: this peer speaks vLLM 0.32 (EngineCoreOutput has 18 elements), not 0.33: "
                           "rerun with --vllm 0.32")


def test_decode_auto_picks_the_release(capsys, tmp_path):
    capture = tmp_path / "capture.txt"
    capture.write_text("\n".join(_hex(f) for f, _ in _recorded("0.31")) + "\n")
    rc, out, err = _run(capsys, "decode", "--vllm", "auto", "--file", str(capture))
    assert rc == 0
    assert err.startswith("ecp decode: this peer speaks vLLM 0.31 (") and err.strip().endswith("decoding as vLLM 0.31")
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["kind"] for d in docs] == ["outputs", "add", "outputs", "add", "ready_response", "utility", "outputs"]
    assert "tensorizer_config_dict" in docs[1]["value"]["lora_request"]  # 0.31's LoRARequest


def test_decode_vllm_takes_a_layout_file_and_refuses_what_names_none(capsys, tmp_path):
    path = tmp_path / "layout.json"
    path.write_bytes(encode_layout(shipped_profile("0.27").layout))
    frames = [b"\x01", msgspec.msgpack.encode(["r1"])]
    rc, out, _ = _run(capsys, "decode", "--vllm", str(path), _hex(frames))
    assert rc == 0 and json.loads(out)["kind"] == "abort"
    rc, _, err = _run(capsys, "decode", "--vllm", "0.99", _hex(frames))
    assert rc == 2 and "no shipped layout" in err
    rc, _, err = _run(capsys, "decode", "--vllm", "auto", _hex(frames))
    assert rc == 2 and "nothing in these frames tells the release apart" in err


def _layout_without(release: str, field: str):
    """``release``'s layout less one EngineCoreOutput field, named as a release ecp does not ship."""
    layout = msgspec.structs.replace(shipped_profile(release).layout, name="vllm-0.9", vllm_version="0.9.0")
    data = msgspec.to_builtins(layout)
    fields = [f for f in data["messages"]["EngineCoreOutput"]["fields"] if f["name"] != field]
    for i, f in enumerate(fields):
        f["index"] = i
    data["messages"]["EngineCoreOutput"]["fields"] = fields
    from ecp.spec.layout.model import decode_layout
    from ecp.spec.profile import build_profile

    return build_profile(decode_layout(msgspec.json.encode(data), "vllm-0.9.json"))


def test_the_release_under_test_is_compared_first_whatever_it_is():
    """A release no shipped layout describes is a candidate: traffic that fits it is not told to
    rerun as another; traffic another fits better names that one and the facts that tell them apart."""
    own = _layout_without("0.33", "error")
    fp = Fingerprint(under_test=own)
    outputs = wire.sample(own.layout, "EngineCoreOutputs", "full")
    fp.observe([msgspec.msgpack.encode(outputs)], "output")
    verdict = fp.verdict()
    assert "0.9" in verdict.best and verdict.sentence(under_test="0.9") is None
    # a 0.33 engine judged as that release: 0.33 fits by its outputs' length
    fp = Fingerprint(under_test=own)
    for frames, direction in _recorded("0.33"):
        fp.observe(frames, direction)
    said = fp.verdict().sentence(under_test="0.9")
    assert said is not None and said.startswith("this engine speaks vLLM 0.33 (EngineCoreOutput has 19 elements")
    assert said.endswith("not 0.9: rerun with --vllm 0.33")
