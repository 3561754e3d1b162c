"""The monitor's parts without sockets: INIT rewriting, the capture format (and `ecp decode`
reading it), sessions, transcripts, the report and its schema, replay."""

from __future__ import annotations

import json

import jsonschema
import msgspec
import pytest

from ecp.conformance.monitor.capture import CaptureError, CaptureEvent, CaptureWriter, read_capture
from ecp.conformance.monitor.observed import Observed
from ecp.conformance.monitor.report import MonitorReport, report_schema
from ecp.conformance.monitor.rewrite import Addresses, RewriteError, parse_init, rewrite_init
from ecp.conformance.monitor.session import Session
from ecp.conformance.monitor.transcripts import TranscriptWriter
from ecp.conformance.monitor.validator import CodecValidator
from ecp.spec import (
    EngineHandshakeMetadata, EngineZmqAddresses, Hello, decode_init, encode_abort, encode_handshake,
    encode_utility,
)
from ecp.spec.cli import main as ecp_main

INIT = EngineHandshakeMetadata(
    EngineZmqAddresses(["tcp://127.0.0.1:40001"], ["tcp://127.0.0.1:40002"], "tcp://127.0.0.1:40003",
                       "tcp://127.0.0.1:40004", "tcp://127.0.0.1:40005"),
    {"data_parallel_size": 2, "_data_parallel_master_port_list": [1, 2]})


def test_init_rewrite_replaces_only_the_addresses_the_engine_connects_to():
    doc, original = parse_init(encode_handshake(INIT))
    assert original == Addresses(("tcp://127.0.0.1:40001",), ("tcp://127.0.0.1:40002",),
                                 "tcp://127.0.0.1:40003", "tcp://127.0.0.1:40004")
    new = Addresses(("ipc:///x/in",), ("ipc:///x/out",), "ipc:///x/cin", "ipc:///x/cout")
    out = decode_init(rewrite_init(doc, new))
    assert out.addresses.inputs == ["ipc:///x/in"] and out.addresses.outputs == ["ipc:///x/out"]
    assert (out.addresses.coordinator_input, out.addresses.coordinator_output) == ("ipc:///x/cin", "ipc:///x/cout")
    # untouched: the stats address (engines do not use it) and parallel_config
    assert out.addresses.frontend_stats_publish_address == "tcp://127.0.0.1:40005"
    assert out.parallel_config == INIT.parallel_config
    # same addresses in, same bytes out (key order and encodings preserved)
    assert rewrite_init(doc, original) == encode_handshake(INIT)


@pytest.mark.parametrize("payload, why", [
    (b"\xc1", "does not decode"),
    (msgspec.msgpack.encode({"addresses": {"inputs": ["a"], "outputs": []}}), "1 inputs but 0 outputs"),
    (msgspec.msgpack.encode({"addresses": {"inputs": ["a"], "outputs": ["b"], "coordinator_input": "c"}}),
     "only one of the coordinator"),
    (msgspec.msgpack.encode([1, 2]), "not a map"),
])
def test_an_init_that_cannot_be_rewritten_is_a_typed_error(payload, why):
    with pytest.raises(RewriteError, match=why):
        parse_init(payload)


def _messages() -> list[Observed]:
    hello = encode_handshake(Hello(local=False, headless=True))
    return [
        Observed(1, 0.1, "to_frontend", 0, "handshake", None, (hello,)),
        Observed(2, 0.2, "to_engine", 0, "handshake", None, (encode_handshake(INIT),)),
        Observed(3, 0.3, "to_frontend", 0, "input", 0, (b"",)),                       # empty ready payload
        Observed(4, 0.4, "to_frontend", 1, "coordinator_input", None, (b"\x01",)),     # subscription
        Observed(5, 0.5, "to_engine", 1, "coordinator_input", None, (b"READY",)),      # gate
        Observed(6, 0.6, "to_engine", 0, "input", 0, tuple(encode_abort(["a", "b"]))),
        Observed(7, 0.7, "to_engine", 0, "input", 0, (b"\x07", b"\x90")),             # unknown type byte
        Observed(8, 0.8, "to_engine", 0, "input", 0, tuple(encode_utility(0, 5, "is_sleeping"))),
        Observed(9, 0.9, "to_frontend", 0, "output", 0, (b"\x91\xc7\x01\x01\x00",)),  # pickle ext: refused
        Observed(10, 1.0, "to_frontend", 0, "output", 0, (b"ENGINE_CORE_DEAD",)),
    ]


def test_capture_round_trip_and_ecp_decode_reads_it(tmp_path, capsys):
    path = tmp_path / "cap.txt"
    w = CaptureWriter(path)
    msgs = _messages()
    for m in msgs:
        w.write(m, control=m.socket == "coordinator_input" and m.seq in (4, 5))
    w.write_event("engine_gone", 10, 1.1, 0)
    w.close()
    back = list(read_capture(path))
    assert back[:-1] == msgs and back[-1] == CaptureEvent("engine_gone", 10, 1.1, 0)
    # `ecp decode --file` reads every protocol message of it (control frames are comments) and
    # flags exactly the two undecodable ones
    assert ecp_main(["decode", "--file", str(path), "--compact"]) == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(out) == 8
    assert [o.get("clause") for o in out if "clause" in o] == ["ECP-FRAME-1", "ECP-SEC-1"]
    assert [o["kind"] for o in out if "kind" in o] == ["hello", "init", "ready_response", "abort", "utility",
                                                       "engine_dead"]


@pytest.mark.parametrize("text, error", [
    ("hello\n", "not an ecp monitor capture"),
    ("# ecp monitor capture v1\n0011\n", "without its '#@' line"),
    ("# ecp monitor capture v1\n#@ {\"seq\": 1}\n", "truncated"),
    ("# ecp monitor capture v1\n#@ {\"seq\": 1, \"t\": 0, \"dir\": \"to_engine\", \"rank\": 0, "
     "\"socket\": \"input\"}\nzz\n", "not hex"),
])
def test_a_damaged_capture_is_a_capture_error(tmp_path, text, error):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(CaptureError, match=error):
        list(read_capture(p))


def test_session_reports_each_violation_once_with_context_and_writes_transcripts(tmp_path):
    session = Session(CodecValidator(), transcripts=TranscriptWriter(tmp_path / "tr"), context_before=3,
                      context_after=2)
    for m in _messages():
        session.observe_msg(m)
    session.close()
    assert [(v.finding.clause, v.msg.seq) for v in session.violations] == [("ECP-FRAME-1", 7), ("ECP-SEC-1", 9)]
    first = session.violations[0]
    assert [m.seq for m in first.before] == [4, 5, 6] and [m.seq for m in first.after] == [8, 9]
    assert [m.seq for m in session.violations[1].after] == [10]  # the session ended: what there was
    files = sorted(p.name for p in (tmp_path / "tr").iterdir())
    assert files == ["00001-ECP-FRAME-1.txt", "00002-ECP-SEC-1.txt"]
    text = (tmp_path / "tr" / files[1]).read_text()
    assert "[ECP-SEC-1 MUST]" in text and "91c7010100" in text and "<undecodable: [ECP-SEC-1]" in text
    assert "#10 rank 0 output[0]" in text and "engine_dead" in text
    snap = session.metrics.snapshot(1.0)
    assert snap.messages[("to_engine", "undecodable")] == 1 and snap.messages[("to_frontend", "undecodable")] == 1
    assert snap.violations == {"ECP-FRAME-1": 1, "ECP-SEC-1": 1}


def test_report_json_matches_its_schema_and_markdown_lists_the_clauses(tmp_path):
    session = Session(CodecValidator())
    for m in _messages():
        session.observe_msg(m)
    session.close()
    report = MonitorReport(session, "test", duration_s=1.0)
    doc = report.to_json()
    jsonschema.validate(doc, report_schema())
    assert doc["role"] == "monitor" and doc["exit_code"] == 1 and doc["validator"] == "codec"
    assert [c["id"] for c in doc["cases"]] == ["MON-FRAME-1", "MON-SEC-1"]
    assert doc["cases"][1]["transcript"] and doc["violations_total"] == 2
    assert doc["traffic"]["messages"]["to_engine"]["abort"] == 1
    md = report.markdown()
    assert "# ecp monitor report" in md and "| MON-SEC-1 `" in md and "| to_engine | abort | 1 |" in md
    assert "- result: **exit 1** (2 FAIL)" in md
    clean = Session(CodecValidator())
    clean.observe_msg(_messages()[0])
    assert MonitorReport(clean, "test").exit_code == 0
    # a clean session: the result says so, and no empty case table is written
    md = MonitorReport(clean, "test").markdown()
    assert "- result: **exit 0** (no clause was violated)" in md and "()" not in md
    assert "| case |" not in md and "\nNo clause was violated.\n" in md


def test_replay_reproduces_the_findings_of_the_recorded_session(tmp_path):
    cap = tmp_path / "cap.txt"
    live = Session(CodecValidator(), capture=CaptureWriter(cap))
    for m in _messages():
        live.observe_msg(m)
    live.close()
    out = tmp_path / "replay.json"
    assert ecp_main(["monitor", "--replay", str(cap), "--validator", "codec", "--report-json", str(out),
                     "--quiet"]) == 1
    replayed = json.loads(out.read_text())
    assert [(v["clause"], v["seq"], v["rank"], v["message"]) for v in replayed["violations"]] == \
        [(v.finding.clause, v.msg.seq, v.msg.rank, v.finding.message) for v in live.violations]
    assert replayed["traffic"]["messages_total"] == 10


def test_usage_errors_exit_2(tmp_path, capsys):
    assert ecp_main(["monitor"]) == 2
    assert ecp_main(["monitor", "--replay", str(tmp_path / "missing.txt"), "--quiet"]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert ecp_main(["monitor", "--replay", "x", "--listen", "ipc:///tmp/x"]) == 2


def test_the_ready_payload_gets_the_frontends_coordinator_addresses_back():
    from ecp.conformance.monitor.rewrite import restore_ready_response
    from ecp.spec import EngineCoreReadyResponse, decode_ready_response

    def payload(cin, cout):
        return encode_handshake(EngineCoreReadyResponse(
            max_model_len=256, num_gpu_blocks=8, block_size=16, dp_stats_address=None, dtype="float32",
            vllm_version="0.33.0", world_size=1, data_parallel_size=2, tensor_parallel_size=1,
            pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=1, max_num_seqs=8,
            max_num_batched_tokens=64, instance_id="x", supports_lora=False, max_loras=0,
            kv_cache_max_concurrency=512.0, coordinator_input_address=cin, coordinator_output_address=cout))

    originals = {"tcp://127.0.0.1:5001": "tcp://127.0.0.1:4001", "tcp://127.0.0.1:5002": "tcp://127.0.0.1:4002"}
    restored = restore_ready_response(payload("tcp://127.0.0.1:5001", "tcp://127.0.0.1:5002"), originals)
    # byte for byte what the engine would have sent had it been given the frontend's addresses
    assert restored == payload("tcp://127.0.0.1:4001", "tcp://127.0.0.1:4002")
    assert decode_ready_response(restored).coordinator_input_address == "tcp://127.0.0.1:4001"
    assert restore_ready_response(payload(None, None), originals) is None  # nothing to restore
    assert restore_ready_response(b"", originals) is None  # an empty payload (ECP-HS-12) passes as is


def test_machines_judge_each_side_and_name_the_request():
    """A coherent handshake, then a frontend that uses a reserved call id (judged by the engine
    machine) and an engine that answers a call never made and sends a second terminal output
    (judged by the frontend machine)."""
    from ecp.conformance.monitor.machines import MachineValidator
    from ecp.spec import (
        EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason, Ready, SamplingParams,
        UtilityOutput, UtilityResult, encode_add, encode_outputs,
    )

    init = EngineHandshakeMetadata(EngineZmqAddresses(["tcp://127.0.0.1:1"], ["tcp://127.0.0.1:2"]), {})
    add = encode_add(EngineCoreRequest("req-1", [1, 2], None, SamplingParams(max_tokens=1), None, 0.0, None,
                                       None, None))
    done = encode_outputs(EngineCoreOutputs(engine_index=0, outputs=[
        EngineCoreOutput("req-1", [7], finish_reason=FinishReason.LENGTH)]))
    stray = encode_outputs(EngineCoreOutputs(engine_index=0, utility_output=UtilityOutput(
        42, None, UtilityResult(None, True))))
    msgs = [("to_frontend", "handshake", None, [encode_handshake(Hello(local=False, headless=True))]),
            ("to_engine", "handshake", None, [encode_handshake(init)]),
            ("to_frontend", "input", 0, [b""]),
            ("to_frontend", "handshake", None, [encode_handshake(Ready(local=False, headless=True))]),
            ("to_engine", "input", 0, add),
            ("to_frontend", "output", 0, done),
            ("to_frontend", "output", 0, done),                                  # a second terminal output
            ("to_engine", "input", 0, [b"\x03", msgspec.msgpack.encode([0, -1, "is_sleeping", []])]),  # reserved id
            ("to_frontend", "output", 0, stray)]                                 # a reply to no call
    session = Session(MachineValidator(), context_after=0)
    for direction, socket, client, frames in msgs:
        session.observe(direction, 0, socket, client, frames)
    session.close()
    got = [(v.finding.clause, v.msg.seq, v.msg.direction, v.request_id) for v in session.violations]
    assert got == [("ECP-OUT-1", 7, "to_frontend", "req-1"), ("ECP-UTIL-12", 8, "to_engine", None),
                   ("ECP-UTIL-1", 9, "to_frontend", None)], got
    snap = session.metrics.snapshot(0)
    assert snap.messages[("to_engine", "add")] == 1 and snap.open_requests == 0
