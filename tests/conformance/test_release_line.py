"""The release line of a conformance report: a peer of another release is named in the first lines.

Frames of a release are built from its profile (``wire.sample`` of its layout, its generated
classes), laid out as the harness records them (channels, identity frames, directions).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import jsonschema
import msgspec

from ecp.conformance.release import UNDER_TEST, ReleaseWatch, release_line
from ecp.conformance.report import SCHEMA_PATH
from ecp.spec.layout import wire
from ecp.spec.profile import shipped_profile
from ecp.spec.utility_methods import failure_message, no_such_method

FAST = ["--quiet-window", "0.2", "--startup-timeout", "5"]
IDENTITY = b"\x00\x00"


def _engine_traffic(release: str) -> list[tuple[str, str, list[bytes]]]:
    """(direction, channel, frames) as the engine-role harness records a run against an engine of
    ``release``: its ready payload, outputs, and its answer to the harness's pause_generation call."""
    layout = shipped_profile(release).layout
    ready = wire.sample(layout, "EngineCoreReadyResponse", "full")
    ready["vllm_version"] = layout.vllm_version
    outputs = wire.sample(layout, "EngineCoreOutputs", "full")
    reply = wire.sample(layout, "EngineCoreOutputs", "sparse")
    reply[layout.messages["EngineCoreOutputs"].field("outputs").index] = []
    failure = (None if "pause_generation" in layout.utility_methods
               else failure_message("pause_generation", no_such_method("pause_generation")))
    reply[layout.messages["EngineCoreOutputs"].field("utility_output").index] = [7, failure, [None, None]]
    enc = msgspec.msgpack.encode
    return [("recv", "input[0]", [IDENTITY, enc(ready)]),
            ("recv", "output[0]", [enc(outputs)]),
            ("sent", "input[0]", [b"\x03", enc([0, 7, "pause_generation", ["abort"]])]),
            ("recv", "output[0]", [enc(reply)])]


def _watch(role: str, traffic) -> dict:
    watch = ReleaseWatch(role)
    for direction, channel, frames in traffic:
        watch.observe(direction, channel, frames)
    return watch.to_dict()


def test_an_engine_of_0_32_is_named_and_one_of_the_release_under_test_is_not():
    assert UNDER_TEST == "0.33"
    older = _watch("engine", _engine_traffic("0.32"))
    assert older["best"] == ["0.32"]
    assert release_line(older, "engine") == (
        "this engine speaks vLLM 0.32 (EngineCoreOutput has 18 elements; no pause_generation; "
        "vllm_version 0.32.0), not 0.33: this suite judges vLLM 0.33; `ecp decode --vllm 0.32` reads the peer's frames")
    # a harness that speaks a chosen release points at its flag, and names a release it was told
    told = {**older, "under_test": "0.33", "how": "--vllm 0.33"}
    assert release_line(told, "engine").endswith("not 0.33: rerun with --vllm 0.32")
    right = {**older, "under_test": "0.32", "how": "--vllm 0.32"}
    assert release_line(right, "engine") == "judged as vLLM 0.32 (--vllm 0.32)"
    same = _watch("engine", _engine_traffic("0.33"))
    assert same["best"] == ["0.33"] and release_line(same, "engine") is None
    assert release_line(None, "engine") is None and release_line(_watch("engine", []), "engine") is None


def test_only_what_the_peer_sent_counts():
    """The harness's own ADDs and outputs it forwards say nothing about the peer; in the frontend
    role the frontend's inputs are the peer's, the scripted engines' outputs are not."""
    layout = shipped_profile("0.32").layout
    add = [b"\x00", msgspec.msgpack.encode(wire.sample(layout, "EngineCoreRequest", "full"))]
    outputs = [msgspec.msgpack.encode(wire.sample(layout, "EngineCoreOutputs", "full"))]
    assert _watch("engine", [("sent", "input[0]", add), ("sent", "output[0]", outputs)])["best"] == []
    assert _watch("frontend", [("sent", "engine0/output[0]", outputs)])["best"] == []
    seen = _watch("frontend", [("recv", "engine0/input[0]", add)])
    assert "EngineCoreRequest has 22 elements" in seen["facts"] and "0.32" in seen["best"]
    # unreadable frames teach nothing and break nothing
    assert _watch("engine", [("recv", "output[0]", [b"\xc1 not msgpack"]), ("recv", "output[0]", [])])["best"] == []


def _run(run_ecp, tmp_path, adapter: str, *vllm: str):
    paths = {k: tmp_path / f"r.{k}" for k in ("json", "xml", "md")}
    code, stdout = run_ecp("conformance", "engine", "--adapter", adapter, "--case", "ENG-HS-1", "--case", "ENG-REQ-1",
                           "--case", "ENG-REQ-9", "--case", "ENG-OUT-6", "--json", str(paths["json"]),
                           "--junit-xml", str(paths["xml"]), "--markdown", str(paths["md"]), *vllm, *FAST)
    data = json.loads(paths["json"].read_text())
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    return code, stdout, data, paths


def test_the_report_of_a_0_32_engine_names_it_first(run_ecp, tmp_path):
    code, stdout, data, paths = _run(run_ecp, tmp_path, "scripted_engine:bug_vllm-0.32")
    line = "this engine speaks vLLM 0.32 (EngineCoreOutput has 18 elements; no pause_generation"
    # the run's header, then the report: its first line is the release
    assert stdout.splitlines()[1].startswith(line), stdout
    assert stdout.splitlines()[1].endswith("not 0.33: rerun with --vllm 0.32")
    assert code == 1 and "FAIL ENG-REQ-9" in stdout  # pause_generation is not in 0.32
    assert "FAIL ENG-OUT-6" in stdout  # 18 elements, where 0.33 has 19
    release = data["release"]
    assert release["under_test"] == "0.33" and release["fits"] == ["0.32"]
    assert release["mismatch"] == stdout.splitlines()[1]
    assert release["facts"]["EngineCoreOutput has 18 elements"] == ["0.31", "0.32"]
    assert paths["md"].read_text().splitlines()[2] == f"**{release['mismatch']}**"
    prop = ET.parse(paths["xml"]).getroot().find("properties/property[@name='release']")
    assert prop is not None and prop.get("value") == release["mismatch"]


def test_the_report_of_an_engine_of_the_release_under_test_says_nothing(run_ecp, tmp_path):
    code, stdout, data, paths = _run(run_ecp, tmp_path, "scripted_engine:start")
    assert code == 0, stdout
    assert "speaks vLLM" not in stdout and "speaks vLLM" not in paths["md"].read_text()
    assert data["release"]["mismatch"] is None and data["release"]["fits"] == ["0.33"]
    assert not [p for p in ET.parse(paths["xml"]).getroot().iter("property") if p.get("name") == "release"]


def test_a_0_32_engine_judged_as_0_32_passes_and_the_report_names_the_release(run_ecp, tmp_path):
    code, stdout, data, _ = _run(run_ecp, tmp_path, "scripted_engine:bug_vllm-0.32", "--vllm", "0.32")
    assert stdout.splitlines()[1] == "judged as vLLM 0.32 (--vllm 0.32)", stdout
    assert "speaks vLLM" not in stdout
    # what the release lacks is UNSUPPORTED naming the release; its 18-element outputs are full length
    assert "UNSUPPORTED ENG-REQ-9: pause_generation: not in vLLM 0.32" in stdout
    assert code == 0 and "FAIL" not in stdout, stdout
    assert data["release"]["under_test"] == "0.32" and data["release"]["mismatch"] is None


def test_auto_picks_the_release_from_the_ready_payload_and_says_so(run_ecp, tmp_path):
    code, stdout, data, _ = _run(run_ecp, tmp_path, "scripted_engine:bug_vllm-0.32", "--vllm", "auto")
    assert stdout.splitlines()[1] == "judged as vLLM 0.32 (auto: the ready payload says vllm_version 0.32.0)", stdout
    assert code == 0 and "UNSUPPORTED ENG-REQ-9: pause_generation: not in vLLM 0.32" in stdout
    assert data["release"]["how"].startswith("auto:")


def test_an_unknown_release_is_a_usage_error(run_ecp):
    code, _ = run_ecp("conformance", "engine", "--vllm", "0.99", "--adapter", "scripted_engine:start")
    assert code == 2


def test_frontend_version_is_a_fact_and_the_advice_is_the_flag():
    """In the frontend role GET /version's answer (recorded on ``http/version``) counts, the run's
    release under test travels with the verdict, and the advice is ``--vllm``: the role has it."""
    from ecp.conformance.release import ReleaseWatch, release_line

    watch = ReleaseWatch("frontend", "0.33")
    watch.observe("recv", "http/version", [b"0.32.0"])
    watch.observe("recv", "http", [b"not a version channel"])  # HTTP lines are no facts
    data = watch.to_dict()
    assert data["best"] == ["0.32"] and data["under_test"] == "0.33"
    assert release_line(data, "frontend") == \
        "this frontend speaks vLLM 0.32 (vllm_version 0.32.0), not 0.33: rerun with --vllm 0.32"
    judged = ReleaseWatch("frontend", "0.32")
    judged.observe("recv", "http/version", [b"0.32.0"])
    assert release_line(judged.to_dict(), "frontend") is None
