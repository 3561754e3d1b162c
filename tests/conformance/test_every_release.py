"""The reference engine passes the whole engine role in every shipped release: the harness and the
engine speak the same release (``--vllm R`` on both sides), every case of the catalogue runs, and each
is PASS or UNSUPPORTED, an UNSUPPORTED case naming what release R lacks.

How CI affords fourteen full runs: the engine runs in threads of the test process
(``--adapter reference_adapters:release_R``), so a run costs no process launch (about 1.5 s of CPU,
5-10 s of wall time spent mostly waiting on the engine); the releases are parametrized, so the xdist
workers run them side by side. The one case an in-process engine cannot serve, ENG-ROB-8 (it signals
the engine's process), runs with processes in the 0.33 suite (tests/conformance/test_engine_role.py)
and for the oldest release below, with the engine as a process of its own.
"""

from __future__ import annotations

import json

import pytest

from ecp.conformance.registry import load_role
from ecp.spec.profile import shipped_profile, shipped_releases

FAST = ["--quiet-window", "0.1", "--startup-timeout", "30"]  # a budget, not a wait: loaded CI machines
#: ENG-ROB-8's long requests must still run at the SIGTERM: an unpaced engine may finish them first
PACED = ["--step-time-ms", "1"]
#: the cases an in-process engine cannot serve, and what the harness says of them
PROCESS_BOUND = {"ENG-ROB-8": "needs an engine process the harness launches and can signal"}


@pytest.mark.parametrize("release", shipped_releases())
def test_the_reference_engine_passes_the_whole_role_in_its_release(run_ecp, tmp_path, release):
    report = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "engine", "--vllm", release, "--adapter",
                           f"reference_adapters:release_{release.replace('.', '_')}", "--json", str(report), *FAST)
    assert code == 0, stdout
    data = json.loads(report.read_text())
    outcomes = {c["id"]: c for c in data["cases"]}
    assert sorted(outcomes) == sorted(c.id for c in load_role("engine"))  # the whole role, not a subset
    assert data["release"]["under_test"] == release and data["release"]["mismatch"] is None
    if release != shipped_releases()[-1]:
        assert stdout.splitlines()[1] == f"judged as vLLM {release} (--vllm {release})", stdout
    for cid, c in outcomes.items():
        if c["outcome"] == "UNSUPPORTED":
            named = PROCESS_BOUND.get(cid) or f"vLLM {release}"
            assert named in c["message"], f"{cid} UNSUPPORTED without naming what vLLM {release} lacks: {c['message']}"
        else:
            assert c["outcome"] == "PASS", f"{cid} {c['outcome']}: {c['message']}"
    # the features that decide: a release without them is UNSUPPORTED there, and only there
    profile = shipped_profile(release)
    has_pause = "pause_generation" in profile.utility_methods
    assert outcomes["ENG-REQ-9"]["outcome"] == ("PASS" if has_pause else "UNSUPPORTED")
    if not has_pause:
        assert f"UNSUPPORTED ENG-REQ-9: pause_generation: not in vLLM {release}" in stdout
    has_notice = profile.has_field("EngineCoreRequest", "abort_immediately")
    assert outcomes["ENG-REJECT-1"]["outcome"] == ("PASS" if has_notice else "UNSUPPORTED")
    if not has_notice:
        assert f"UNSUPPORTED ENG-REJECT-1: EngineCoreRequest.abort_immediately: not in vLLM {release} " in stdout


def test_the_oldest_release_shuts_down_gracefully_as_a_process(run_ecp, tmp_path):
    """ENG-ROB-8 against ``ecp engine --vllm R`` launched as a process, R the oldest shipped release."""
    import sys

    release = shipped_releases()[0]
    code, stdout = run_ecp("conformance", "engine", "--vllm", release, "--case", "ENG-ROB-8", *FAST, "--",
                           sys.executable, "-m", "ecp.reference.engine", "--vllm", release,
                           "--handshake-address", "{handshake_address}", "--engine-count", "{engine_count}", *PACED)
    assert code == 0 and "1 PASS" in stdout.splitlines()[-1], stdout


#: the reference engine speaking an older release, judged as vLLM 0.33: the cases that must fail it (the
#: misbehaving peers of the wire-shape cases, in the proof matrix of test_proof_matrix.py)
RELEASE_MISMATCH: dict[str, list[str]] = {
    # pause_generation unknown, profile refuses 5 arguments; 18-element outputs
    "0.32": ["ENG-WIRE-1", "ENG-OUT-6"],
    # add_lora refuses 0.33's LoRARequest; the 0.33 ADD (prompt_logprob_token_ids a tensor) is refused
    "0.31": ["ENG-WIRE-1", "ENG-WIRE-2"],
}


@pytest.mark.parametrize("release", sorted(RELEASE_MISMATCH))
def test_an_engine_of_another_release_fails_the_wire_shape_cases(run_ecp, tmp_path, release):
    report = tmp_path / "r.json"
    selection = [arg for cid in RELEASE_MISMATCH[release] for arg in ("--case", cid)]
    code, stdout = run_ecp("conformance", "engine", "--adapter",
                           f"reference_adapters:release_{release.replace('.', '_')}", *selection,
                           "--json", str(report), *FAST)
    assert code == 1, stdout
    outcomes = {c["id"]: c["outcome"] for c in json.loads(report.read_text())["cases"]}
    assert all(outcomes[c] == "FAIL" for c in RELEASE_MISMATCH[release]), stdout
    assert stdout.splitlines()[1].startswith(f"this engine speaks vLLM {release}"), stdout
