"""``ecp decode``: typed JSON for good frames, a clause-citing error (exit 1) for bad ones."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from ecp.spec import golden
from ecp.spec.cli import main

MINIMAL_ADD = "99a2723493010203c081aa6d61785f746f6b656e7302c0cb41dac07d632147dec0c0c0"
IS_SLEEPING_REPLY = "990090c0cb3ff000000000000093cf1234567890abcdefc092c0c2c0c0c0c0"


def _run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_decode_input_frames_named_and_wire(capsys):
    rc, out, _ = _run(capsys, "decode", "--direction", "input", "00", MINIMAL_ADD)
    assert rc == 0
    doc = json.loads(out)
    assert doc["kind"] == "add" and doc["frames"] == 2
    assert doc["value"]["request_id"] == "r4"
    assert doc["value"]["sampling_params"]["max_tokens"] == 2
    assert doc["value"]["abort_immediately"] is False  # defaults filled in for the short array
    rc, out, _ = _run(capsys, "decode", "--wire", "00|" + MINIMAL_ADD)
    assert rc == 0 and json.loads(out)["value"][0] == "r4" and len(json.loads(out)["value"]) == 22


def test_decode_auto_output_and_bare_payload(capsys):
    rc, out, _ = _run(capsys, "decode", IS_SLEEPING_REPLY)
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "outputs"
    assert doc["value"]["utility_output"] == {"call_id": 0x1234567890ABCDEF, "failure_message": None,
                                              "result": {"type_info": None, "value": False}}
    rc, out, _ = _run(capsys, "decode", MINIMAL_ADD)  # ADD payload without its type frame
    assert rc == 0 and json.loads(out)["kind"] == "add"
    rc, out, _ = _run(capsys, "decode", "454e47494e455f434f52455f44454144")
    assert rc == 0 and json.loads(out)["kind"] == "engine_dead"


def test_decode_error_cites_clause_and_exits_1(capsys):
    short = "98" + MINIMAL_ADD[2:-2]  # 8 elements: one required field missing
    rc, out, err = _run(capsys, "decode", "--direction", "input", "00", short)
    assert rc == 1
    doc = json.loads(out)
    assert doc["clause"] == "ECP-REQ-1" and doc["error"] == "DecodeError" and doc["clause_level"] == "MUST"
    assert "at least length 9" in doc["message"] and doc["frame_index"] == 1
    assert err.startswith("ecp decode: [ECP-REQ-1]")  # one clause-citing line, no internal labels
    # unknown type byte, pickle ext type, not hex at all
    rc, out, _ = _run(capsys, "decode", "--direction", "input", "07", "90")
    assert rc == 1 and json.loads(out)["error"] == "UnknownRequestType"
    rc, out, _ = _run(capsys, "decode", "--direction", "output", "990090c0cb3ff00000000000009307c092c0d40100c0c0c0c0")
    assert rc == 1 and json.loads(out)["clause"] == "ECP-SEC-1"
    rc, out, _ = _run(capsys, "decode", "zz")
    assert rc == 1 and json.loads(out)["error"] == "DecodeError"


def test_decode_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("03\n940001ab69735f736c656570696e6790\n"))
    rc, out, _ = _run(capsys, "decode", "-")
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "utility" and doc["value"]["method_name"] == "is_sleeping"


def test_decode_capture_file_one_message_per_line(tmp_path, capsys):
    f = tmp_path / "capture.txt"
    f.write_text(f"# a comment\n00 {MINIMAL_ADD}\n\n{IS_SLEEPING_REPLY}\n01 c1\n")
    rc, out, err = _run(capsys, "decode", "--file", str(f))
    docs = [json.loads(line) for line in out.splitlines()]
    assert rc == 1  # the third message is malformed
    assert [d.get("kind") for d in docs] == ["add", "outputs", None]
    assert docs[2]["at"] == "capture.txt:5" and docs[2]["clause"].startswith("ECP-")
    assert "capture.txt:5" in err


def test_decode_dump_format_file(tmp_path, capsys):
    # the vLLM dump format (here rebuilt from the checked-in vectors, so the test does not read ../shared)
    vectors = [v for v in golden.load_vectors() if v.source["file"] == "traffic-vllm-rs-to-engine.txt"]
    lines = []
    for v in vectors:
        if v.kind in ("add", "utility"):
            lines.append(f"RECV type={v.frames[0].hex()} nframes=2 [1]={v.frames[1].hex()}")
        elif v.kind == "init":
            lines.append(f"RECV INIT {v.frames[0].hex()}")
        elif v.kind == "ready_response":
            lines.append(f"SENT ready payload on input ipc://x {v.frames[0].hex()}")
        else:
            lines.append(f"SENT {v.kind.upper()} {v.frames[0].hex()}")
    f = tmp_path / "dump.txt"
    f.write_text("\n".join(lines) + "\n")
    rc, out, _ = _run(capsys, "decode", "--file", str(f))
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert rc == 0 and kinds == [v.kind for v in vectors]


def test_decode_usage_errors(capsys, tmp_path):
    assert _run(capsys, "decode")[0] == 2
    assert _run(capsys, "decode", "--file", str(tmp_path / "missing.txt"))[0] == 2


def test_decode_coordinator_publication(capsys):
    """A coordinator publication ([[0,1],[2,0]], 5, true) (spec/PROTOCOL.md ECP-DP-5), by direction and by guess."""
    for argv in (["--direction", "coordinator"], []):
        rc, out, _ = _run(capsys, "decode", *argv, "939292000192020005c3")
        doc = json.loads(out)
        assert rc == 0 and doc["kind"] == "coordinator_publication"
        assert doc["value"] == {"counts": [[0, 1], [2, 0]], "wave": 5, "running": True}
    rc, out, _ = _run(capsys, "decode", "--direction", "coordinator", "93c0c0c0")
    assert rc == 1 and json.loads(out)["clause"] == "ECP-DP-5"


def test_cli_directions_are_the_decoders_directions():
    from ecp.spec import commands, frames

    assert set(commands.DIRECTIONS) == set(frames.DIRECTIONS)


def test_summary_counts_the_handshake_tag_and_names_an_existing_protocol_file(capsys):
    rc, out, _ = _run(capsys, "summary")
    assert rc == 0
    assert re.search(r"^  Hello\s+map\s+3 keys, 3 required \(the tag `status` and 2 fields\)$", out, re.M)
    assert re.search(r"^  EngineCoreRequest\s+array 22 elements, 9 required$", out, re.M)
    path = re.search(r"^full text: (\S+);", out, re.M).group(1)
    assert Path(path).is_file() and Path(path).name == "PROTOCOL.md"


def test_closed_stdout_ends_quietly_without_a_traceback(tmp_path):
    """`ecp decode --file capture | head -1`: the reader closes the pipe early."""
    import subprocess
    import sys

    capture = tmp_path / "capture.txt"
    capture.write_text(f"00 {MINIMAL_ADD}\n" * 2000)  # ~2 MB of JSON: far more than a pipe buffer
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from ecp.spec.cli import main; "
                             f"sys.exit(main(['decode', '--file', {str(capture)!r}]))"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(10)
    proc.stdout.close()  # the reader goes away while ecp still has output to write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 2
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_decode_a_binary_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "capture.bin"
    path.write_bytes(bytes.fromhex("00") + b"\x99\xa2\xff\xfe\x00\x01")
    assert main(["decode", "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"ecp decode: {path} is not a text capture (byte 0x99 at offset 1 is not UTF-8): --file reads "
                   "text, hex frames one message per line or a vLLM dump file\n")
