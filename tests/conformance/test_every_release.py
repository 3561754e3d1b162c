"""The reference engine passes the engine role in every shipped release: the harness and the engine
speak the same release (``--vllm R`` on both sides), for the fast subset :data:`CASES`.

Why this subset is enough for CI: the reference engine's core thinks in vLLM 0.33's messages for
every release; what a release changes is only at its edge, and each edge has a case here --
the codec both ways (ENG-REQ-1 decodes the release's outputs, ENG-OUT-6 checks their full
length, ENG-WIRE-2 sends the release's ADD full and sparse, ENG-REQ-10 cut to the release's required
fields), the features a release may lack (ENG-REJECT-1: UNSUPPORTED naming abort_immediately before 0.21), the ready payload (ENG-HS-3: the
release's required keys and vllm_version), the UTILITY table and arities (ENG-WIRE-1), and the
pause behaviour that differs by release (ENG-UTIL-4: an ADD while asleep is queued before 0.33;
ENG-REQ-9: UNSUPPORTED naming the release where pause_generation is missing). The release-
independent behaviour is the full 0.33 suite's (tests/conformance/test_engine_role.py), and the
full suite for 0.32 is run by hand (docs/conformance.md).
"""

from __future__ import annotations

import json

import pytest

from ecp.spec.profile import shipped_profile, shipped_releases

CASES = ("ENG-HS-3", "ENG-REQ-1", "ENG-REQ-9", "ENG-REQ-10", "ENG-REJECT-1", "ENG-OUT-6", "ENG-UTIL-4", "ENG-WIRE-1",
         "ENG-WIRE-2")
FAST = ["--quiet-window", "0.1", "--startup-timeout", "30"]  # a budget, not a wait: loaded CI machines


@pytest.mark.parametrize("release", shipped_releases())
def test_the_reference_engine_passes_its_release(run_ecp, tmp_path, release):
    report = tmp_path / "r.json"
    selection = [arg for cid in CASES for arg in ("--case", cid)]
    code, stdout = run_ecp("conformance", "engine", "--vllm", release, "--adapter",
                           f"reference_adapters:release_{release.replace('.', '_')}", *selection,
                           "--json", str(report), *FAST)
    assert code == 0, stdout
    data = json.loads(report.read_text())
    outcomes = {c["id"]: c["outcome"] for c in data["cases"]}
    assert sorted(outcomes) == sorted(CASES)
    assert data["release"]["under_test"] == release and data["release"]["mismatch"] is None
    if release != "0.33":
        assert stdout.splitlines()[1] == f"judged as vLLM {release} (--vllm {release})", stdout
    # a release without pause_generation cannot judge the paused ADD's error: said, naming the release
    has_pause = "pause_generation" in shipped_profile(release).utility_methods
    assert outcomes["ENG-REQ-9"] == ("PASS" if has_pause else "UNSUPPORTED")
    if not has_pause:
        assert f"UNSUPPORTED ENG-REQ-9: pause_generation: not in vLLM {release}" in stdout
    # abort_immediately (the rejection notice) is a feature: UNSUPPORTED, naming it, where the release lacks it
    has_notice = shipped_profile(release).has_field("EngineCoreRequest", "abort_immediately")
    assert outcomes["ENG-REJECT-1"] == ("PASS" if has_notice else "UNSUPPORTED")
    if not has_notice:
        assert f"UNSUPPORTED ENG-REJECT-1: EngineCoreRequest.abort_immediately: not in vLLM {release} " in stdout
    assert all(outcomes[c] == "PASS" for c in CASES if c not in ("ENG-REQ-9", "ENG-REJECT-1")), outcomes


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
