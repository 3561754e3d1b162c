"""Changes the gate once rated wrong, made by hand to the 0.33 fixture tree: each gets the right
verdict, exit status and fix line, and every annotation names a file and a line.

The fixture (``fixtures/engine-tree/``, written for these tests) is copied to a temporary
directory, one source line is edited, and the layout extracted from the copy is compared with
the shipped ``vllm-0.33`` layout, as the pull-request job of docs/ci.md does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ecp.spec.cli import main
from ecp.spec.diff.compare import diff_layouts
from ecp.spec.layout.model import encode_layout
from ecp.spec.layout.resolve import load_shipped
from ecp.spec.layout.vllm import extract

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "engine-tree"
REQUESTS = "vllm/v1/engine/requests.py"  # EngineCoreRequest
REPLIES = "vllm/v1/engine/replies.py"  # EngineCoreOutput(s) and their enums
CORE = "vllm/v1/engine/core.py"
CLIENT = "vllm/v1/engine/core_client.py"


def _tree(tmp_path: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    for rel, pairs in edits.items():
        path = root / rel
        text = path.read_text()
        for old, new in pairs:
            assert text.count(old) == 1, (rel, old)
            text = text.replace(old, new)
        path.write_text(text)
    return root


def _layout_file(tmp_path: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    out = tmp_path / "pr-layout.json"
    out.write_bytes(encode_layout(extract(_tree(tmp_path, edits), version="0.34.0").layout))
    return out


def _diff(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["spec", "diff", *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _findings(capsys, new: Path, old: str = "vllm-0.33") -> tuple[int, list[dict]]:
    code, out, _ = _diff(capsys, old, str(new), "--format", "json")
    return code, json.loads(out)["findings"]


def test_int_to_float_is_breaking_for_old_engines(tmp_path, capsys):
    new = _layout_file(tmp_path, {REQUESTS: [("    priority: int = 0", "    priority: float = 0")]})
    code, findings = _findings(capsys, new)
    assert code == 1
    (f,) = findings
    assert (f["rule"], f["severity"], f["subject"], f["affects"]) == (
        "DIFF-024", "breaking", "EngineCoreRequest.priority", "new->old")
    assert f["impact"] == "frontends built against NEW -> engines built against OLD"
    assert f["fix"].startswith("keep the old type") and "protocol-break" in f["fix"]
    assert (f["file"], f["line"]) == (REQUESTS, 44)


def test_widening_that_keeps_old_values_stays_a_warning(tmp_path, capsys):
    new = _layout_file(tmp_path, {REQUESTS: [("    priority: int = 0", "    priority: int | float = 0")]})
    code, findings = _findings(capsys, new)
    assert code == 0 and [(f["rule"], f["severity"]) for f in findings] == [("DIFF-021", "warning")]


def test_a_method_renamed_on_the_engine_side_only_breaks_every_frontend(tmp_path, capsys):
    new = _layout_file(tmp_path, {CORE: [("    def is_sleeping(self) -> bool: ...",
                                          "    def is_asleep(self) -> bool: ...")]})
    code, findings = _findings(capsys, new)
    assert code == 1
    (f,) = findings  # not "result widened bool -> any", not "arguments not compared"
    assert (f["rule"], f["severity"], f["subject"]) == ("DIFF-057", "breaking", "utility is_sleeping")
    assert "every call fails" in f["message"] and "alias" in f["fix"]
    assert f["file"] == CLIENT and f["line"] == 111  # the frontend's call: nothing engine-side is left


def test_auto_enum_reordered_swaps_values(tmp_path, capsys):
    auto = [("    QUEUED = enum.auto()\n    SCHEDULED = enum.auto()\n",
             "    SCHEDULED = enum.auto()\n    QUEUED = enum.auto()\n")]
    code, findings = _findings(capsys, _layout_file(tmp_path, {REPLIES: auto}))
    assert code == 1
    assert sorted((f["rule"], f["subject"], f["old"], f["new"]) for f in findings) == [
        ("DIFF-035", "enum EngineCoreEventType.QUEUED", 1, 2),
        ("DIFF-035", "enum EngineCoreEventType.SCHEDULED", 2, 1)]
    assert all(f["severity"] == "breaking" and f["file"] == REPLIES and f["line"] for f in findings)


@pytest.mark.parametrize("edits", [
    {REPLIES: [("    QUEUED = enum.auto()\n    SCHEDULED = enum.auto()\n    PREEMPTED = enum.auto()",
                "    QUEUED = 1\n    SCHEDULED = 2\n    PREEMPTED = 3")]},  # auto() written out
    {"vllm/params/sampling.py": [("    CUMULATIVE = 0\n    DELTA = auto()\n    FINAL_ONLY = auto()",
                                  "    CUMULATIVE = 0\n    DELTA = 1\n    FINAL_ONLY = 2")]},  # counted on from 0
    {REPLIES: [("    LENGTH = 1\n    ABORT = 2\n    ERROR = 3\n    REPETITION = 4",
                "    LENGTH = enum.auto()\n    ABORT = enum.auto()\n    ERROR = enum.auto()\n"
                "    REPETITION = enum.auto()")]},  # explicit values replaced by auto()
], ids=["auto-written-out", "auto-after-a-value-written-out", "explicit-to-auto"])
def test_auto_and_explicit_values_that_agree_are_no_difference(tmp_path, capsys, edits):
    code, out, _ = _diff(capsys, "vllm-0.33", str(_layout_file(tmp_path, edits)))
    assert code == 0 and "no differences" in out


def test_a_method_renamed_on_both_sides_breaks_each_direction_once(tmp_path, capsys):
    new = _layout_file(tmp_path, {
        CORE: [("    def pause_generation(self,", "    def pause_engine(self,")],
        CLIENT: [('call_utility_async("pause_generation",', 'call_utility_async("pause_engine",')]})
    code, out, _ = _diff(capsys, "vllm-0.33", str(new))
    assert code == 1
    assert "compatible in both directions" not in out
    _, findings = _findings(capsys, new)
    got = {(f["rule"], f["severity"], f["subject"], f["affects"]) for f in findings}
    assert got == {("DIFF-051", "breaking", "utility pause_generation", "old->new"),
                   ("DIFF-050", "breaking", "utility pause_engine", "new->old")}
    by_rule = {f["rule"]: f for f in findings}
    assert "renamed to pause_engine" in by_rule["DIFF-051"]["message"]
    assert by_rule["DIFF-051"]["fix"].startswith("keep the old method name as an alias")


def test_pause_generation_added_in_0_33_is_not_compatible_both_ways():
    findings = diff_layouts(load_shipped("vllm-0.32"), load_shipped("vllm-0.33"))
    (f,) = [f for f in findings if f.subject == "utility pause_generation"]
    assert f.severity == "breaking" and f.impact() == "frontends built against NEW -> engines built against OLD"


def test_every_annotation_has_a_file_and_a_line_and_a_fix(tmp_path, capsys):
    new = _layout_file(tmp_path, {
        REQUESTS: [("    priority: int = 0", "    priority: float = 0")],
        REPLIES: [("    QUEUED = enum.auto()\n    SCHEDULED = enum.auto()", "    QUEUED = 2\n    SCHEDULED = 1")],
        CORE: [("    def pause_generation(self,", "    def pause_engine(self,")]})
    code, out, _ = _diff(capsys, "vllm-0.32", str(new), "--format", "github")
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    assert code == 1 and len(annotations) > 10
    for line in annotations:
        props = line.split("::")[1]
        assert ",file=" not in props and props.split(" ", 1)[1].startswith("file="), line
        assert ",line=" in props and ". Fix: " in line, line


def test_strict_passes_on_the_unmodified_tree_and_fails_on_a_warning(tmp_path, capsys):
    """As the pull-request job runs it: the base branch's layout against the change's, both extracted."""
    (tmp_path / "base").mkdir()
    old = str(_layout_file(tmp_path / "base", {}))
    code, out, err = _diff(capsys, "--strict", old, str(_layout_file(tmp_path, {})))
    assert code == 0 and "no differences" in out and not err

    def strict(edits: dict[str, list[tuple[str, str]]]) -> tuple[int, int, str]:
        case = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        case.mkdir()
        new = str(_layout_file(case, edits))
        code, _, err = _diff(capsys, "--strict", old, new)
        return code, _diff(capsys, old, new)[0], err

    # a construct that moved keeps its warning: lines are not compared
    moved = {"vllm/media.py": [('"""Multimodal', '# moved down\n\n"""Multimodal')],
             REPLIES: [("#: the id a frontend", "# moved down\n\n#: the id a frontend")]}
    assert strict(moved)[:2] == (0, 0)
    # the same type (any), but the change made the construct unreadable: a new warning
    code, plain, err = strict({"vllm/media.py": [('data: "MultiModalKwargsItem | None"', 'data: "MediaItem | None"')]})
    assert (code, plain) == (1, 0) and "unresolved-type" in err and "not in vllm-0.34" in err
    # a diff warning (a widened type)
    assert strict({REQUESTS: [("    priority: int = 0", "    priority: int | float = 0")]})[:2] == (1, 0)
