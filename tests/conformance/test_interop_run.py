"""``ecp interop run``: configured implementations into a results set, a run that never served
recorded with its cause, resumed without running a pair again (a run that serves: the real set
committed under docs/interop-site/, and test_interop_results.py)."""

from __future__ import annotations

import json
import sys

from ecp.conformance.interop import results as res


def test_run_records_causes_and_resumes(run_ecp, tmp_path):
    config = tmp_path / "config.json"
    quick = ["--vllm", "{release}", "--case", "ENG-HS-1", "--startup-timeout", "10", "--quiet-window", "0.1"]
    config.write_text(json.dumps({"implementations": [
        # exits at once: the harness reports the launch that never served
        {"name": "dies", "role": "engine", "releases": ["0.33"], "options": quick,
         "command": [sys.executable, "-c", "import sys; sys.exit(3)", "{handshake_address}"]},
        # an option the harness refuses: no result.json from the run, interop run writes why
        {"name": "refused", "role": "engine", "releases": ["0.32"], "options": ["--vllm", "9.99"],
         "command": [sys.executable, "-c", "pass"]},
    ]}))
    out = tmp_path / "set"
    code, stdout = run_ecp("interop", "run", "--no-builtin", "--config", str(config), "--out", str(out))
    assert code == 1, stdout
    docs = {d.name: res.load(d / "result.json") for d in out.iterdir() if d.is_dir()}
    assert sorted(docs) == ["engine--dies--0.33", "engine--refused--0.32"]
    dies = docs["engine--dies--0.33"]
    assert dies["served"]["ok"] is False and "status 3" in dies["served"]["cause"], dies["served"]
    refused = docs["engine--refused--0.32"]
    assert refused["exit_code"] == 2 and refused["served"]["ok"] is False and "9.99" in refused["served"]["cause"]
    meta = json.loads((out / "set.json").read_text())
    assert len(meta["configured"]) == 2 and meta["ecp"]["version"] == res.ecp_version()
    # resumed: nothing runs again
    code, stdout = run_ecp("interop", "run", "--no-builtin", "--config", str(config), "--out", str(out))
    assert stdout.count("done before") == 2, stdout


def test_builtin_lists_reference_peers_of_every_release_and_missing_vllm_peers(run_ecp, tmp_path):
    from ecp.spec.profile import shipped_releases

    code, stdout = run_ecp("interop", "run", "--out", str(tmp_path / "x"), "--peers", str(tmp_path), "--list")
    assert code == 0
    for release in shipped_releases():
        assert f"ecp engine               {release}" in stdout and f"ecp serve                {release}" in stdout
    assert "vllm engine core DP=2    0.33   missing: no vLLM 0.33 peer installed at" in stdout
    assert "vllm-rs                  0.23   missing" in stdout and "vllm-rs                  0.22" not in stdout


def test_a_missing_peer_installed_since_is_recorded_as_not_run_with_its_command(tmp_path):
    """A set that recorded a vLLM row as missing (no peer) does not keep saying so once the peer is
    installed: a later ``interop run`` that does not run that row says it was not run, and how to."""
    from ecp.conformance.interop.matrix import SET_FILE, builtin, run_set

    peers, out = tmp_path / "peers", tmp_path / "set"
    peers.mkdir()
    run_set([], out, known=builtin(peers), say=lambda line: None)  # nothing recorded yet: nothing to say
    assert not (out / SET_FILE).exists() or json.loads((out / SET_FILE).read_text())["missing"] == []
    engines = [i for i in builtin(peers) if i.name == "vllm engine core DP=1"]
    run_set(engines, out, releases=["0.33"], say=lambda line: None)
    [missing] = json.loads((out / SET_FILE).read_text())["missing"]
    assert missing["release"] == "0.33" and "no vLLM 0.33 peer installed" in missing["why"]
    (peers / "vllm-peer-0.33").mkdir()
    (peers / "vllm-peer-0.33" / "run_serve.sh").write_text("#!/bin/sh\nexit 1\n")
    run_set([], out, known=builtin(peers), say=lambda line: None)  # another selection: this row not run
    [missing] = json.loads((out / SET_FILE).read_text())["missing"]
    assert missing["why"].startswith("not run in this set, though its vLLM 0.33 peer is installed here now")
    assert "--only 'vllm engine core DP=1' --release 0.33" in missing["why"]
