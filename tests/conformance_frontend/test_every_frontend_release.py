"""The reference frontend passes the whole frontend role in every shipped release: the scripted engines
and ``ecp serve`` speak the same release (``--vllm R`` on both sides), every case of the catalogue runs,
and each is PASS or UNSUPPORTED, an UNSUPPORTED case naming what release R lacks.

How CI affords a full run per release (14): ``ecp serve`` runs in a thread of the test process
(``--adapter ecp.reference.frontend.in_thread:serve``), so a run starts no process: its dozen and a half
launches of the frontend cost a fraction of a second each instead of a Python start-up each, and the harness
itself runs in-process too. The bursts, which hold the frontend while they drop their streams, hold its
event loop instead of its process (``ServeThread.frozen``), so no case is left to a process-bound run;
``test_self_proof.py`` keeps the launched form (a process per launch, SIGSTOP) under test. The
releases are parametrized, so the xdist workers run them side by side.
"""

from __future__ import annotations

import json

import pytest

from ecp.conformance.registry import load_role
from ecp.spec.profile import shipped_profile, shipped_releases

from test_self_proof import SERVE_ARGS

ADAPTER = "ecp.reference.frontend.in_thread:serve"
#: the quiet window the engine role's every-release runs use too: the reference frontend sends nothing
#: stray, and a shorter watch for an absence cannot fail a correct peer (a budget, not a wait)
QUIET = ["--quiet-window", "0.1"]


@pytest.mark.parametrize("release", shipped_releases())
def test_the_reference_frontend_passes_the_whole_role_in_its_release(run_ecp, tmp_path, release):
    report = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "frontend", "--vllm", release, "--adapter", ADAPTER, *QUIET,
                           "--json", str(report), "--", *SERVE_ARGS, "--vllm", release)
    assert code == 0, stdout[-4000:]
    data = json.loads(report.read_text())
    outcomes = {c["id"]: c for c in data["cases"]}
    assert sorted(outcomes) == sorted(c.id for c in load_role("frontend"))  # the whole role, not a subset
    # the first line names the release under test
    assert stdout.splitlines()[0].endswith(f"as vLLM {release}"), stdout.splitlines()[0]
    for cid, c in outcomes.items():
        if c["outcome"] == "UNSUPPORTED":
            assert f"vLLM {release}" in c["message"], \
                f"{cid} UNSUPPORTED without naming what vLLM {release} lacks: {c['message']}"
        else:
            assert c["outcome"] == "PASS", f"{cid} {c['outcome']}: {c['message']}"
    # the feature that decides: a release without rejection notices is UNSUPPORTED there, and only there
    has_notice = shipped_profile(release).has_field("EngineCoreRequest", "abort_immediately")
    assert (outcomes["FE-REJECT-1"]["outcome"] == "PASS") == has_notice, outcomes["FE-REJECT-1"]


def test_auto_names_the_release_the_frontend_speaks(run_ecp):
    """``--vllm auto``: one request case with 0.33 engines, then the suite as the release the frontend's
    traffic fits (here its ``GET /version``), said in the first line."""
    code, stdout = run_ecp("conformance", "frontend", "--vllm", "auto", "--case", "FE-REQ-1", "--adapter", ADAPTER,
                           "--", *SERVE_ARGS, "--vllm", "0.31")
    lines = stdout.splitlines()
    assert lines[0].startswith("--vllm auto: this frontend speaks vLLM 0.31 (") and \
        lines[0].endswith("; judging it as vLLM 0.31"), stdout[-2000:]
    assert lines[1].endswith("as vLLM 0.31") and code == 0, stdout[-2000:]
