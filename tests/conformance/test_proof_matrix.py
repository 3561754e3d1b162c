"""Self-proof: every engine-role case is failed by at least one misbehaving peer.

``PROOF`` maps each bug knob of the scripted raw-frame engine to the cases
that must catch it; a test asserts the mapping case by case and another that
the mapping covers the whole catalogue. Together with ``REFERENCE_KNOBS``, ``COMMAND_KNOBS`` and ``RELEASE_MISMATCH`` they are the proof
matrix docs/conformance.md shows: :func:`test_docs_show_the_matrix` renders it from them.
"""

import json

import pytest

from ecp.conformance.registry import load_role

PROOF: dict[str, list[str]] = {
    "bad-hello": ["ENG-HS-1"],
    "wrong-identity": ["ENG-HS-2"],
    "empty-ready": ["ENG-HS-3"],
    "no-ready": ["ENG-HS-4"],
    "double-registration": ["ENG-HS-5"],
    "first-input-only": ["ENG-HS-6", "ENG-OUT-3"],
    "ignore-max-tokens": ["ENG-REQ-1"],
    "stop-instead-of-length": ["ENG-REQ-1"],
    "no-stop-token": ["ENG-REQ-2"],
    "eos-stop-reason": ["ENG-REQ-2"],
    "no-min-tokens": ["ENG-REQ-3"],
    "no-duplicate-check": ["ENG-REQ-4"],
    "no-length-check": ["ENG-REQ-5"],
    "no-param-check": ["ENG-REQ-6"],
    "no-terminal-output": ["ENG-REQ-1", "ENG-OUT-1"],
    "duplicate-output": ["ENG-OUT-1"],
    "wrong-engine-index": ["ENG-OUT-2", "ENG-DP-1"],
    "outputs-to-client-0": ["ENG-OUT-3", "ENG-HS-6"],
    "cumulative-tokens": ["ENG-OUT-4"],
    "ignore-abort": ["ENG-ABORT-1", "ENG-ABORT-3"],
    "abort-unknown-errors": ["ENG-ABORT-2"],
    "abort-max-16-ids": ["ENG-ABORT-3"],
    "error-on-finished-abort": ["ENG-ABORT-4"],
    "ignore-abort-immediately": ["ENG-REJECT-1"],
    "abort-immediately-aborts-all": ["ENG-REJECT-2"],
    "bare-utility-result": ["ENG-UTIL-1"],
    "wrong-call-id": ["ENG-UTIL-2"],
    "unknown-method-nil": ["ENG-UTIL-3"],
    "inconsistent-is-sleeping": ["ENG-DP-3"],
    "is-sleeping-inverted": ["ENG-UTIL-4", "ENG-DP-3"],
    "reset-prefix-cache-fails": ["ENG-UTIL-5"],
    "sleep-abort-silent": ["ENG-UTIL-6"],
    "runs-while-asleep": ["ENG-UTIL-4"],
    "bad-supported-tasks": ["ENG-UTIL-7", "ENG-HS-7"],
    "same-identity": ["ENG-DP-1"],
    "crash-on-dp-wave": ["ENG-DP-2"],
    "no-coordinator-gate": ["ENG-DP-4"],
    "wave-complete-to-client": ["ENG-DP-5"],
    "crash-on-bad-frame": ["ENG-ROB-1", "ENG-ROB-2", "ENG-ROB-3", "ENG-ROB-4", "ENG-ROB-5",
                           "ENG-SEC-1", "ENG-SEC-2", "ENG-SEC-3"],
    "reject-bad-client-crash": ["ENG-ROB-6"],
    "deaf-on-bad-frame": ["ENG-ROB-1", "ENG-ROB-2", "ENG-SEC-3"],
    "no-recover-id": ["ENG-ROB-7"],
    "simulate-unpickle": ["ENG-SEC-1", "ENG-SEC-2"],
    "strict-arrays": ["ENG-REQ-10"],
    "python-forms-only": ["ENG-REQ-11", "ENG-REQ-13"],
    "strict-sampling-keys": ["ENG-REQ-12"],
}


def test_every_case_is_failed_by_some_knob():
    """Each case is killed by a knob of the scripted engine (PROOF; COMMAND_KNOBS for the cases that need
    it as a process), a fault of the reference engine (REFERENCE_KNOBS) or the reference engine speaking
    another release (RELEASE_MISMATCH), each run against its cases."""
    from test_engine_role import COMMAND_KNOBS, REFERENCE_KNOBS
    from test_every_release import RELEASE_MISMATCH

    caught = {cid for table in (PROOF, REFERENCE_KNOBS, COMMAND_KNOBS, RELEASE_MISMATCH)
              for ids in table.values() for cid in ids}
    missing = sorted(c.id for c in load_role("engine") if c.id not in caught)
    assert not missing, f"cases no misbehaving peer fails: {missing}"


def _render_matrix() -> str:
    from doc_blocks import table
    from test_engine_role import COMMAND_KNOBS, REFERENCE_KNOBS
    from test_every_release import RELEASE_MISMATCH

    def knobs(mapping: dict[str, list[str]], cid: str, form: str) -> list[str]:
        return [form.format(k) for k, ids in mapping.items() if cid in ids]

    rows = []
    for c in load_role("engine"):
        releases = knobs(RELEASE_MISMATCH, c.id, "`--vllm {}`")
        reference = knobs(REFERENCE_KNOBS, c.id, "`{}`")
        if releases:
            reference.append(" or ".join(releases) + " (judged as the default release)")
        scripted = knobs(PROOF, c.id, "`{}`") + knobs(COMMAND_KNOBS, c.id, "`{}` (as a process)")
        rows.append((f"{c.id} `{c.slug}`", c.clause, c.level,
                     ", ".join(reference) or "—", ", ".join(scripted) or "—"))
    return table(("case", "clause", "level", "caught by (reference `--bug`)",
                  "caught by (scripted raw-frame peer `--bug`)"), rows)


def test_docs_show_the_matrix():
    """docs/conformance.md's engine-role proof matrix is the one these mappings assert, row for row."""
    from doc_blocks import check_block

    check_block("conformance.md", "engine proof matrix", _render_matrix())


@pytest.mark.parametrize("knob", sorted(PROOF))
def test_knob_is_caught(knob, run_ecp, tmp_path):
    out = tmp_path / "r.json"
    args = ["conformance", "engine", "--adapter", f"scripted_engine:bug_{knob}", "--quiet-window", "0.2",
            "--startup-timeout", "1.5", "--case-timeout", "1.5", "--json", str(out)]
    for cid in PROOF[knob]:
        args += ["--case", cid]
    code, stdout = run_ecp(*args)
    results = {c["id"]: c for c in json.loads(out.read_text())["cases"]}
    assert sorted(results) == sorted(PROOF[knob]), stdout
    for cid in PROOF[knob]:
        assert results[cid]["outcome"] in ("FAIL", "TIMEOUT", "CRASH"), (cid, results[cid], stdout)
    levels = {results[c]["level"] for c in PROOF[knob]}
    assert code == (1 if "MUST" in levels or any(results[c]["outcome"] == "CRASH" for c in results) else 0), stdout
