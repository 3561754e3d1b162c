"""Runs a person can watch: a line per case as it ends (id, outcome, seconds, cases left) and the
explorer's progress every few seconds; ``--quiet`` leaves both out (CI logs)."""

from __future__ import annotations

import re
import sys

from ecp.conformance.explore import run as explore_run
from ecp.conformance.explore.run import PROGRESS_S, ExploreOptions, explore

CASES = ["ENG-HS-1", "ENG-HS-2", "ENG-REQ-1"]
ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process", "--step-time-ms", "1"]
LINE = re.compile(r"^  (?P<id>\S+)\s+(?P<outcome>[A-Z]+)\s+(?P<s>\d+\.\d\d) s\s+(?P<left>\d+) left$")


def _run(capsys, *extra: str) -> tuple[int, list[re.Match]]:
    from ecp.spec.cli import main

    args = ["conformance", "engine", "--adapter", "reference_adapters:paced", *extra]
    for case in CASES:
        args += ["--case", case]
    code = main(args)
    captured = capsys.readouterr()
    lines = [m for m in map(LINE.match, captured.err.splitlines()) if m]
    assert not any(LINE.match(line) for line in captured.out.splitlines()), "progress belongs on stderr"
    return code, lines


def test_a_line_per_case_as_it_ends_with_what_is_left(capsys):
    code, lines = _run(capsys)
    assert code == 0
    assert sorted(m["id"] for m in lines) == sorted(CASES)
    assert [int(m["left"]) for m in lines] == [2, 1, 0]
    assert all(m["outcome"] == "PASS" for m in lines)


def test_quiet_leaves_the_lines_out(capsys):
    code, lines = _run(capsys, "--quiet")
    assert code == 0 and lines == []


def test_the_explorer_says_where_it_stands_every_few_seconds(tmp_path):
    said: list[str] = []
    opts = ExploreOptions(command=ENGINE, budget_s=60, max_sessions=2, seed=11, max_steps=4, out_dir=tmp_path,
                          quiet_window_s=0.1, progress_s=0.01)
    report = explore(opts, say=said.append)
    progress = [re.match(r"^\[\s*\d+s\] (\d+) session\(s\), (\d+) message\(s\) judged, (\d+) finding\(s\)$", s)
                for s in said]
    counts = [int(m[1]) for m in progress if m]
    assert counts and counts == sorted(counts) and counts[-1] <= report.sessions, said
    assert counts[-1] >= 1, said


def test_the_explorer_s_quiet_flag_turns_progress_off(monkeypatch, tmp_path):
    from ecp.spec.cli import main

    seen: list[float] = []

    def fake_explore(opts, say):
        seen.append(opts.progress_s)
        return explore_run.ExploreReport()

    monkeypatch.setattr(explore_run, "explore", fake_explore)
    base = ["conformance", "explore", "engine", "--out", str(tmp_path), "--", *ENGINE]
    assert main(base[:3] + ["--quiet"] + base[3:]) == 0
    assert main(base) == 0
    assert seen == [0.0, PROGRESS_S]
