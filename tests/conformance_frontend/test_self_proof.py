"""Self-proof of the frontend role against the reference frontend (``ecp serve``).

* the reference frontend passes every case: the whole role, in every shipped release
  (``test_every_frontend_release.py``, with ``ecp serve`` in a thread);
* each ``--bug`` knob of the reference client/frontend fails exactly the
  cases named for it in :data:`KNOB_CASES` (the mapping is data) and nothing
  else among them;
* every case is failed by some knob, but for the few in :data:`NOT_KILLED`,
  each with the reason.

Each knob run selects only its named cases, against ``ecp serve`` in a thread of
the test process (``--adapter ecp.reference.frontend.in_thread:serve``) with the
harness in-process: a knob run starts no process, and the runs are parametrized
so the xdist workers share them. The launched form (a process per launch, frozen
with SIGSTOP) is checked by :func:`test_reference_frontend_passes_as_a_process`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ecp.conformance.frontend.catalog import CASES

pytestmark = pytest.mark.slow

#: ``ecp serve``'s arguments for the frontend role: external engines on the harness's ports, dev mode, a KV connector
SERVE_ARGS = ["--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
              "--data-parallel-rpc-port", "{handshake_port}", "--data-parallel-size", "{engine_count}",
              "--port", "{http_port}", "--dev-mode", "--kv-connector", "reference", "--trust-request-kv-params"]
SERVE = ["-m", "ecp.spec.cli", "serve", *SERVE_ARGS]

#: knob -> the cases that must FAIL with it (issue 7's "named cases").
KNOB_CASES: dict[str, tuple[str, ...]] = {
    "abort-one-per-request": ("FE-ABORT-4", "FE-ABORT-5"),
    "first-engine-is-sleeping": ("FE-UTIL-1", "FE-UTIL-4"),
    "reset-prefix-cache-any": ("FE-UTIL-3",),
    "no-rejection-notification": ("FE-REJECT-1",),
    "notify-without-connector": ("FE-REJECT-4",),
    "ignore-engine-dead": ("FE-ROB-1", "FE-OUT-3"),
    "unknown-output-fatal": ("FE-OUT-1",),
    "error-output-as-stop": ("FE-OUT-2",),
    "reserved-call-id-fatal": ("FE-UTIL-5",),
    "max-model-len-maximum": ("FE-HS-5",),
    "notice-instead-of-error": ("FE-REJECT-3",),
    "lenient-handshake": ("FE-HS-6",),
    "any-identity-accepted": ("FE-HS-7",),
    "lora-mismatch-accepted": ("FE-HS-8",),
    "one-frame-adds": ("FE-REQ-5",),
    "short-add-arrays": ("FE-REQ-6",),
    "external-id-as-request-id": ("FE-REQ-7",),
    "sampling-params-array": ("FE-REQ-8",),
    "abort-every-engine": ("FE-ABORT-11", "FE-ABORT-1", "FE-ABORT-2"),
    "abort-external-id": ("FE-ABORT-12", "FE-ABORT-7", "FE-ABORT-8", "FE-ABORT-9", "FE-ABORT-10"),
    "strict-output-arrays": ("FE-OUT-4", "FE-OUT-9"),
    "int-for-float-refused": ("FE-OUT-5",),
    "aux-frames-dropped": ("FE-OUT-6",),
    "timestamps-compared": ("FE-OUT-7",),
    "unknown-finish-reason-as-stop": ("FE-OUT-8",),
    "collective-rpc-first-engine": ("FE-UTIL-6",),
    "unknown-call-id-fatal": ("FE-UTIL-7",),
    "wave-counted-locally": ("FE-DP-1",),
    "no-wave-as-minus-one": ("FE-REQ-2", "FE-DP-1"),
    "arrival-time-monotonic": ("FE-REQ-1",),
    "pinned-rank-ignored": ("FE-REQ-3", "FE-HS-1"),
    "all-to-first-engine": ("FE-REQ-4",),
    "full-ready-payload-required": ("FE-HS-2",),
    "unknown-ready-keys-refused": ("FE-HS-3",),
    "registration-as-ready": ("FE-HS-4",),
    "notice-for-remote-prefill": ("FE-REJECT-2",),
    "consensus-as-list": ("FE-UTIL-2",),
    "refusals-as-500": ("FE-REQ-3", "FE-HS-5", "FE-HTTP-1"),
    "plain-error-bodies": ("FE-HTTP-1",),
    "reset-prefix-cache-never-true": ("FE-UTIL-3", "FE-UTIL-4"),
    "notice-random-id": ("FE-REJECT-1",),
    "engine-dead-fails-first-engine": ("FE-ROB-1",),
    "forward-untrusted-kv-params": ("FE-SEC-1",),
}

#: cases no knob fails, and why (every other case is failed by at least one knob)
NOT_KILLED: dict[str, str] = {}

#: The 2,000-stream bursts, which no knob run includes (each would cost a knob run seconds): judged by the
#: same code as their 64-stream twins FE-ABORT-2/5, which the knobs fail.
SLOW_CASES = ("FE-ABORT-3", "FE-ABORT-6")
#: ecp serve in a thread of the harness's process (``--adapter``)
ADAPTER = "ecp.reference.frontend.in_thread:serve"
#: the cases the launched form runs: a handshake and the bursts small enough to be quick, which freeze the
#: frontend's process (SIGSTOP) to drop their streams at once
PROCESS_CASES = ("FE-HS-1", "FE-ABORT-1", "FE-ABORT-2", "FE-ABORT-4", "FE-ABORT-5")


def run_frontend_role(run_ecp, tmp_path: Path, cases: list[str], extra: list[str] = (), *,
                      in_thread: bool = True) -> tuple[int, dict[str, dict], str]:
    """The harness in this process against ``ecp serve ... EXTRA``: in a thread (``--adapter``) or launched as a
    process per launch."""
    out = tmp_path / "results.json"
    argv = ["conformance", "frontend", "--json", str(out)]
    for c in cases:
        argv += ["--case", c]
    argv += ["--adapter", ADAPTER, "--", *SERVE_ARGS] if in_thread else ["--", sys.executable, *SERVE]
    code, stdout = run_ecp(*argv, *extra)
    assert out.exists(), stdout[-3000:]
    results = {r["id"]: r for r in json.loads(out.read_text())["cases"]}
    return code, results, stdout


def test_knob_mapping_names_real_cases():
    ids = {c.id for c in CASES}
    for knob, cases in KNOB_CASES.items():
        assert cases and set(cases) <= ids, knob


def test_every_fault_is_caught_by_named_cases():
    from ecp.reference.frontend.faults import SERVE_FAULTS

    assert set(KNOB_CASES) == set(SERVE_FAULTS)


def test_docs_show_the_matrix():
    """docs/conformance.md's frontend-role proof matrix is KNOB_CASES, with each fault's clause and effect."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from doc_blocks import check_block, table
    from ecp.reference.frontend.faults import SERVE_FAULTS

    rows = [(f"`{knob}`", SERVE_FAULTS[knob].clause, SERVE_FAULTS[knob].does, ", ".join(cases))
            for knob, cases in KNOB_CASES.items()]
    check_block("conformance.md", "frontend proof matrix",
                table(("`ecp serve --bug`", "breaks", "what it does", "caught by"), rows))


def test_every_case_is_killed_by_some_fault():
    killed = {cid for cases in KNOB_CASES.values() for cid in cases}
    unkilled = {c.id for c in CASES} - killed - set(SLOW_CASES)
    assert unkilled == set(NOT_KILLED), sorted(unkilled ^ set(NOT_KILLED))
    assert not killed & set(NOT_KILLED)


def test_reference_frontend_passes_as_a_process(run_ecp, tmp_path):
    """``ecp serve`` launched as a process per launch, the form a user runs: the handshake, and the bursts
    that freeze its process group."""
    code, results, output = run_frontend_role(run_ecp, tmp_path, list(PROCESS_CASES), in_thread=False)
    assert {cid: r["outcome"] for cid, r in results.items()} == {cid: "PASS" for cid in PROCESS_CASES}, output[-3000:]
    assert code == 0


@pytest.mark.parametrize("knob", sorted(KNOB_CASES))
def test_bug_knob_fails_its_named_cases(run_ecp, tmp_path, knob):
    named = KNOB_CASES[knob]
    code, results, output = run_frontend_role(run_ecp, tmp_path, list(named), ["--bug", knob])
    outcomes = {cid: results[cid]["outcome"] for cid in named}
    assert all(o == "FAIL" for o in outcomes.values()), (outcomes, output[-3000:])
    must = [cid for cid in named if next(c for c in CASES if c.id == cid).level == "MUST"]
    assert code == (1 if must else 0)   # SHOULD failures do not fail a non-strict run


def _serve_in_thread(args: list[str]):
    """``ecp serve ARGS`` in a thread of this process, on fresh ports: (handshake port, HTTP port, handle)."""
    from ecp.conformance.frontend.launcher import free_port
    from ecp.reference.frontend.in_thread import serve

    hs, http = free_port(), free_port()
    return hs, http, serve([a.replace("{handshake_port}", str(hs)).replace("{http_port}", str(http))
                            .replace("{engine_count}", "2") for a in args])


def test_attach_to_a_frontend_started_by_the_user(tmp_path, run_ecp):
    hs, http, frontend = _serve_in_thread(SERVE_ARGS)
    try:
        out = tmp_path / "results.json"
        code, stdout = run_ecp("conformance", "frontend", "--json", str(out), "--attach", f"tcp://127.0.0.1:{hs}",
                               "--http-url", f"http://127.0.0.1:{http}", "--case", "FE-REQ-*", "--case", "FE-HS-2")
    finally:
        frontend.stop()
    results = {r["id"]: r["outcome"] for r in json.loads(out.read_text())["cases"]}
    assert results.pop("FE-HS-2") == "UNSUPPORTED"      # needs a relaunch
    assert results and set(results.values()) == {"PASS"}, stdout[-2000:]
    assert code == 0


def test_attach_to_a_frontend_without_kv_connector(tmp_path, run_ecp):
    """The harness cannot read an attached frontend's command line: --no-kv-connector says it has
    no connector, so the notice cases are UNSUPPORTED (not FAIL) and FE-REJECT-4 runs on it."""
    from ecp.conformance.frontend.launcher import without_kv_connector

    hs, http, frontend = _serve_in_thread(without_kv_connector(SERVE_ARGS))
    try:
        out = tmp_path / "results.json"
        code, stdout = run_ecp("conformance", "frontend", "--json", str(out), "--attach", f"tcp://127.0.0.1:{hs}",
                               "--http-url", f"http://127.0.0.1:{http}", "--no-kv-connector", "--case", "FE-REJECT-*")
    finally:
        frontend.stop()
    results = {r["id"]: r["outcome"] for r in json.loads(out.read_text())["cases"]}
    assert results == {"FE-REJECT-1": "UNSUPPORTED", "FE-REJECT-2": "UNSUPPORTED", "FE-REJECT-3": "PASS",
                       "FE-REJECT-4": "PASS"}, stdout[-2000:]
    assert code == 0


def test_a_frontend_that_exits_at_once_is_a_crash_not_a_hang(tmp_path, run_ecp):
    out = tmp_path / "results.json"
    code, _ = run_ecp("conformance", "frontend", "--json", str(out), "--case", "FE-REQ-1",
                      "--", sys.executable, "-c", "import sys; sys.exit(3)", "{handshake_port}", "{http_port}")
    results = {r["id"]: r for r in json.loads(out.read_text())["cases"]}
    assert results["FE-REQ-1"]["outcome"] == "CRASH" and "status 3" in results["FE-REQ-1"]["message"]
    assert code == 1
