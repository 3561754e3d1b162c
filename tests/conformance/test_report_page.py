"""The HTML report leads to the failure: failures first, each reason in full (wrapped, the fix in
view) with its transcript, the coverage matrix linking to the cases, and a bounded size. Checked
in a real headless browser: Playwright driving the system's Chromium (Debian package ``chromium``,
installed by .ci/run, which requires it with ECP_REQUIRE_BROWSER=1; no browser download)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ecp.conformance.outcomes import CaseResult, Outcome
from ecp.conformance.registry import load_role
from ecp.conformance.report import RunSummary, render_html

CHROMIUM = Path("/usr/bin/chromium")
FAST = ["--quiet-window", "0.2", "--startup-timeout", "5"]


def test_a_run_where_every_case_fails_stays_under_2_mb_and_says_what_it_cut():
    huge = "\n".join(f"{k:>6}.000s input[0] frame 1: " + "ab" * 150 for k in range(2_000))  # ~620 kB
    results = [CaseResult(id=c.id, clause=c.clause, level=c.level, slug=c.slug, requirement=c.requirement,
                          role="engine", outcome=Outcome.FAIL, message="m<script>alert(1)</script>\n" + "x" * 50_000,
                          transcript_text=huge, transcript=[{"t": 0}], peer_stderr_tail="log\n" * 5_000)
               for c in load_role("engine")]
    page = render_html(RunSummary(role="engine", target="my-engine", results=results))
    assert len(page.encode()) < 2_000_000, len(page.encode())
    assert page.count("characters of the transcript were cut here") == len(results)
    assert page.count("characters of the message were cut here") == len(results)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # escaped
    first, last = huge.splitlines()[0], huge.splitlines()[-1]
    assert first in page and last in page  # the head and the tail of a cut transcript are shown


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright  # the dev extra's: never skipped

    assert CHROMIUM.exists(), "the browser test needs Debian's chromium (apt-get install -y chromium; .ci/run does)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.mark.browser
def test_the_first_failure_reason_and_transcript_are_in_view_and_coverage_links_to_it(run_ecp, tmp_path, browser):
    html, out = tmp_path / "r.html", tmp_path / "r.json"
    # an engine that returns no logprobs without declaring it: ENG-OUT-9 fails, and its reason ends
    # with the fix (run with --engine-lacks logprobs); the cases around it pass
    code, stdout = run_ecp("conformance", "engine", "--adapter", "reference_adapters:bug_no-logprobs",
                           "--case", "ENG-OUT-*", "--case", "ENG-UTIL-*", "--html", str(html), "--json", str(out),
                           *FAST)
    assert code == 1, stdout
    cases = json.loads(out.read_text())["cases"]
    failed = [c for c in cases if c["outcome"] == "FAIL" and c["blocking"]]
    assert [c["id"] for c in failed] == ["ENG-OUT-9"], stdout
    assert len(cases) > 10 and "--engine-lacks logprobs" in failed[0]["message"]

    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(html.as_uri())
    height = page.viewport_size["height"]
    first = page.locator("#failures + section.failure").first
    assert first.get_attribute("id") == "fail-ENG-OUT-9"
    reason, transcript = first.locator("pre.reason"), first.locator("details.transcript pre")
    # without scrolling: the reason's whole text and the start of the transcript are on the first screen
    assert page.evaluate("window.scrollY") == 0
    box = reason.bounding_box()
    assert box is not None and box["y"] + box["height"] <= height, box
    assert "--engine-lacks logprobs" in reason.inner_text()
    # wrapped, not cut off at the right edge
    assert reason.evaluate("e => e.scrollWidth <= e.clientWidth"), "the reason overflows its box"
    assert transcript.is_visible() and transcript.bounding_box()["y"] < height
    assert "case ENG-OUT-9 starts" in transcript.inner_text()
    # the failures come before the table of every case
    table_y = page.locator("#cases").bounding_box()["y"]
    assert box["y"] < table_y

    # the coverage matrix links each case: the failed one to its failure, a passed one to its row
    matrix = page.locator("#coverage ~ table")
    matrix.get_by_role("link", name="ENG-OUT-9", exact=True).first.click()
    assert page.evaluate("location.hash") == "#fail-ENG-OUT-9"
    assert -1 < first.bounding_box()["y"] < height and page.evaluate("window.scrollY") > 0  # scrolled to it
    passed = next(c["id"] for c in cases if c["outcome"] == "PASS")
    matrix.get_by_role("link", name=passed, exact=True).first.click()
    assert page.evaluate("location.hash") == f"#case-{passed}"
    row = page.locator(f"tr#case-{passed}").bounding_box()
    assert -1 < row["y"] < height
