"""The report at exit, in the conformance report formats.

A monitor report is a conformance :class:`~ecp.conformance.report.RunSummary`
with role ``monitor``: one FAIL entry per clause that traffic violated (id
``MON-<area>-<n>`` after clause ``ECP-<area>-<n>``; blocking for MUST
clauses, and for every clause with ``--strict``), its message listing the
first occurrences and its transcript the frames around the first one. The
JSON adds ``validator``, ``traffic`` (message counts by direction and kind)
and ``violations`` (every kept violation); :func:`report_schema` is the
conformance results schema widened accordingly. Exit code: 0 no blocking
violation, 1 blocking violations, 2 the monitor itself failed.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

from ecp.conformance.outcomes import CaseResult, Outcome
from ecp.conformance.report import SCHEMA_PATH, RunSummary, markdown, write_junit
from ecp.conformance.transcript import render
from ecp.spec import CLAUSES

from .metrics import Snapshot
from .session import Session
from .transcripts import LocatedFinding

ROLE = "monitor"
#: occurrences listed in a clause's message
LISTED = 5


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "violation"


def _where(v: LocatedFinding) -> str:
    if v.msg is None:
        return "at the end of the traffic"
    rid = f", request {v.request_id}" if v.request_id else ""
    return f"message #{v.msg.seq} {v.msg.direction} on {v.msg.channel}{rid}"


def clause_results(session: Session, strict: bool) -> list[CaseResult]:
    kept: dict[str, list[LocatedFinding]] = defaultdict(list)
    for v in session.violations:
        kept[v.finding.clause].append(v)
    results = []
    counts = session.metrics.snapshot(0).violations
    for clause_id, n in sorted(counts.items()):
        clause = CLAUSES.get(clause_id)
        level = clause.level if clause else "MUST"
        title = clause.title if clause else clause_id
        vs = kept.get(clause_id, [])
        lines = [f"{n} violation(s)"]
        lines += [f"{_where(v)}: {v.finding.message}" for v in vs[:LISTED]]
        if n > LISTED:
            lines.append(f"… {n - LISTED} more (see the event log and transcripts)")
        first = vs[0] if vs else None
        entries = first.entries() if first else []
        results.append(CaseResult(
            id="MON-" + clause_id.split("-", 1)[1], clause=clause_id, level=level, slug=_slug(title),
            requirement=title, role=ROLE, outcome=Outcome.FAIL, message="\n".join(lines),
            blocking=level == "MUST" or strict,
            transcript=[e.to_dict() for e in entries], transcript_text=render(entries)))
    return results


class MonitorReport:
    """The summary of one monitoring session (live or replayed)."""

    def __init__(self, session: Session, target: str, *, strict: bool = False, duration_s: float = 0.0,
                 problems: list[str] | None = None) -> None:
        self.session = session
        self.snapshot: Snapshot = session.metrics.snapshot(duration_s)
        problems = list(problems or []) + [f"monitor error: {e.splitlines()[0]}" for e in session.errors]
        self.summary = RunSummary(role=ROLE, target=target, results=clause_results(session, strict),
                                  strict=strict, problems=problems, duration_s=duration_s)

    @property
    def exit_code(self) -> int:
        if self.session.errors:
            return 2
        return self.summary.exit_code

    def to_json(self) -> dict[str, Any]:
        out = self.summary.to_json()
        out["exit_code"] = self.exit_code
        out["validator"] = self.session.validator.name
        out["traffic"] = self.snapshot.to_json()
        out["violations_total"] = self.session.violation_count
        out["violations"] = [v.summary() for v in self.session.violations]
        releases = getattr(self.session.validator, "release_report", None)
        if releases is not None:
            out["release"] = releases()
        return out

    @property
    def release_lines(self) -> list[str]:
        """First lines of every format: a side whose traffic fits another release better."""
        lines = getattr(self.session.validator, "mismatch_lines", None)
        return lines() if lines is not None else []

    def markdown(self) -> str:
        text = markdown(self.summary, empty="no clause was violated", exit_code=self.exit_code).replace(
            "# ecp conformance: monitor role", "# ecp monitor report", 1)
        if self.release_lines:
            head, _, rest = text.partition("\n")
            text = head + "\n\n" + "\n".join(f"**{line}**" for line in self.release_lines) + "\n" + rest
        lines = ["", "## Traffic", "", f"- validator: `{self.session.validator.name}`",
                 f"- engines: {', '.join('?' if r is None else str(r) for r in self.snapshot.engines) or 'none'}",
                 f"- messages: {self.snapshot.total_messages} ({self.snapshot.bytes_total} bytes), "
                 f"open requests at the end: {self.snapshot.open_requests}",
                 f"- violations: {self.session.violation_count}", "",
                 "| direction | kind | messages |", "|---|---|---|"]
        for (direction, kind), n in sorted(self.snapshot.messages.items()):
            lines.append(f"| {direction} | {kind} | {n} |")
        return text + "\n".join(lines) + "\n"

    def write_console(self, out: TextIO) -> None:
        """The conformance console format: one block per violated clause, then one line."""
        for line in self.release_lines:
            out.write(f"{line}\n")
        for r in self.summary.results:
            status = r.outcome.value if r.blocking else f"{r.outcome.value} (non-strict {r.level})"
            out.write(f"{status} {r.id} [{r.clause} {r.level}] {r.requirement}\n")
            for line in r.message.splitlines()[:LISTED + 2]:
                out.write(f"    {line}\n")
        for p in self.summary.problems:
            out.write(f"PROBLEM {p}\n")
        by_kind = ", ".join(f"{d} {k} {n}" for (d, k), n in sorted(self.snapshot.messages.items()))
        out.write(f"ecp monitor ({self.summary.target}, validator {self.session.validator.name}): "
                  f"{self.snapshot.total_messages} messages ({by_kind or 'none'}); "
                  f"{self.session.violation_count} violation(s) in {self.summary.duration_s:.1f}s "
                  f"-> exit {self.exit_code}\n")

    def write(self, *, json_path: str | None = None, markdown_path: str | None = None,
              junit_path: str | None = None) -> None:
        if json_path:
            Path(json_path).write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n", encoding="utf-8")
        if markdown_path:
            Path(markdown_path).write_text(self.markdown(), encoding="utf-8")
        if junit_path:
            write_junit(self.summary, Path(junit_path))


def report_schema() -> dict[str, Any]:
    """The JSON Schema of a monitor report: the conformance results schema, with role
    ``monitor``, ``MON-`` entry ids and the monitor's extra sections."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    schema["$id"] = "https://ecp.invalid/conformance/monitor-report.schema.json"
    schema["title"] = "ecp monitor report"
    schema["description"] = "The --report-json of `ecp monitor` (live or --replay)."
    schema["properties"]["role"] = {"const": ROLE}
    case = schema["$defs"]["case"]["properties"]
    case["role"] = {"const": ROLE}
    case["id"] = {"type": "string", "pattern": "^MON-[A-Z]+-[1-9][0-9]*$"}
    schema["properties"]["validator"] = {"type": "string"}
    schema["properties"]["violations_total"] = {"type": "integer", "minimum": 0}
    schema["properties"]["traffic"] = {
        "type": "object",
        "required": ["elapsed_s", "messages_total", "bytes_total", "messages", "violations", "open_requests",
                     "engines"],
        "properties": {
            "messages": {"type": "object", "propertyNames": {"enum": ["to_engine", "to_frontend"]},
                         "additionalProperties": {"type": "object",
                                                  "additionalProperties": {"type": "integer", "minimum": 0}}},
            "violations": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
        },
    }
    schema["properties"]["violations"] = {
        "type": "array",
        "items": {"type": "object", "required": ["index", "clause", "level", "message"],
                  "properties": {"clause": {"type": "string", "pattern": "^ECP-[A-Z]+-[1-9][0-9]*$"},
                                 "level": {"enum": ["MUST", "SHOULD", "MAY"]}}},
    }
    side = {"type": "object",
            "required": ["release", "vllm_version", "layout", "reference", "chosen_by", "fits", "facts", "mismatch"],
            "properties": {"release": {"type": "string"}, "chosen_by": {"enum": ["default", "option", "traffic"]},
                           "fits": {"type": "array", "items": {"type": "string"}},
                           "facts": {"type": "object",
                                     "additionalProperties": {"type": "array", "items": {"type": "string"}}},
                           "mismatch": {"type": ["string", "null"]}}}
    schema["properties"]["release"] = {"anyOf": [{
        "description": "each side's vLLM release (--vllm, --frontend-vllm, --engine-vllm) with the fingerprint of "
                       "its traffic, and every finding of a message the other side's release refuses, by DIFF rule "
                       "and the message it shows in",
        "type": "object", "required": ["under_test", "judged_by", "frontend", "engine", "cross"],
        "properties": {"frontend": side, "engine": side,
                       "cross": {"type": "array", "items": {"type": "object",
                                                            "required": ["code", "shows_in", "count", "first"]}}},
    }, schema["properties"]["release"]]}  # the latter: a session whose validator knows no releases
    schema["required"] = schema["required"] + ["validator", "traffic", "violations_total", "violations"]
    return schema
