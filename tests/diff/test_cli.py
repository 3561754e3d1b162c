"""``ecp spec layout|diff|compat``: outputs, formats, exit codes, reference resolution."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ecp.spec.cli import main
from ecp.spec.layout.introspect import current_layout_json

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ROOT / "spec" / "layouts"


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_layout_to_a_file_and_check(tmp_path, capsys):
    # without --from-vllm the command describes ecp.spec's own types
    target = tmp_path / "snap.json"
    assert run(capsys, "spec", "layout", "--out", str(target))[0] == 0
    assert target.read_bytes() == current_layout_json()
    assert run(capsys, "spec", "layout", "--out", str(target), "--check")[0] == 0
    target.write_bytes(target.read_bytes().replace(b'"kv_hints"', b'"kv_hint"'))
    code, _, err = run(capsys, "spec", "layout", "--out", str(target), "--check")
    assert code == 1 and "out of date" in err
    assert run(capsys, "spec", "layout", "--strict")[0] == 2  # --strict needs --from-vllm


def test_diff_exit_codes(capsys):
    assert run(capsys, "spec", "diff", "vllm-0.24", "vllm-0.25")[0] == 0  # no differences
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.25", "vllm-0.26")
    assert code == 1
    assert "BREAKING DIFF-012 EngineCoreOutput.ec_transfer_params" in out
    assert "violates ECP-FRAME-3" in out
    assert out.rstrip().endswith("1 breaking, 0 warning(s), 3 info")
    assert run(capsys, "spec", "diff", "vllm-0.25", "vllm-0.26", "--fail-on", "never")[0] == 0
    code, _, err = run(capsys, "spec", "diff", "no-such-thing", "vllm-0.33")
    assert code == 2 and "no-such-thing" in err
    with pytest.raises(SystemExit) as exc:
        main(["spec", "diff", "vllm-0.33"])
    assert exc.value.code == 2


def test_diff_fail_on_warning(tmp_path, capsys):
    doc = json.loads((LAYOUTS / "vllm-0.33.json").read_text())
    doc["utility_methods"]["sleep"]["params"][0]["name"] = "depth"  # a rename: warning only
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    assert run(capsys, "spec", "diff", "vllm-0.33", str(edited))[0] == 0
    assert run(capsys, "spec", "diff", "vllm-0.33", str(edited), "--fail-on", "warning")[0] == 1


def test_diff_json_format(capsys):
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.31", "vllm-0.32", "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["old"]["name"] == "vllm-0.31" and doc["new"]["name"] == "vllm-0.32"
    assert doc["summary"] == {"breaking": 4, "warning": 3, "info": 4}
    first = doc["findings"][0]
    assert set(first) >= {"rule", "severity", "subject", "message", "direction", "affects", "impact", "clause",
                          "fix"}
    assert {f["subject"]: f["clause"] for f in doc["findings"] if f["severity"] == "breaking"} == {
        "SamplingParams.prompt_logprob_token_ids": "ECP-FRAME-6",
        "LoRARequest.tensorizer_config_dict": "ECP-FRAME-3",
        "utility profile": "ECP-UTIL-1", "utility compute_weight_checksums": "ECP-UTIL-1"}


def test_diff_github_format(capsys):
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.25", "vllm-0.26", "--format", "github")
    lines = out.splitlines()
    assert code == 1
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == 1
    assert sum(line.startswith("::notice ") for line in lines) == 3
    # properties are escaped, the file points at the vLLM module that defines the message
    assert errors[0].startswith("::error file=vllm/v1/engine/__init__.py,title=DIFF-012 field-inserted::")
    assert "violates ECP-FRAME-3" in errors[0]


def test_diff_markdown_format(capsys):
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.32", "vllm-0.33", "--format", "markdown")
    assert code == 1
    assert out.startswith("### Protocol diff: `vllm-0.32` (0.32.0) → `vllm-0.33` (0.33.0)")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 12
    assert rows[0].startswith("| breaking | DIFF-052 utility-signature-changed | `utility profile` "
                              "(`vllm/v1/engine/core.py:")
    assert "| ECP-UTIL-1 |" in rows[0] and "str \\| nil" in rows[0]  # pipes escaped inside cells
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.24", "vllm-0.25", "--format", "markdown")
    assert code == 0 and "no breaking change" in out


def test_diff_against_a_git_ref(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "spec" / "layouts").mkdir(parents=True)
    shutil.copy(LAYOUTS / "vllm-0.21.json", repo / "spec" / "layouts" / "vllm-0.33.json")  # an old snapshot

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, timeout=30)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-qm", "old layout")
    monkeypatch.chdir(repo)
    code, out, _ = run(capsys, "spec", "diff", "HEAD", "vllm-0.33")
    assert code == 1 and "OLD vllm-0.21" in out
    code, out, _ = run(capsys, "spec", "diff", "HEAD:spec/layouts/vllm-0.33.json", "vllm-0.21")
    assert code == 0 and "no differences" in out
    code, _, err = run(capsys, "spec", "diff", "HEAD:spec/missing.json", "vllm-0.21")
    assert code == 2 and "not readable with git" in err


def test_compat_check_against_a_file(tmp_path, capsys):
    target = tmp_path / "compat.md"
    assert run(capsys, "spec", "compat", "--out", str(target))[0] == 0
    assert run(capsys, "spec", "compat", "--out", str(target), "--check")[0] == 0
    target.write_text("stale\n")
    assert run(capsys, "spec", "compat", "--out", str(target), "--check")[0] == 1


def test_compat_of_a_release_and_an_extracted_layout(capsys):
    fixture = Path(__file__).resolve().parent / "fixtures" / "engine-tree"
    code, out, _ = run(capsys, "spec", "compat", "--layouts", "vllm-0.32", str(LAYOUTS / "vllm-0.33.json"))
    assert code == 0 and out.count("\n| `vllm-0.3") == 2  # a 2x2 summary
    assert "| vllm-0.33 | vllm-0.32 |" in out and "pause_generation" in out
    assert run(capsys, "spec", "compat", "--layouts", "vllm-0.33", str(fixture))[0] == 2  # a tree is no layout
