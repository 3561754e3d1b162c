"""``ecp interop site``: the static site opened in a real headless browser (the system's Chromium
through Playwright), from the file system: a failing cell leads to the case's reason and
transcript; the history page shows exactly the cells that changed between two results sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ecp.conformance.interop import results as res
from ecp.conformance.interop.site import diff_sets, load_sets

CHROMIUM = "/usr/bin/chromium"  # Debian's package `chromium` (.ci/run installs it)
FAST = ["--quiet-window", "0.1", "--startup-timeout", "30"]


def _case(cid: str, outcome: str, reason: str = "", transcript: str | None = None) -> dict:
    return {"id": cid, "clause": "ECP-HS-4", "level": "MUST", "conformance_level": "interop", "slug": "a-case",
            "requirement": "what it checks", "outcome": outcome, "blocking": True, "reason": reason,
            "duration_s": 0.1, "expected_failure": None, "transcript": transcript}


def _run(set_dir: Path, name: str, role: str, release: str, cases: list[dict], served: bool = True) -> None:
    """A results document written by hand: the fixture of the diff (runs that differ in known cells)."""
    counts = {}
    for c in cases:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    doc = res.document(implementation={"name": name, "version": None, "commit": None}, role=role, release=release,
                       level="hardened", strict=False, started="2026-01-01T00:00:00+00:00", duration_s=1.0,
                       target=name, exit_code=1 if any(c["outcome"] == "FAIL" for c in cases) or not served else 0,
                       counts=counts, problems=[], launches=None, release_fit=None, cases=cases,
                       expected_failures=None,
                       served_={"ok": served, "cause": None if served else "exited with status 1"})
    d = set_dir / f"{role}--{name}--{release}"
    d.mkdir(parents=True)
    (d / res.RESULT_FILE).write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Two results sets: the older written by hand; the newer holds one real run (the reference
    engine speaking 0.32, judged as 0.33: ENG-OUT-6 fails) and the hand-written runs, changed in
    known cells."""
    from ecp.spec.cli import main

    root = tmp_path_factory.mktemp("results")
    old, new = root / "2026-01-01", root / "2026-01-02"
    _run(old, "alpha", "engine", "0.33", [_case("ENG-HS-3", "PASS")])                   # unchanged
    _run(old, "beta", "engine", "0.32", [_case("ENG-HS-3", "FAIL", "bad keys")])        # fixed later
    _run(old, "gamma", "frontend", "0.33", [_case("FE-HS-1", "PASS")])                  # gone later
    _run(new, "alpha", "engine", "0.33", [_case("ENG-HS-3", "PASS")])
    _run(new, "beta", "engine", "0.32", [_case("ENG-HS-3", "PASS")])
    _run(new, "delta", "frontend", "0.31", [], served=False)                           # added, never served
    assert main(["conformance", "engine", "--adapter", "reference_adapters:release_0_32", "--case", "ENG-HS-3",
                 "--case", "ENG-OUT-6", *FAST, "--results", str(new / "engine--real--0.33"),
                 "--implementation", "real"]) == 1
    out = tmp_path_factory.mktemp("site")
    assert main(["interop", "site", str(root), "-o", str(out)]) == 0
    return root, out


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "the browser test needs the system's Chromium (apt-get install -y chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        pg = browser.new_page()
        pg.set_default_timeout(10_000)
        yield pg
        browser.close()


def test_a_failing_cell_leads_to_the_reason_and_the_transcript(site, page):
    _, out = site
    page.goto((out / "index.html").as_uri())
    cell = page.locator("table[data-role=engine] td.cell.fail[data-implementation=real][data-release='0.33']")
    assert "ENG-OUT-6" in cell.inner_text() and "1 FAIL" in cell.inner_text()
    cell.locator("a").click()
    row = page.locator("tr#ENG-OUT-6")
    assert row.get_attribute("data-outcome") == "FAIL"
    assert "has 18 elements, expected all 19" in row.locator("pre.reason").inner_text()
    row.locator("details.transcript summary").click()
    transcript = row.locator("details.transcript pre").inner_text()
    assert "ENG-OUT-6 full-length-arrays: FAIL" in transcript and "decoded: EngineCoreRequest(" in transcript
    row.locator("details.transcript a").click()  # the transcript file itself, beside the page
    assert "ENG-OUT-6 full-length-arrays: FAIL" in page.locator("body").inner_text()
    # the never-served run says so in its cell
    page.goto((out / "index.html").as_uri())
    assert "never served: exited with status 1" in page.locator("td.cell.not-served").inner_text()


def test_history_shows_exactly_the_cells_that_changed(site, page):
    root, out = site
    old, new = load_sets(root)
    changed = [(d["implementation"], d["release"], d["change"]) for d in diff_sets(old, new)]
    expected = [("delta", "0.31", "added"), ("gamma", "0.33", "gone"), ("beta", "0.32", "changed"),
                ("real", "0.33", "added")]
    assert sorted(changed) == sorted(expected)
    page.goto((out / "history.html").as_uri())
    page.select_option("#diff-a", "2026-01-01")
    page.select_option("#diff-b", "2026-01-02")
    rows = page.locator("#diff-table tbody tr")
    shown = [tuple(rows.nth(k).locator("td").nth(j).inner_text() for j in (1, 2, 3)) for k in range(rows.count())]
    assert sorted(shown) == sorted(expected)
    beta = next(k for k in range(rows.count()) if rows.nth(k).locator("td").nth(1).inner_text() == "beta")
    assert "failed: ENG-HS-3" in rows.nth(beta).locator("td").nth(4).inner_text()
    assert rows.nth(beta).locator("td").nth(5).inner_text() == "1 PASS"
    page.select_option("#diff-a", "2026-01-02")  # the reverse direction: the same cells
    page.select_option("#diff-b", "2026-01-01")
    assert page.locator("#diff-table tbody tr").count() == 4
    assert "4 cell(s) changed from 2026-01-02 to 2026-01-01" in page.locator("#diff-summary").inner_text()


def test_cross_release_shows_a_pair_that_never_served_with_the_monitors_reason(tmp_path):
    from ecp.conformance.interop.site import cross_release

    observed = tmp_path / "observed.json"
    observed.write_text(json.dumps({"releases": ["0.32", "0.33"], "features": {}, "pairs": [
        {"frontend": "0.33", "engine": "0.32", "started": False, "features": {},
         "problem": "frontend exited with status 1",
         "monitor": {"exit_code": 1, "messages": {}, "release": [
             {"code": "DIFF-011", "shows_in": "ready payload", "count": 1,
              "first": "DIFF-011 EngineCoreReadyResponse.x: ready payload from the vLLM 0.32 engine does not decode"}]}},
    ]}))
    cross = cross_release(observed)
    cells = {(c["frontend"], c["engine"]): c for row in cross["grid"] for c in row}
    never = cells[("0.33", "0.32")]
    assert never["status"] == "not-served" and never["cause"].startswith("DIFF-011 EngineCoreReadyResponse.x")
    assert never["predicted"]  # the model's prediction beside it
    assert cells[("0.32", "0.33")]["observed"] == "not run"


def test_the_site_and_the_runs_own_report_read_a_case_alike(site):
    """One set of templates: a run's page on the site and the run's own --html report colour outcomes
    alike and show a case's reason in the same markup."""
    from ecp.conformance.html import COLOURS
    from ecp.conformance.outcomes import CaseResult, Outcome
    from ecp.conformance.report import RunSummary, render_html

    _, out = site
    style = (out / "style.css").read_text()
    report = render_html(RunSummary(role="engine", target="beta", results=[CaseResult(
        id="ENG-HS-3", clause="ECP-HS-4", level="MUST", slug="a-case", requirement="what it checks", role="engine",
        outcome=Outcome.FAIL, message="bad keys")]))
    for outcome, colour in COLOURS.items():
        rule = f".o.{outcome} {{ background: {colour}; }}"
        assert rule in style and rule in report, rule
    run_page = next(out.glob("runs/2026-01-01/engine--beta--0.32*/index.html")).read_text()
    assert '<pre class="reason">bad keys</pre>' in run_page and '<pre class="reason">bad keys</pre>' in report
