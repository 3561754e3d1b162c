"""``ecp spec layout --from-rust`` and ``ecp spec diff`` between a Rust peer and a Python release.

``fixtures/rust/frontend/`` is a small crate written for these tests in the shapes a Rust
engine-core client uses (serde_tuple arrays, serde maps with defaults, ``rename``,
``rename_all`` and ``skip_serializing_if``, ``#[repr(u8)]`` enums with ``Serialize_repr``, a
hand-written ``impl Serialize``, a type alias, ``call_utility*`` calls inside a module,
``#[cfg(test)]`` modules inline and in their own file, a ``tests/`` directory);
``fixtures/rust/engine/`` is the ready response of an engine written in Rust. Both agree
with the shipped ``vllm-0.33`` layout; each drift test edits one line of a copy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ecp.spec.cli import main
from ecp.spec.layout.model import encode_layout
from ecp.spec.layout.rust import RustSourceError, extract_rust, upper_snake

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rust"
CLIENT = FIXTURES / "frontend"
ENGINE = FIXTURES / "engine"


def _copy(tmp_path: Path, crate: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    root = tmp_path / crate.name
    shutil.copytree(crate, root)
    for rel, pairs in edits.items():
        path = root / rel
        text = path.read_text()
        for old, new in pairs:
            assert text.count(old) == 1, (rel, old)
            text = text.replace(old, new)
        path.write_text(text)
    return root


def _line(crate: Path, rel: str, needle: str) -> int:
    lines = (crate / rel).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _diff(capsys, crate: Path, tmp_path: Path, *extra: str, role: str = "frontend", fmt: str = "json"):
    out = tmp_path / f"{crate.name}-layout.json"
    assert main(["spec", "layout", "--from-rust", str(crate), "--role", role, "--out", str(out)]) == 0
    capsys.readouterr()
    code = main(["spec", "diff", "vllm-0.33", str(out), "--format", fmt, *extra])
    text = capsys.readouterr().out
    return code, (json.loads(text)["findings"] if fmt == "json" else text)


def _breaking(findings):
    return [f for f in findings if f["severity"] == "breaking"]


# --------------------------------------------------------------------------- extraction
def test_the_client_crate_is_read_with_its_serde_shapes():
    result = extract_rust(CLIENT)
    layout = result.layout
    req = layout.messages["EngineCoreRequest"]
    assert req.encoding == "array" and len(req.fields) == 22 and req.fields[5].name == "arrival_time"
    assert [f.required for f in req.fields[:6]] == [True] * 6 and not req.fields[6].required
    assert req.fields[13].type == "int" and req.fields[13].note == "Rust i32"  # width and sign kept
    sp = layout.messages["SamplingParams"]
    assert sp.encoding == "map"
    seed = sp.field("seed")
    assert seed.type == "int | nil" and not seed.required and "skip_serializing_if" in seed.note
    assert sp.field("temperature").note == "Rust f32" and sp.field("output_kind").type == "enum:RequestOutputKind"
    ready = layout.messages["EngineCoreReadyResponse"]
    assert ready.field("dp_stats_address").type == "str | nil" and not ready.field("dp_stats_address").required
    # named after the Python class its doc comment names
    assert layout.messages["EngineZmqAddresses"].note.startswith("Rust struct SocketPlan")
    assert layout.messages["Ready"].note.startswith("Rust struct Greeting")
    assert ready.field("dtype").note == "Rust String"  # #[serde(rename = "dtype")] on param_dtype
    assert layout.messages["EngineHandshakeMetadata"].field("addresses").type == "struct:EngineZmqAddresses"
    assert layout.messages["UtilityRequest"].fields[1].type == "any"  # the hand-written CallNumber
    assert layout.enums["RequestOutputKind"].values == {"CUMULATIVE": 0, "DELTA": 1, "FINAL_ONLY": 2}
    assert layout.enums["FinishReason"].values["REPETITION"] == 4
    assert layout.enums["EngineCoreEventType"].values == {"QUEUED": 1, "SCHEDULED": 2, "PREEMPTED": 3}
    assert layout.messages["EngineCoreEvent"].fields[0].name == "type"  # r#type
    out = layout.messages["EngineCoreOutput"]
    assert out.field("routed_experts").type == "tensor | nil"  # [dtype, shape, data]: ECP-FRAME-7
    assert layout.messages["DenseArray"].fields[2].type == "bytes"  # serde_bytes
    assert [(rt.byte, rt.name) for rt in layout.request_types] == [
        ("00", "ADD"), ("01", "ABORT"), ("02", "START_DP_WAVE"), ("03", "UTILITY")]
    assert {n: len(m.params) for n, m in layout.utility_methods.items()} == {
        "is_sleeping": 0, "reset_prefix_cache": 2, "sleep": 2, "profile": 2, "get_supported_tasks": 0,
        "collective_rpc": 4}  # a const's value; no call of a test
    # nothing dropped: what is not read is named
    assert layout.not_described == ["CallNumber"]
    assert [(w.code, w.file) for w in result.warnings] == [
        ("hand-written-serde", "src/calls.rs"), ("unmapped-type", "src/link.rs")]
    assert "std::time::Duration" in result.warnings[1].message
    assert layout.provenance.locations["enum FinishReason.LENGTH"] == \
        f"src/step.rs:{_line(CLIENT, 'src/step.rs', 'Length = 1')}"
    # neither the #[cfg(test)] file, nor the tests/ directory, nor a #[cfg(test)] module in a module
    assert "src/checks.rs" not in result.files and not any(f.startswith("tests/") for f in result.files)
    assert {"never_on_the_wire", "not_a_method", "made_up_for_a_test"}.isdisjoint(layout.utility_methods)


def test_names_and_errors():
    assert upper_snake("StartDpWave") == "START_DP_WAVE" and upper_snake("FinalOnly") == "FINAL_ONLY"
    layout = extract_rust(CLIENT, names={"LinkTimings": "FrontendStats"}).layout
    assert "FrontendStats" in layout.messages and "LinkTimings" not in layout.messages
    with pytest.raises(RustSourceError):
        extract_rust(FIXTURES / "missing")
    with pytest.raises(RustSourceError, match="role"):
        extract_rust(CLIENT, role="router")


def test_cli_usage_errors(capsys, tmp_path):
    assert main(["spec", "layout", "--from-rust", str(tmp_path / "none")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["spec", "layout", "--from-rust", str(CLIENT), "--name", "NoEquals"]) == 2
    assert main(["spec", "layout", "--role", "engine"]) == 2  # --role without --from-rust
    out = tmp_path / "layout.json"
    assert main(["spec", "layout", "--from-rust", str(CLIENT), "--out", str(out)]) == 0
    assert main(["spec", "layout", "--from-rust", str(CLIENT), "--out", str(out), "--check"]) == 0
    assert main(["spec", "layout", "--from-rust", str(CLIENT), "--strict"]) == 1  # two constructs not read
    capsys.readouterr()


# --------------------------------------------------------------------------- against Python
def test_the_unmodified_crates_agree_with_0_33(tmp_path, capsys):
    code, findings = _diff(capsys, CLIENT, tmp_path)
    assert code == 0 and not _breaking(findings)
    # float32 sampling floats (ECP-COMPAT-2), maps with fewer keys, what one side does not describe
    assert {f["rule"] for f in findings} == {"DIFF-069", "DIFF-070", "DIFF-006"}
    assert all(f["clause"] == "ECP-COMPAT-2" for f in findings if f["rule"] == "DIFF-069")
    code, findings = _diff(capsys, ENGINE, tmp_path, role="engine")
    assert code == 0 and not _breaking(findings)
    code, text = _diff(capsys, CLIENT, tmp_path, fmt="github")
    annotations = [line for line in text.splitlines() if line.startswith("::")]
    assert annotations and all(line.split("::")[1].split(",")[0].split(" ")[1].startswith("file=src/")
                                and ",line=" in line.split("::")[1] for line in annotations), annotations


def test_a_ready_response_missing_a_field(tmp_path, capsys):
    crate = _copy(tmp_path, ENGINE, {"src/lib.rs": [("    pub vllm_version: String,\n", "")]})
    code, findings = _diff(capsys, crate, tmp_path, role="engine")
    assert code == 1
    (f,) = _breaking(findings)
    line = _line(ENGINE, "src/lib.rs", "pub struct StartupReport")
    assert f["rule"] == "DIFF-063" and f["subject"] == "EngineCoreReadyResponse.vllm_version"
    # the message names the Rust struct, the subject the message it carries
    assert f["message"].startswith(f"StartupReport (src/lib.rs:{line}) lacks vllm_version: "
                                   f"vLLM 0.33.0 frontends require vllm_version")
    assert f["impact"] == "this Rust engine -> vLLM 0.33.0 frontends" and f["clause"] == "ECP-HS-4"


def test_an_output_struct_one_field_behind(tmp_path, capsys):
    crate = _copy(tmp_path, CLIENT, {"src/step.rs": [
        ("    #[serde(default)]\n    pub error: Option<AnyMsgpack>,\n", "")]})
    code, findings = _diff(capsys, crate, tmp_path)
    assert code == 1
    (f,) = _breaking(findings)
    line = _line(CLIENT, "src/step.rs", "pub struct EngineCoreOutput {")
    assert f["message"] == (f"EngineCoreOutput (src/step.rs:{line}) reads 18 fields, vLLM 0.33.0 sends "
                            f"19 (error at 18): this Rust frontend cannot decode outputs payloads that carry error")
    assert (f["rule"], f["file"], f["line"], f["clause"]) == ("DIFF-060", "src/step.rs", line,
                                                               "ECP-FRAME-3")


def test_a_field_inserted_mid_struct(tmp_path, capsys):
    crate = _copy(tmp_path, CLIENT, {"src/step.rs": [
        ("    pub new_token_ids: Vec<u32>,\n", "    pub new_token_ids: Vec<u32>,\n    pub num_cached_tokens: u32,\n")]})
    code, findings = _diff(capsys, crate, tmp_path)
    assert code == 1
    rules = {f["rule"]: f for f in _breaking(findings)}
    # the new field is required where 0.33 may end the array; every later one is shifted
    assert set(rules) == {"DIFF-061", "DIFF-063"}
    shifted = rules["DIFF-061"]
    assert shifted["subject"] == "EngineCoreOutput.new_logprobs" and shifted["line"] == _line(
        crate, "src/step.rs", "pub new_logprobs")
    assert "is at position 3, vLLM 0.33.0 has it at 2" in shifted["message"]


def test_a_repr_value_changed(tmp_path, capsys):
    crate = _copy(tmp_path, CLIENT, {"src/step.rs": [("    Length = 1,", "    Length = 5,")]})
    code, findings = _diff(capsys, crate, tmp_path)
    assert code == 1
    (f,) = _breaking(findings)
    line = _line(crate, "src/step.rs", "Length = 5")
    assert (f["rule"], f["subject"], f["old"], f["new"]) == ("DIFF-064", "enum FinishReason.LENGTH", 1, 5)
    assert f"(src/step.rs:{line}) is 5 in Rust, 1 in vLLM 0.33.0" in f["message"]
    assert f["clause"] == "ECP-OUT-4"


def test_a_misspelt_utility_method(tmp_path, capsys):
    crate = _copy(tmp_path, CLIENT, {"src/link.rs": [('("is_sleeping", ())', '("is_sleepng", ())')]})
    code, text = _diff(capsys, crate, tmp_path, fmt="github")
    assert code == 1
    (error,) = [line for line in text.splitlines() if line.startswith("::error ")]
    line = _line(crate, "src/link.rs", "is_sleepng")
    assert error.startswith(f"::error file=src/link.rs,line={line},title=DIFF-066 peer-utility-unknown::")
    assert "calls is_sleepng" in error and "Fix: call a method the engine defines" in error


def test_a_utility_call_with_too_many_arguments_and_a_moved_request_byte(tmp_path, capsys):
    crate = _copy(tmp_path, CLIENT, {
        "src/link.rs": [('("reset_prefix_cache", (keep_running, include_connector))',
                         '("reset_prefix_cache", (keep_running, include_connector, true))')],
        "src/submit.rs": [("    Utility = 0x03,", "    Utility = 0x04,")]})
    code, findings = _diff(capsys, crate, tmp_path)
    assert code == 1
    assert sorted((f["rule"], f["subject"]) for f in _breaking(findings)) == [
        ("DIFF-065", "request type 0x04"), ("DIFF-067", "utility reset_prefix_cache")]


def test_either_side_may_be_the_rust_one(tmp_path, capsys):
    crate = _copy(tmp_path, CLIENT, {"src/step.rs": [("    Length = 1,", "    Length = 5,")]})
    rust = tmp_path / "rust.json"
    rust.write_bytes(encode_layout(extract_rust(crate).layout))
    assert main(["spec", "diff", str(rust), "vllm-0.33", "--format", "json"]) == 1
    (f,) = _breaking(json.loads(capsys.readouterr().out)["findings"])
    assert f["rule"] == "DIFF-064" and f["file"] == "src/step.rs"


def test_a_reader_that_refuses_unknown_keys(tmp_path, capsys):
    derive = "#[derive(Serialize, Deserialize, Clone, Debug)]\npub struct EngineFacts {\n"
    crate = _copy(tmp_path, CLIENT, {"src/startup.rs": [
        (derive, derive.replace("pub struct", "#[serde(deny_unknown_fields)]\npub struct"))]})
    code, findings = _diff(capsys, crate, tmp_path)
    assert code == 1
    (f,) = _breaking(findings)
    assert f["rule"] == "DIFF-071" and f["subject"] == "EngineCoreReadyResponse"
    assert "tensor_parallel_size" in f["message"]
    assert f["line"] == _line(CLIENT, "src/startup.rs", "pub struct EngineFacts") + 1  # the struct, one line lower
