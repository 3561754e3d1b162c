"""A release ecp does not ship, named by a layout file, passes both roles against the reference peers run
with the same ``--vllm FILE``: every case that depends on a shape, a field or a feature takes it from the
release under test, and one whose feature the release lacks is UNSUPPORTED naming the feature and the
release.

Three synthetic releases, written from the newest shipped layout: a *next* one (one optional field appended
to ``EngineCoreRequest``, as vLLM adds them), an *older* one (``abort_immediately`` taken out, as
before vLLM 0.21), and a next one with a new UTILITY method, which the reference engine cannot serve
(ENG-WIRE-1 names it). Only the release-sensitive cases run (the rest does not read the layout; the
whole of both roles runs against a source tree by hand, docs/architecture.md "Add a vLLM release").
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ecp.spec.layout.resolve import load_shipped, shipped_names

pytestmark = pytest.mark.timeout(300)

ENGINE_CASES = ("ENG-REQ-10", "ENG-REQ-13", "ENG-REJECT-1")
FRONTEND_CASES = ("FE-REQ-6", "FE-REJECT-1")
FAST = ["--quiet-window", "0.1", "--startup-timeout", "60"]  # a budget, not a wait
SERVE = ["serve", "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
         "--data-parallel-rpc-port", "{handshake_port}", "--data-parallel-size", "{engine_count}",
         "--port", "{http_port}", "--dev-mode", "--kv-connector", "reference", "--trust-request-kv-params"]
ECP = [sys.executable, "-m", "ecp.spec.cli"]


def _layout(tmp: Path, name: str, version: str, edit) -> Path:
    newest = load_shipped(shipped_names()[-1])
    data = json.loads(json.dumps(_builtins(newest)))
    data["name"], data["vllm_version"] = f"vllm-{name}", version
    fields = data["messages"]["EngineCoreRequest"]["fields"]
    fields[:] = edit(fields)
    for i, f in enumerate(fields):
        f["index"] = i
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _builtins(layout):
    import msgspec

    return msgspec.to_builtins(layout)


def _run(tmp: Path, role: str, layout: Path, cases: tuple[str, ...] | None = None) -> tuple[int, dict[str, str], dict, str]:
    report = tmp / f"{layout.stem}-{role}.json"
    cases = cases or (ENGINE_CASES if role == "engine" else FRONTEND_CASES)
    peer = (["engine", "--vllm", str(layout), "--handshake-address", "{handshake_address}"] if role == "engine"
            else [*SERVE, "--vllm", str(layout)])
    argv = [*ECP, "conformance", role, "--vllm", str(layout), "--json", str(report), *FAST,
            *[a for c in cases for a in ("--case", c)], "--", *ECP, *peer]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(report.read_text())
    return proc.returncode, {c["id"]: c["outcome"] for c in data["cases"]}, data, proc.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unshipped")
    nxt = _layout(tmp, "9.1", "9.1.0", lambda fs: [*fs, {"index": 0, "name": "ecp_next_hint", "type": "str | nil",
                                                          "required": False, "default": None}])
    old = _layout(tmp, "0.9", "0.9.3", lambda fs: [f for f in fs if f["name"] != "abort_immediately"])
    # a next release with a new UTILITY method, which no layout can tell the reference engine how to serve
    method = _layout(tmp, "9.2", "9.2.0", lambda fs: fs)
    data = json.loads(method.read_text())
    data["utility_methods"]["ecp_next_method"] = {"result": "bool", "params": [
        {"name": "level", "type": "int", "required": False}]}
    method.write_text(json.dumps(data))
    # the older release in the engine role only: the frontend role reports a missing feature through the
    # same plugin step, and shipped vLLM 0.20 (no abort_immediately) runs there in test_every_frontend_release
    jobs = [("engine", "9.1", nxt, None), ("frontend", "9.1", nxt, None), ("engine", "0.9", old, None),
            ("engine", "9.2", method, ("ENG-WIRE-1",))]
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {(role, rel): pool.submit(_run, tmp, role, path, cases) for role, rel, path, cases in jobs}
        return {key: f.result() for key, f in futures.items()}


@pytest.mark.parametrize("role", ["engine", "frontend"])
def test_a_next_release_passes_as_itself(runs, role):
    code, outcomes, data, stdout = runs[(role, "9.1")]
    assert set(outcomes.values()) == {"PASS"}, stdout[-3000:]
    assert code == 0
    assert data["release"]["under_test"] == "9.1", data["release"]
    assert "as vLLM 9.1" in stdout.splitlines()[0], stdout.splitlines()[0]
    # the peer speaks the release under test: no other release fits it better, so none is suggested
    assert data["release"]["mismatch"] is None, data["release"]
    assert "rerun with" not in stdout and "9.1" in data["release"]["fits"], data["release"]


@pytest.mark.parametrize("role", ["engine"])
def test_an_older_release_without_a_feature_is_unsupported_naming_it(runs, role):
    code, outcomes, data, stdout = runs[(role, "0.9")]
    assert code == 0, stdout[-3000:]
    assert "FAIL" not in outcomes.values() and data["release"]["under_test"] == "0.9"
    reject = "ENG-REJECT-1" if role == "engine" else "FE-REJECT-1"
    assert outcomes[reject] == "UNSUPPORTED"
    assert f"UNSUPPORTED {reject}: EngineCoreRequest.abort_immediately: not in vLLM 0.9 " in stdout, stdout
    # the shapes the release does have are judged as its own
    assert outcomes["ENG-REQ-10" if role == "engine" else "FE-REQ-6"] == "PASS"
    if role == "engine":  # vllm-rs's recorded ADD has abort_immediately where this release has session_id
        assert outcomes["ENG-REQ-13"] == "UNSUPPORTED"
        assert "UNSUPPORTED ENG-REQ-13: the vllm-rs ADD was recorded from vLLM " in stdout


def test_a_new_utility_method_the_reference_engine_lacks_is_named(runs):
    """What a method does is not in a layout: the reference engine answers a method of its release that
    it does not implement as unknown, and ENG-WIRE-1 says so by name (not as a refusal of its shape)."""
    code, outcomes, data, stdout = runs[("engine", "9.2")]
    assert code == 1 and outcomes == {"ENG-WIRE-1": "FAIL"}, stdout[-3000:]
    [case] = data["cases"]
    assert "vLLM 9.2's own UTILITY methods answered as unknown methods" in case["message"], case["message"]
    assert "ecp_next_method" in case["message"] and "refused by their shape" not in case["message"]
