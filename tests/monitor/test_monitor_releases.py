"""`ecp monitor` with a release per side (--vllm, --frontend-vllm, --engine-vllm), on constructed
frames: each side decoded with its own release, a message the other side's release refuses
reported with its DIFF rule and the message it shows in, the report's `release` object."""

from __future__ import annotations

import json

import jsonschema
import msgspec

from ecp.conformance.monitor.capture import CaptureWriter
from ecp.conformance.monitor.machines import MachineValidator
from ecp.conformance.monitor.observed import Observed
from ecp.conformance.monitor.releases import ReleaseValidator, resolve_side
from ecp.conformance.monitor.report import MonitorReport, report_schema
from ecp.conformance.monitor.session import Session
from ecp.spec import EngineHandshakeMetadata, EngineZmqAddresses, Hello, encode_handshake
from ecp.spec.cli import main as ecp_main
from ecp.spec.layout import wire
from ecp.spec.profile import shipped_profile

INIT = encode_handshake(EngineHandshakeMetadata(EngineZmqAddresses(["tcp://127.0.0.1:1"], ["tcp://127.0.0.1:2"]),
                                                {}))


def _utility(call_id: int, method: str, args: list) -> tuple[bytes, ...]:
    return (b"\x03", msgspec.msgpack.encode([0, call_id, method, args]))


def _ready_payload(release: str) -> bytes:
    value = wire.sample(shipped_profile(release).layout, "EngineCoreReadyResponse", "sparse")
    return wire.encode({**value, "vllm_version": f"{release}.0"})


def _outputs(release: str) -> bytes:
    """A finished request's outputs as an engine of ``release`` writes them (full-length arrays)."""
    return wire.encode(wire.sample(shipped_profile(release).layout, "EngineCoreOutputs", "sparse"))


def _lora(release: str) -> list:
    return wire.sample(shipped_profile(release).layout, "LoRARequest", "sparse")


def _traffic(engine: str, calls: list[tuple[bytes, ...]]) -> list[Observed]:
    frames = [("to_frontend", "handshake", None, (encode_handshake(Hello(local=False, headless=True)),)),
              ("to_engine", "handshake", None, (INIT,)),
              ("to_frontend", "input", 0, (_ready_payload(engine),)),
              ("to_frontend", "output", 0, (_outputs(engine),))]
    frames += [("to_engine", "input", 0, call) for call in calls]
    return [Observed(i, i / 10, d, 0, s, c, f) for i, (d, s, c, f) in enumerate(frames, 1)]


def _session(frontend: str | None, engine: str | None) -> Session:
    return Session(ReleaseValidator(MachineValidator(), resolve_side("frontend", frontend),
                                    resolve_side("engine", engine)), context_after=0)


def _run(session: Session, msgs: list[Observed]) -> list[str]:
    for m in msgs:
        session.observe_msg(m)
    session.close()
    return [v.finding.message for v in session.violations]


def test_a_newer_frontend_before_an_older_engine_shows_each_break_at_its_utility_call():
    session = _session("0.33", "0.32")
    found = _run(session, _traffic("0.32", [_utility(1, "pause_generation", ["abort", True]),
                                            _utility(2, "profile", [True, None, None, None, None]),
                                            _utility(3, "profile", [False, None, None, None]),
                                            _utility(4, "reset_prefix_cache", [])]))
    # the 0.32 engine's handshake and outputs decode as 0.32: no finding about them
    assert found == ["DIFF-051 pause_generation: not in vLLM 0.32 (called by the vLLM 0.33 frontend)",
                     "DIFF-052 profile arguments: the vLLM 0.33 frontend sends 5, vLLM 0.32 takes 0..4"]
    assert [v.msg.seq for v in session.violations] == [5, 6]
    assert session.violations[0].finding.detail["shows_in"] == "UTILITY pause_generation"
    report = MonitorReport(session, "test").to_json()
    jsonschema.validate(report, report_schema())
    release = report["release"]
    assert release["judged_by"] == "profile codecs"
    assert (release["frontend"]["release"], release["engine"]["release"]) == ("0.33", "0.32")
    assert release["engine"]["mismatch"] is None and "0.32" in release["engine"]["fits"]
    assert [(c["code"], c["shows_in"], c["count"]) for c in release["cross"]] == [
        ("DIFF-051", "UTILITY pause_generation", 1), ("DIFF-052", "UTILITY profile", 1)]


def test_lora_between_0_31_and_0_33_breaks_in_add_lora_both_ways():
    for frontend, engine, error in (("0.31", "0.33", "Expected `bool`, got `null` - at `$[4]`"),
                                    ("0.33", "0.31", "got `bool` - at `$[4]`")):
        session = _session(frontend, engine)
        found = _run(session, _traffic(engine, [_utility(1, "add_lora", [_lora(frontend)])]))
        assert len(found) == 1 and found[0].startswith("DIFF-01") and "LoRARequest" in found[0], found
        assert error in found[0] and session.violations[0].finding.detail["shows_in"] == "UTILITY add_lora"
    same = _session("0.32", "0.33")  # LoRARequest did not change between 0.32 and 0.33
    assert _run(same, _traffic("0.33", [_utility(1, "add_lora", [_lora("0.32")])])) == []


def test_without_a_release_the_machines_judge_and_the_report_names_what_the_engine_speaks():
    session = _session(None, None)
    found = _run(session, _traffic("0.32", []))
    assert session.validator.judged_by == "machines"
    report = MonitorReport(session, "test")
    engine = report.to_json()["release"]["engine"]
    assert engine["chosen_by"] == "default" and engine["release"] == "0.33"
    assert engine["mismatch"].startswith("this engine speaks vLLM 0.32 (") and "--engine-vllm 0.32" in engine["mismatch"]
    assert report.release_lines == [engine["mismatch"]]
    assert found  # the 0.33 machines refuse what a 0.32 engine writes: why the release matters


def test_auto_takes_the_engines_release_from_its_ready_payload():
    session = _session("0.33", "auto")
    found = _run(session, _traffic("0.32", [_utility(1, "pause_generation", ["abort", True])]))
    assert session.validator.engine.profile.release == "0.32"
    assert found == ["DIFF-051 pause_generation: not in vLLM 0.32 (called by the vLLM 0.33 frontend)"]
    assert MonitorReport(session, "test").to_json()["release"]["engine"]["chosen_by"] == "traffic"


def test_replay_with_releases_per_side_and_a_reference_that_names_no_release(tmp_path, capsys):
    cap = tmp_path / "cap.txt"
    writer = CaptureWriter(cap)
    for m in _traffic("0.32", [_utility(1, "profile", [True, None, None, None, None])]):
        writer.write(m, control=False)
    writer.close()
    out = tmp_path / "report.json"
    assert ecp_main(["monitor", "--replay", str(cap), "--frontend-vllm", "0.33", "--engine-vllm", "0.32",
                     "--report-json", str(out), "--quiet"]) == 1
    doc = json.loads(out.read_text())
    assert [v["message"] for v in doc["violations"]] == [
        "DIFF-052 profile arguments: the vLLM 0.33 frontend sends 5, vLLM 0.32 takes 0..4"]
    # both sides 0.32: no cross-release finding, and the machines judge the lifecycle through 0.32's
    # codec (this capture's output names a request no ADD admitted)
    assert ecp_main(["monitor", "--replay", str(cap), "--vllm", "0.32", "--report-json", str(out), "--quiet"]) == 1
    doc = json.loads(out.read_text())
    assert doc["release"]["judged_by"] == "machines"
    assert [v["message"] for v in doc["violations"]] == [
        "[ECP-OUT-1] output for 's' on output[0]: an output for an id never added"]
    assert ecp_main(["monitor", "--replay", str(cap), "--vllm", "9.99", "--quiet"]) == 2
    assert "--vllm" in capsys.readouterr().err


def test_the_cross_release_benchmark_reads_each_utility_call_and_the_engines_answer(tmp_path):
    """lab/cross_release.py judges a feature by the engine's answers in the monitor's capture."""
    from lab import cross_release as bench

    layout = shipped_profile("0.32").layout
    reply = wire.sample(layout, "EngineCoreOutputs", "sparse")
    at = layout.messages["EngineCoreOutputs"].field("utility_output").index

    def answer(call_id, failure):
        value = list(reply)
        value[at] = [call_id, failure, None]
        return (wire.encode(value),)

    cap = tmp_path / "cap.txt"
    writer = CaptureWriter(cap)
    frames = [("to_engine", "input", _utility(7, "pause_generation", ["abort", True])),
              ("to_engine", "input", _utility(8, "reset_prefix_cache", [])),
              ("to_frontend", "output", answer(8, None)),
              ("to_frontend", "output", answer(7, "'EngineCoreProc' object has no attribute 'pause_generation'"))]
    for i, (d, s, f) in enumerate(frames, 1):
        writer.write(Observed(i, i / 10, d, 0, s, 0, f), control=False)
    writer.close()
    calls = bench.utility_calls(cap, "0.32")
    assert calls == [{"method": "pause_generation", "args": 2, "answered": True,
                      "failure": "'EngineCoreProc' object has no attribute 'pause_generation'"},
                     {"method": "reset_prefix_cache", "args": 0, "answered": True, "failure": None}]
    assert bench.observed_verdict({"calls": [], "utility": calls[:1], "route": True, "http_ok": False}) == (
        "breaks", "UTILITY pause_generation")
