"""The clause catalogue, PROTOCOL.md and every clause id cited in the code agree."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ecp.spec import clauses, errors
from ecp.spec.tables import PROTOCOL_MD, refresh_protocol

REPO = Path(__file__).resolve().parents[2]
ID_RE = re.compile(r"ECP-[A-Z]+-\d+")
ANCHOR_RE = re.compile(r"\*\*(ECP-[A-Z]+-\d+)\*\* \((MUST|SHOULD|MAY)(?:, (hardened))?(?:, vLLM ([0-9.–]+))?\)")
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "node_modules", "__pycache__", ".hypothesis"}

TEXT = PROTOCOL_MD.read_text(encoding="utf-8")


def test_protocol_anchors_are_the_catalogue_exactly_once():
    anchors = ANCHOR_RE.findall(TEXT)
    counts = Counter(cid for cid, *_ in anchors)
    assert [cid for cid, n in counts.items() if n > 1] == []
    assert set(counts) == set(clauses.CLAUSES)


def test_protocol_levels_match_the_catalogue():
    for cid, level, hardened, _ in ANCHOR_RE.findall(TEXT):
        assert clauses.CLAUSES[cid].level == level, cid
        assert clauses.CLAUSES[cid].conformance_level == (hardened or "interop"), cid


def test_release_spans_beside_the_keyword_are_computed_from_the_layouts():
    """A release-bound clause shows the releases its features are in, unless that is every shipped
    release (a release ecp does not ship may still lack them: ``ECP-REJECT-*`` before vLLM 0.21); no
    other clause shows one."""
    shown = {cid: rendered for cid, _, _, rendered in ANCHOR_RE.findall(TEXT) if rendered}
    spans = {cid: clauses.CLAUSES[cid].release_span() for cid in clauses.RELEASE_BOUND}
    assert shown == {cid: span for cid, span in spans.items() if span != "all"}
    assert "none" not in spans.values()
    assert clauses.CLAUSES["ECP-OUT-5"].release_span() == "0.33"
    assert clauses.CLAUSES["ECP-REQ-1"].release_span() == "all"


def test_every_hardened_clause_states_what_vllm_does():
    """A clause that strengthens vLLM 0.33 says, in its paragraph, what vLLM 0.33 actually does."""
    for cid in clauses.HARDENED:
        start = TEXT.index(f"**{cid}** (")
        paragraph = TEXT[start:TEXT.index("\n\n", start)]
        assert "\nvLLM 0.33: " in paragraph, cid


def test_conformance_levels_nest():
    rob = clauses.get("ECP-ROB-1")
    assert rob.conformance_level == "hardened" and clauses.get("ECP-HS-1").conformance_level == "interop"
    assert clauses.required_at("ECP-HS-1", "interop") and clauses.required_at("ECP-HS-1", "hardened")
    assert not clauses.required_at("ECP-ROB-1", "interop") and clauses.required_at("ECP-ROB-1", "hardened")


def test_every_id_mentioned_in_protocol_exists():
    assert set(ID_RE.findall(TEXT)) <= set(clauses.CLAUSES)


def test_clause_ids_are_well_formed_and_areas_known():
    for cid, c in clauses.CLAUSES.items():
        assert ID_RE.fullmatch(cid) and c.area in clauses.AREAS and c.text and c.title
    numbers: dict[str, list[int]] = {}
    for cid in clauses.CLAUSES:
        numbers.setdefault(cid.split("-")[1], []).append(int(cid.split("-")[2]))
    for area, ns in numbers.items():  # numbered 1..n without gaps
        assert sorted(ns) == list(range(1, len(ns) + 1)), area


def _python_sources():
    for path in REPO.rglob("*.py"):
        if not SKIP_DIRS.intersection(path.relative_to(REPO).parts):
            yield path


def test_every_clause_id_cited_in_python_sources_exists():
    unknown = {}
    scanned = 0
    for path in _python_sources():
        scanned += 1
        for cid in set(ID_RE.findall(path.read_text(encoding="utf-8", errors="replace"))):
            if cid not in clauses.CLAUSES:
                unknown.setdefault(cid, []).append(str(path.relative_to(REPO)))
    assert scanned > 10
    assert unknown == {}


def test_the_scan_would_catch_an_unknown_id():
    bogus = "ECP-" + "NOPE-" + "1"
    assert ID_RE.findall(f'raise X(clause="{bogus}")') == [bogus]
    assert bogus not in clauses.CLAUSES


def test_errors_name_known_clauses():
    exc = errors.UnsafeExtType("x", code=1)
    assert exc.clause in clauses.CLAUSES and exc.to_dict()["clause"] == "ECP-SEC-1"
    assert clauses.get("ECP-SEC-1").level == "MUST"
    assert all(c.level == "MUST" for c in clauses.must_clauses())


def test_protocol_field_tables_are_generated_from_the_code():
    assert refresh_protocol(TEXT) == TEXT, "run `ecp schema` to refresh the PROTOCOL.md field tables"
    assert "| 19 | `abort_immediately` | bool | false |" in TEXT
    assert TEXT.count("<!-- fields:") == TEXT.count("<!-- /fields -->") >= 20


def test_protocol_md_and_ecp_summary_say_the_same_wire_shape():
    """`Hello` is a map of 3 keys (the tag and 2 fields): the text and the summary say it alike."""
    import subprocess
    import sys
    from pathlib import Path

    from ecp.spec.handshake import Hello
    from ecp.spec.tables import wire_shape

    text = (Path(__file__).resolve().parents[2] / "spec" / "PROTOCOL.md").read_text()
    shape = wire_shape(Hello)
    assert shape.startswith("3 keys, 3 required")
    assert f"`Hello`: msgpack **map** of {shape}." in text
    summary = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "summary"], capture_output=True, text=True,
                             timeout=60).stdout
    assert f"Hello                      map   {shape}" in summary
