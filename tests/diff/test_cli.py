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
    target = tmp_path / "snap.json"
    assert run(capsys, "spec", "layout", "--out", str(target))[0] == 0
    assert target.read_bytes() == current_layout_json()
    assert run(capsys, "spec", "layout", "--out", str(target), "--check")[0] == 0
    target.write_bytes(target.read_bytes().replace(b'"kv_hints"', b'"kv_hint"'))
    code, _, err = run(capsys, "spec", "layout", "--out", str(target), "--check")
    assert code == 1 and "out of date" in err


def test_layout_check_of_the_shipped_file(capsys):
    assert run(capsys, "spec", "layout", "--check")[0] == 0


def test_diff_exit_codes(capsys):
    assert run(capsys, "spec", "diff", "vllm-0.33", "current")[0] == 0
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.21", "vllm-0.33")
    assert code == 1
    assert "BREAKING DIFF-012 EngineCoreOutput.ec_transfer_params" in out
    assert out.rstrip().endswith("16 breaking, 2 warning(s), 33 info")
    assert run(capsys, "spec", "diff", "vllm-0.21", "vllm-0.33", "--fail-on", "never")[0] == 0
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
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.21", "vllm-0.33", "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["old"]["name"] == "vllm-0.21" and doc["new"]["name"] == "vllm-0.33"
    assert doc["summary"] == {"breaking": 16, "warning": 2, "info": 33}
    first = doc["findings"][0]
    assert set(first) >= {"rule", "severity", "subject", "message", "direction", "affects", "impact"}


def test_diff_github_format(capsys):
    code, out, _ = run(capsys, "spec", "diff", "vllm-0.21", "vllm-0.33", "--format", "github")
    lines = out.splitlines()
    assert code == 1
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == 16
    assert sum(line.startswith("::warning ") for line in lines) == 2
    assert sum(line.startswith("::notice ") for line in lines) == 33
    insert = next(line for line in errors if "ec_transfer_params" in line)
    # properties are escaped (',' and ':' inside values), the file points at the defining module
    assert insert.startswith("::error file=spec/outputs.py,title=DIFF-012 field-inserted::")


def test_diff_against_a_git_ref(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "spec" / "layouts").mkdir(parents=True)
    shutil.copy(LAYOUTS / "vllm-0.21.json", repo / "spec" / "layouts" / "vllm-0.33.json")

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
