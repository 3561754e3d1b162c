"""``ecp interop check``: a submission is refused with one line per problem, and a complete one is
accepted."""

from __future__ import annotations

import json

from ecp.conformance.interop import results as res
from ecp.conformance.registry import load_role

PRODUCT = {"name": "acme-engine", "version": "1.2", "role": "engine", "url": "https://example.invalid/acme",
           "contact": "acme@example.invalid"}


def _doc(cases, **over):
    doc = res.document(implementation={"name": "acme-engine", "version": "1.2", "commit": None}, role="engine",
                       release="0.33", level="hardened", strict=False, started="2026-01-01T00:00:00+00:00",
                       duration_s=1.0, target="acme", exit_code=0, counts={"PASS": len(cases)}, problems=[],
                       launches=None, release_fit=None, cases=cases, expected_failures=None)
    doc.update(over)
    return doc


def _every_case(transcript=None):
    return [{"id": c.id, "clause": c.clause, "level": c.level, "conformance_level": c.conformance_level,
             "slug": c.slug, "requirement": c.requirement, "outcome": "PASS", "blocking": True, "reason": "",
             "duration_s": 0.0, "expected_failure": None, "transcript": transcript if k == 0 else None}
            for k, c in enumerate(load_role("engine"))]


def _write(folder, name, doc):
    (folder / name).mkdir(parents=True)
    (folder / name / "result.json").write_text(json.dumps(doc))


def test_a_complete_submission_is_accepted(run_ecp, tmp_path):
    (tmp_path / "product.json").write_text(json.dumps(PRODUCT))
    _write(tmp_path, "engine-0.33", _doc(_every_case("transcripts/ENG-HS-1.txt")))
    (tmp_path / "engine-0.33" / "transcripts").mkdir()
    (tmp_path / "engine-0.33" / "transcripts" / "ENG-HS-1.txt").write_text("...")
    code, out = run_ecp("interop", "check", str(tmp_path))
    assert code == 0 and out.strip().endswith("accepted"), out


def test_a_malformed_submission_is_refused_one_line_per_problem(run_ecp, tmp_path):
    (tmp_path / "product.json").write_text(json.dumps({**PRODUCT, "contact": "", "role": "router"}))
    cases = _every_case("transcripts/ENG-HS-1.txt")
    _write(tmp_path, "old", _doc(cases[:3], ecp={"version": "0.0.1", "commit": None},
                                 implementation={"name": "other", "version": None, "commit": None}))
    _write(tmp_path, "bad", {"schema_version": 1, "role": "engine"})
    code, out = run_ecp("interop", "check", str(tmp_path))
    assert code == 1
    lines = out.strip().splitlines()
    problems = [ln.split(": ", 1)[1] for ln in lines[:-1]]
    total = len(load_role("engine"))
    expected = [
        "product.json: contact missing or empty (who answers questions about the results)",
        "product.json: role 'router' is not engine, frontend or engine,frontend",
        f"old/result.json: made with ecp 0.0.1, this is ecp {res.ecp_version()}: rerun with this ecp",
        "old/result.json: implementation.name 'other' is not product.json's name 'acme-engine'",
        "old/result.json: ENG-HS-1: transcript transcripts/ENG-HS-1.txt missing",
    ]
    for line in expected:
        assert line in problems, out
    assert any(p.startswith(f"old/result.json: ran 3 of the {total} engine-role cases") for p in problems), out
    schema = [p for p in problems if p.startswith("bad/result.json: schema: at $: ")]
    assert len(schema) == 17, out  # the 19 required fields but schema_version and role
    assert all("is a required property" in p for p in schema)
    assert lines[-1] == f"ecp interop check: {tmp_path} refused: {len(problems)} problem(s)"
    # no product file, no runs: two problems
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = run_ecp("interop", "check", str(empty))
    assert code == 1 and len(out.strip().splitlines()) == 3, out
    assert "product.json: missing" in out and "no result.json" in out
