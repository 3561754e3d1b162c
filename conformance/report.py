"""Reports of a conformance run: console, JSON (with a published schema), JUnit XML,
Markdown, HTML and per-case transcript files."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from ecp.spec.clauses import CONFORMANCE_LEVELS

from .coverage import ClauseRow, clause_rows, summary, summary_line
from .html import environment
from .outcomes import CaseResult, Outcome
from .pace import describe_launches
from .release import release_line, release_report

SCHEMA_PATH = Path(__file__).parent / "schema" / "results.schema.json"
SCHEMA_ID = "https://ecp.invalid/conformance/results.schema.json"


@dataclass
class RunSummary:
    role: str
    target: str
    results: list[CaseResult]
    strict: bool = False
    #: the conformance level the run required (``--level``)
    conformance_level: str = "hardened"
    problems: list[str] = field(default_factory=list)
    started: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    duration_s: float = 0.0
    #: the peer's launches with their start-up times and the budgets they set
    #: (:meth:`ecp.conformance.pace.Pace.summary`); None when the run recorded none
    launches: dict[str, Any] | None = None
    #: the peer's release fingerprint (:meth:`ecp.conformance.release.ReleaseWatch.to_dict`)
    release: dict[str, Any] | None = None
    #: selected cases the run did not reach, and why it stopped before them ("" when it did not)
    not_run: int = 0
    stopped: str = ""

    @property
    def release_line(self) -> str | None:
        """The report's first line when the peer speaks another release than the one under test."""
        return release_line(self.release, self.role)

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(r.outcome.value for r in self.results)
        return {o.value: c.get(o.value, 0) for o in Outcome}

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.counts_as_failure]

    @property
    def errors(self) -> list[CaseResult]:
        return [r for r in self.results if r.outcome is Outcome.ERROR]

    @property
    def coverage(self) -> list[ClauseRow]:
        """The coverage matrix of this run's role, with each case's outcome in this run."""
        from .registry import ROLE_CATALOGS, load_role

        every = [c for role in ROLE_CATALOGS for c in load_role(role)]
        return clause_rows(every, {r.id: r.outcome.value for r in self.results}, roles=(self.role,))

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.failures or self.problems else 0

    def to_json(self) -> dict[str, Any]:
        rows = self.coverage
        return {
            "$schema": SCHEMA_ID,
            "schema_version": 1,
            "role": self.role,
            "target": self.target,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "strict": self.strict,
            "conformance_level": self.conformance_level,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "problems": self.problems,
            **({"not_run": {"count": self.not_run, "why": self.stopped}} if self.not_run else {}),
            "launches": self.launches or {"count": 0, "total_startup_s": 0.0, "launches": [], "response_s": None,
                                          "case_budget_s": None, "startup_budget_s": None},
            "cases": [r.to_dict() for r in self.results],
            "coverage": {"summary": summary(rows), "clauses": [row.to_dict() for row in rows]},
            "release": release_report(self.release, self.role),
        }


def _status(r: CaseResult, s: "RunSummary") -> str:
    if r.outcome.is_failure and not r.blocking:
        if CONFORMANCE_LEVELS.index(r.conformance_level) > CONFORMANCE_LEVELS.index(s.conformance_level):
            return f"{r.outcome.value} (not required at level {s.conformance_level})"
        return f"{r.outcome.value} (non-strict {r.level})"
    return r.outcome.value


def _levels(r: CaseResult) -> str:
    """``MUST`` for interop-level results, ``MUST hardened`` for the others: one tag, every format."""
    return r.level if r.conformance_level == "interop" else f"{r.level} {r.conformance_level}"


def write_console(s: RunSummary, out: TextIO) -> None:
    if s.release_line:  # first: it explains the failures below
        out.write(f"{s.release_line}\n\n")
    for r in s.results:
        out.write(f"  {r.id:<13} {r.slug:<38} {_levels(r):<16} {_status(r, s)}\n")
    out.write("\n")
    for r in s.results:
        if r.outcome is Outcome.PASS:
            for f in r.findings:  # only SHOULD/MAY findings leave a case passing
                out.write(f"FINDING {r.id} [{f['clause']} {f['level']}] {f['message']}\n")
            continue
        if r.outcome in (Outcome.UNSUPPORTED, Outcome.XFAIL):  # one line: why it did not count
            why = r.expected_failure_reason if r.outcome is Outcome.XFAIL else r.message
            out.write(f"{_status(r, s)} {r.id}: {why}\n")
            continue
        out.write(f"{_status(r, s)} {r.id} [{r.clause} {_levels(r)}] {r.requirement}\n")
        for line in (r.message or "").splitlines()[:12]:
            out.write(f"    {line}\n")
        extra = [f for f in r.findings if f"[{f['clause']}] {f['message']}" not in (r.message or "")]
        for f in extra[:5]:
            out.write(f"    also [{f['clause']} {f['level']}] on {f['socket']}: {f['message']}\n")
        if len(extra) > 5:
            out.write(f"    also {len(extra) - 5} more finding(s) (see the JSON report)\n")
    for p in s.problems:
        out.write(f"PROBLEM {p}\n")
    if s.not_run:
        out.write(f"NOT RUN {s.not_run} case(s): {s.stopped or 'the run stopped before them'}\n")
    out.write(f"\n{summary_line(s.coverage)} ({s.role} role; the matrix: --markdown, --html, --json or "
              f"ecp conformance list --matrix)\n")
    out.write(describe_launches(s.launches) + "\n")
    for line in launch_lines(s):
        out.write(f"  {line}\n")
    out.write(f"{s.role} role against {s.target}: {tally(s) or 'no cases'} "
              f"in {s.duration_s:.1f}s at level {s.conformance_level} -> exit {s.exit_code}\n")


def launch_lines(s: RunSummary) -> list[str]:
    """One line per launch: its number, what it started, for which case, its start-up time."""
    out = []
    for r in (s.launches or {}).get("launches", []):
        took = f"{r['startup_s']:.1f}s" if r["startup_s"] is not None else "-"
        why = "" if r["state"] == "serving" else f" ({r['state']})"
        case = f" ({'started ahead, ' if r['ahead'] else ''}{r['case']})" if r["case"] else ""
        out.append(f"launch {r['number']}: {r['what']}{case}: {took}{why}")
    return out


def tally(s: RunSummary) -> str:
    """The outcomes of a run in one phrase; a failure that does not count (a clause above the run's
    level, or a SHOULD/MAY outside strict mode) is tallied apart, as its status line says it."""
    parts = []
    for outcome, n in s.counts.items():
        if not n:
            continue
        if not Outcome(outcome).is_failure:
            parts.append(f"{n} {outcome}")
            continue
        apart = Counter(_status(r, s) for r in s.results if r.outcome.value == outcome and not r.counts_as_failure)
        if n - sum(apart.values()):
            parts.append(f"{n - sum(apart.values())} {outcome}")
        parts += [f"{k} {status}" for status, k in sorted(apart.items())]
    if s.not_run:
        parts.append(f"{s.not_run} NOT RUN")
    return ", ".join(parts)


def write_json(s: RunSummary, path: Path) -> None:
    path.write_text(json.dumps(s.to_json(), indent=1) + "\n")


def write_junit(s: RunSummary, path: Path) -> None:
    suite = ET.Element("testsuite", name=f"ecp-conformance-{s.role}", tests=str(len(s.results)),
                       failures=str(sum(1 for r in s.results if r.counts_as_failure)),
                       errors=str(len(s.errors)),
                       skipped=str(sum(1 for r in s.results if r.outcome in (Outcome.UNSUPPORTED, Outcome.XFAIL))),
                       time=f"{s.duration_s:.3f}", timestamp=s.started)
    suite_props = ET.SubElement(suite, "properties")
    ET.SubElement(suite_props, "property", name="launches", value=describe_launches(s.launches))
    for line in launch_lines(s):
        ET.SubElement(suite_props, "property", name="launch", value=line)
    if s.release_line:  # CI shows suite properties beside the results
        ET.SubElement(suite_props, "property", name="release", value=s.release_line)
    for r in s.results:
        tc = ET.SubElement(suite, "testcase", classname=f"{s.role}.{r.id.split('-')[1]}",
                           name=f"{r.id} {r.slug}", time=f"{r.duration_s:.3f}")
        props = ET.SubElement(tc, "properties")
        for k, v in (("case", r.id), ("clause", r.clause), ("level", r.level),
                     ("conformance_level", r.conformance_level), ("outcome", r.outcome.value)):
            ET.SubElement(props, "property", name=k, value=v)
        text = f"[{r.clause} {_levels(r)}] {r.requirement}\n{r.message}"
        if r.outcome is Outcome.ERROR:
            ET.SubElement(tc, "error", message=r.message.splitlines()[0] if r.message else "").text = text
        elif r.counts_as_failure:
            ET.SubElement(tc, "failure", message=f"{r.outcome.value}: {r.message.splitlines()[0] if r.message else ''}",
                          type=r.outcome.value).text = text
        elif r.outcome in (Outcome.UNSUPPORTED, Outcome.XFAIL) or r.outcome.is_failure:
            ET.SubElement(tc, "skipped", message=f"{_status(r, s)}: {r.expected_failure_reason or r.message}")
        if r.transcript_text:
            ET.SubElement(tc, "system-out").text = r.transcript_text
        if r.peer_stderr_tail:
            ET.SubElement(tc, "system-err").text = r.peer_stderr_tail
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def markdown(s: RunSummary, empty: str = "no case ran", exit_code: int | None = None) -> str:
    """The Markdown report; ``empty`` says what a run without results means (the monitor: no clause
    was violated), ``exit_code`` overrides the summary's own (a caller that adds its own errors)."""
    tallied = tally(s) or empty
    lines = [f"# ecp conformance: {s.role} role", "",
             *([f"**{s.release_line}**", ""] if s.release_line else []),
             f"- target: `{s.target}`",
             f"- started: {s.started}, {s.duration_s:.1f}s, strict: {s.strict}, level: {s.conformance_level}",
             f"- result: **exit {s.exit_code if exit_code is None else exit_code}** ({tallied})",
             *([f"- not run: {s.not_run} case(s): {s.stopped}"] if s.not_run else []),
             f"- {describe_launches(s.launches)}", ""]
    if s.problems:
        lines += ["## Problems", ""] + [f"- {p}" for p in s.problems] + [""]
    if s.launches and s.launches.get("launches"):
        lines += ["<details><summary>launches</summary>", ""] + [f"- {line}" for line in launch_lines(s)] + [
            "", "</details>", ""]
    if s.results:
        lines += ["| case | clause | level | conformance level | outcome | requirement |", "|---|---|---|---|---|---|"]
    else:
        lines += [f"{empty[0].upper()}{empty[1:]}."]
    for r in s.results:
        lines.append(f"| {r.id} `{r.slug}` | {r.clause} | {r.level} | {r.conformance_level} | {_status(r, s)} "
                     f"| {r.requirement} |")
    lines += ["", "## Coverage", "", summary_line(s.coverage) + ".", "",
              "| clause | level | title | cases (outcome) | coverage |", "|---|---|---|---|---|"]
    for row in s.coverage:
        cases = ", ".join(f"{c} ({row.outcomes[c]})" if c in row.outcomes else c
                          for c in row.cases.get(s.role, [])) or "-"
        lines.append(f"| {row.clause} | {row.level} | {row.title} | {cases} | {_coverage_cell(row, s.role)} |")
    failed = [r for r in s.results
              if r.transcript_text or r.findings or (r.message and r.outcome is not Outcome.PASS)]
    if failed:
        lines += ["", "## Details", ""]
    for r in failed:
        lines += [f"### {r.id} {r.slug}: {_status(r, s)}", "", f"{r.clause} ({_levels(r)}): {r.requirement}", ""]
        if r.expected_failure_reason:
            lines += [f"Expected failure: {r.expected_failure_reason}", ""]
        if r.message:
            lines += ["```", r.message, "```", ""]
        if r.findings:
            lines += ["Findings (rules broken outside the case's focus):", ""] + [
                f"- {f['clause']} ({f['level']}) on `{f['socket']}`: {f['message']}" for f in r.findings] + [""]
        if r.transcript_text:
            lines += ["<details><summary>transcript</summary>", "", "```", r.transcript_text, "```", "",
                      "</details>", ""]
        if r.peer_stderr_tail:
            lines += ["<details><summary>engine log (tail)</summary>", "", "```", r.peer_stderr_tail[-4000:],
                      "```", "", "</details>", ""]
    return "\n".join(lines) + "\n"


def _coverage_cell(row: ClauseRow, role: str) -> str:
    if row.cases.get(role):
        return row.verdict or "not run"
    if row.reason is not None and role in row.reason.roles:
        return f"reason: {row.reason.why} Checked by: {row.reason.checked_by}"
    return "MISSING: no case and no stated reason"


#: outcome -> background colour, in every HTML table
#: the HTML report's size bound: what all transcripts together may take, and one case at most
#: (a run where every case fails stays well under 2 MB; the JSON report and --transcripts keep all)
HTML_TRANSCRIPTS_CHARS = 1_000_000
HTML_TRANSCRIPT_CHARS = 16_000
HTML_MESSAGE_CHARS = 8_000
HTML_LOG_CHARS = 4_000


def _cut(text: str, limit: int, what: str) -> tuple[str, str]:
    """``text`` cut to about ``limit`` characters (its head and its tail, the middle left out), and the
    note that says so ('' when nothing was cut)."""
    if len(text) <= limit:
        return text, ""
    head, tail = text[: limit * 2 // 3], text[-(limit // 3):]
    left = len(text) - len(head) - len(tail)
    return (f"{head}\n…\n{tail}",
            f"{left:,} characters of the {what} were cut here (its head and tail are shown); the whole "
            "of it: --json or --transcripts DIR")


def _html_failed(r: CaseResult) -> bool:
    """A case the report lists among the failures: it counts, or its outcome is an error or a stale entry."""
    return r.counts_as_failure or r.outcome in (Outcome.ERROR, Outcome.XPASS)


def html_view(s: RunSummary) -> dict[str, Any]:
    """What the HTML template shows, every long text already cut to the report's bounds."""
    failed = [r for r in s.results if _html_failed(r)]
    per_case = max(2_000, min(HTML_TRANSCRIPT_CHARS, HTML_TRANSCRIPTS_CHARS // max(1, len(failed))))
    failures = []
    for r in failed:
        message, message_cut = _cut(r.message or "", HTML_MESSAGE_CHARS, "message")
        transcript, transcript_cut = _cut(r.transcript_text or "", per_case, "transcript")
        failures.append({
            "id": r.id, "slug": r.slug, "clause": r.clause, "levels": _levels(r), "requirement": r.requirement,
            "outcome": r.outcome.value, "status": _status(r, s), "expected": r.expected_failure_reason,
            "message": message, "message_cut": message_cut, "transcript": transcript,
            "transcript_cut": transcript_cut, "log": (r.peer_stderr_tail or "")[-HTML_LOG_CHARS:],
            "findings": [f for f in r.findings if f"[{f['clause']}] {f['message']}" not in (r.message or "")][:5],
        })
    failed_ids = {r.id for r in failed}
    cases = []
    for r in s.results:
        note = ""
        if r.id not in failed_ids and r.outcome is not Outcome.PASS:
            note = (r.expected_failure_reason if r.outcome is Outcome.XFAIL else r.message.splitlines()[0]
                    if r.message else "")
        cases.append({"id": r.id, "slug": r.slug, "clause": r.clause, "level": r.level,
                      "conformance_level": r.conformance_level, "outcome": r.outcome.value, "status": _status(r, s),
                      "requirement": r.requirement, "failed": r.id in failed_ids, "note": note[:500]})
    ran = {r.id for r in s.results}
    coverage = []
    for row in s.coverage:
        links = [{"id": c, "outcome": row.outcomes.get(c, "none"),
                  "anchor": f"fail-{c}" if c in failed_ids else f"case-{c}" if c in ran else f"clause-{row.clause}"}
                 for c in row.cases.get(s.role, [])]
        coverage.append({"clause": row.clause, "level": row.level, "title": row.title, "cases": links,
                         "cell": _coverage_cell(row, s.role),
                         "status": row.verdict if row.cases.get(s.role) and row.verdict else row.status})
    return {"role": s.role, "target": s.target, "exit_code": s.exit_code, "tally": tally(s) or "no case ran",
            "level": s.conformance_level, "strict": s.strict, "duration_s": s.duration_s,
            "release_line": s.release_line, "problems": s.problems, "not_run": s.not_run, "stopped": s.stopped,
            "failures": failures, "cases": cases, "coverage": coverage, "coverage_line": summary_line(s.coverage),
            "launches_line": describe_launches(s.launches), "launch_lines": launch_lines(s)}


def render_html(s: RunSummary) -> str:
    """The HTML report (``templates/report.html.j2``): the failures first, each with its reason in full
    and its transcript, then every case, then the coverage matrix whose case ids link to the cases."""
    return environment().get_template("report.html.j2").render(html_view(s))


def write_html(s: RunSummary, path: Path) -> None:
    path.write_text(render_html(s), encoding="utf-8")


def write_transcripts(s: RunSummary, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for r in s.results:
        if not r.transcript_text:
            continue
        p = directory / f"{r.id}.txt"
        p.write_text(f"{r.id} {r.slug}: {_status(r, s)}\n[{r.clause} {_levels(r)}] {r.requirement}\n{r.message}\n\n"
                     f"{r.transcript_text}\n\n--- engine log (tail) ---\n{r.peer_stderr_tail}\n")
        written.append(p)
    return written
