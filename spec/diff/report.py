"""Render diff findings as text, JSON, Markdown (pull-request comments) or GitHub Actions
workflow commands. Every finding names the clause of ``spec/PROTOCOL.md`` it violates."""

from __future__ import annotations

import json

from ..layout.model import Layout
from .compare import Finding, counts

FORMATS = ("text", "json", "markdown", "github")

_ORDER = {"breaking": 0, "warning": 1, "info": 2}


def _ordered(findings: list[Finding]) -> list[Finding]:
    # Stable: most severe first, otherwise in comparison order.
    return sorted(findings, key=lambda f: _ORDER[f.severity])


def _clause_text(f: Finding) -> str:
    """A break violates its clause; a compatible change only concerns it."""
    return f"{'violates' if f.severity != 'info' else 'concerns'} {f.clause}"


def _summary(findings: list[Finding]) -> str:
    c = counts(findings)
    return f"{c['breaking']} breaking, {c['warning']} warning(s), {c['info']} info"


def render_text(old: Layout, new: Layout, findings: list[Finding]) -> str:
    lines = [f"ecp spec diff: OLD {old.name} ({old.vllm_version}) -> NEW {new.name} ({new.vllm_version})"]
    if not findings:
        lines.append("no differences")
        return "\n".join(lines) + "\n"
    for f in _ordered(findings):
        lines.append(f"{f.severity.upper():<8} {f.rule.id} {f.subject}: {f.message}")
        where = f" ({f.file}:{f.line})" if f.file and f.line else f" ({f.file})" if f.file else ""
        lines.append(f"         {f.rule.name}; {_clause_text(f)}; {f.impact()}{where}")
        lines.append(f"         fix: {f.fix}")
    lines.append(_summary(findings))
    return "\n".join(lines) + "\n"


def render_json(old: Layout, new: Layout, findings: list[Finding]) -> str:
    doc = {
        "old": {"name": old.name, "vllm_version": old.vllm_version, "source": old.source},
        "new": {"name": new.name, "vllm_version": new.vllm_version, "source": new.source},
        "summary": counts(findings),
        "findings": [f.to_dict() for f in findings],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


_COMMAND = {"breaking": "error", "warning": "warning", "info": "notice"}


def render_github(old: Layout, new: Layout, findings: list[Finding]) -> str:
    """One ``::error``/``::warning``/``::notice`` workflow command per finding."""
    lines = []
    for f in _ordered(findings):
        props = []
        if f.file:
            props.append(f"file={_escape_property(f.file)}")
            if f.line:
                props.append(f"line={f.line}")
        props.append(f"title={_escape_property(f'{f.rule.id} {f.rule.name}')}")
        body = (f"{f.subject}: {f.message} ({_clause_text(f)}; {f.impact()}; {old.name} -> {new.name}). "
                f"Fix: {f.fix}")
        lines.append(f"::{_COMMAND[f.severity]} {','.join(props)}::{_escape_data(body)}")
    lines.append(f"ecp spec diff {old.name} -> {new.name}: {_summary(findings) if findings else 'no differences'}")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(old: Layout, new: Layout, findings: list[Finding]) -> str:
    """A pull-request comment: verdict first, then one table row per finding."""
    c = counts(findings)
    verdict = ("**breaking**: peers built against the two layouts do not interoperate" if c["breaking"]
               else "no breaking change")
    lines = [f"### Protocol diff: `{old.name}` ({old.vllm_version}) → `{new.name}` ({new.vllm_version})", "",
             f"{verdict} ({_summary(findings)}).", ""]
    if not findings:
        return "\n".join(lines)
    lines += ["| severity | rule | subject | change | clause | who breaks | fix |", "|---|---|---|---|---|---|---|"]
    for f in _ordered(findings):
        where = f" (`{f.file}:{f.line}`)" if f.file and f.line else ""
        lines.append(f"| {f.severity} | {f.rule.id} {f.rule.name} | `{_cell(f.subject)}`{where} | {_cell(f.message)} "
                     f"| {f.clause} | {_cell(f.impact())} | {_cell(f.fix)} |")
    lines += ["", "Clauses are those of `spec/PROTOCOL.md` of the engine-core protocol (`ecp`); the rules are "
                  "described in `docs/ci.md` of ecp."]
    return "\n".join(lines) + "\n"


def render(fmt: str, old: Layout, new: Layout, findings: list[Finding]) -> str:
    renderers = {"text": render_text, "json": render_json, "markdown": render_markdown, "github": render_github}
    return renderers[fmt](old, new, findings)
