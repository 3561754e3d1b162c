"""``ecp serve --vllm R`` passes the frontend role run with ``--vllm R``, for every shipped release.

The fast subset (:data:`RELEASE_CASES`) is the part of the frontend role that depends on the release:
the handshake with the release's ready payload (FE-HS-1), the ADD the engines decode with the release's
layout (FE-REQ-1, completions and chat) at the release's full length (FE-REQ-6), outputs cut to the release's required elements or longer
(FE-OUT-4) and the release's full and sparse samples of every output field (FE-OUT-9), and a UTILITY
call to every engine (FE-UTIL-4). Everything else the role checks (HTTP, aborts, DP, robustness) runs
above the codec and is the same code for every release: the full suite runs against 0.33 in
``test_self_proof.py``. A case fails here only if the client's codec, its utility table or the
scripted engines' side of a release is wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ecp.spec.profile import shipped_releases

from test_self_proof import SERVE

#: the 13 runs share one fixture: its time (about 10 s on 2 idle cores) counts against the first test,
#: so the module's bound is above the default 120 s a loaded machine can exceed
# one xdist worker runs the module, so its module fixture (13 launches) runs once
pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("frontend-release-runs")]

RELEASE_CASES = ("FE-HS-1", "FE-REQ-1", "FE-REQ-6", "FE-OUT-4", "FE-OUT-9", "FE-UTIL-4")
#: releases checked at a time (each run is mostly two Python processes starting)
WORKERS = 4


def _run(tmp: Path, release: str) -> tuple[int, dict[str, str], str]:
    out = tmp / f"{release}.json"
    argv = [sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend", "--vllm", release, "--json", str(out)]
    for c in RELEASE_CASES:
        argv += ["--case", c]
    argv += ["--", sys.executable, *SERVE, "--vllm", release]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    return proc.returncode, {r["id"]: r["outcome"] for r in report["cases"]}, proc.stdout + json.dumps(
        report.get("release"))


@pytest.fixture(scope="module")
def release_runs(tmp_path_factory) -> dict[str, tuple[int, dict[str, str], str]]:
    tmp = tmp_path_factory.mktemp("releases")
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = {r: pool.submit(_run, tmp, r) for r in shipped_releases()}
        return {r: run.result() for r, run in runs.items()}


def test_every_shipped_release_is_checked(release_runs):
    assert sorted(release_runs) == sorted(shipped_releases())


@pytest.mark.parametrize("release", shipped_releases())
def test_reference_frontend_speaks_the_release(release_runs, release):
    code, outcomes, output = release_runs[release]
    assert outcomes == {c: "PASS" for c in RELEASE_CASES}, output[-3000:]
    assert code == 0
    # the first line names the release under test
    assert output.splitlines()[0].endswith(f"as vLLM {release}"), output.splitlines()[0]


def test_auto_names_the_release_the_frontend_speaks(tmp_path):
    """``--vllm auto``: one request case with 0.33 engines, then the suite as the release the frontend's
    traffic fits (here its ``GET /version``), said in the first line."""
    argv = [sys.executable, "-m", "ecp.spec.cli", "conformance", "frontend", "--vllm", "auto", "--case", "FE-REQ-1",
            "--", sys.executable, *SERVE, "--vllm", "0.31"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("--vllm auto: this frontend speaks vLLM 0.31 (") and \
        lines[0].endswith("; judging it as vLLM 0.31"), proc.stdout[-2000:]
    assert lines[1].endswith("as vLLM 0.31") and proc.returncode == 0, proc.stdout[-2000:]
