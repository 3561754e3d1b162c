"""The cross-version interoperability table: which message kinds work for a
frontend built against one release talking to an engine built against another.

For every (frontend release, engine release) pair and every payload kind,
:func:`check_pair` writes the payload with the sender's layout (the frontend
for ``frontend->engine`` and coordinator payloads, the engine otherwise) in a
``full`` and a ``sparse`` sample (:mod:`ecp.spec.layout.wire`), decodes the
bytes with the receiver's layout and keeps the worse verdict. Type bytes and
UTILITY methods are compared from the frontend's side: every type byte and
method the frontend's release sends must mean the same to the engine.

``ecp spec compat`` renders the result as Markdown (``docs/compatibility.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..layout import types as wt
from ..layout import wire
from ..layout.model import Layout

if TYPE_CHECKING:
    from .observed import Observed

#: verdict -> cell text, best first
VERDICTS = {
    "ok": "ok",
    "ok-partial": "ok (partly unchecked)",
    "lossy": "ok, lossy",
    "misaligned": "MISALIGNED",
    "rejected": "REJECTED",
    "not-compared": "n/c",
    "absent": "-",
}
_RANK = {v: i for i, v in enumerate(["absent", "ok", "ok-partial", "lossy", "not-compared", "misaligned",
                                     "rejected"])}

#: payload kinds in protocol order: (column, message, sender role)
KINDS: tuple[tuple[str, str, str], ...] = (
    ("HELLO", "Hello", "engine"),
    ("INIT", "EngineHandshakeMetadata", "frontend"),
    ("ready payload", "EngineCoreReadyResponse", "engine"),
    ("READY", "Ready", "engine"),
    ("ADD", "EngineCoreRequest", "frontend"),
    ("UTILITY", "UtilityRequest", "frontend"),
    ("START_DP_WAVE", "StartDPWave", "frontend"),
    ("outputs", "EngineCoreOutputs", "engine"),
)
_MAX_NOTES = 6


@dataclass
class Cell:
    verdict: str
    notes: list[str] = field(default_factory=list)


@dataclass
class PairResult:
    frontend: str
    engine: str
    cells: dict[str, Cell]


def _verdict(issues: list[wire.Issue]) -> str:
    kind = wire.worst(issues)
    return {None: "ok", "unchecked": "ok-partial", "defaulted": "lossy", "dropped": "lossy"}.get(kind, kind or "ok")


def check_message(sender: Layout, receiver: Layout, message: str,
                  modes: tuple[wire.Mode, ...] = ("full", "sparse")) -> Cell:
    """Worst of the samples (``full`` and ``sparse``) of ``message`` sent by ``sender``, read by ``receiver``."""
    for layout in (sender, receiver):
        if message not in layout.messages and message not in layout.not_described:
            return Cell("absent")  # the release has no such payload (e.g. no UTILITY type yet)
    if message not in sender.messages or message not in receiver.messages:
        return Cell("not-compared")
    issues: list[wire.Issue] = []
    for mode in modes:
        data = wire.encode(wire.sample(sender, message, mode))
        for issue in wire.check(receiver, message, data, sender):
            if issue not in issues:
                issues.append(issue)
    verdict = _verdict(issues)
    shown = [i for i in issues if i.kind != "unchecked"] or issues
    notes = [str(i) for i in sorted(shown, key=lambda i: wire.ISSUE_ORDER.index(i.kind))]
    if len(notes) > _MAX_NOTES:
        notes = notes[:_MAX_NOTES] + [f"... and {len(notes) - _MAX_NOTES} more"]
    return Cell(verdict, notes if verdict != "ok" else [])


def check_type_bytes(frontend: Layout, engine: Layout) -> Cell:
    engine_by_byte = {rt.byte: rt for rt in engine.request_types}
    notes = []
    for rt in frontend.request_types:
        if not rt.on_wire:
            continue
        other = engine_by_byte.get(rt.byte)
        if other is None or not other.on_wire:
            notes.append(f"0x{rt.byte} {rt.name} is not an on-wire type for the engine")
        elif other.name != rt.name:
            notes.append(f"0x{rt.byte} means {rt.name} to the frontend, {other.name} to the engine")
    return Cell("rejected" if notes else "ok", notes)


def check_utility(frontend: Layout, engine: Layout) -> Cell:
    """Every method of the frontend release's table, as the engine's release answers it."""
    notes, verdict = [], "ok"
    unknown = [name for name in frontend.utility_methods if name not in engine.utility_methods]
    if unknown:
        notes.append(f"unknown to the engine, answered with a failure: {', '.join(unknown)}")
        verdict = "rejected"
    for name, fm in frontend.utility_methods.items():
        em = engine.utility_methods.get(name)
        if em is None:
            continue
        if fm.params is not None and em.params is not None:
            # The frontend passes every argument of its release's signature, positionally; the
            # engine takes them when it has at least that many and no more are required.
            ft, et = [p.type for p in fm.params], [p.type for p in em.params]
            needed = sum(1 for p in em.params if p.required)
            if not needed <= len(ft) <= len(et) or any(
                    not wt.accepts(wt.parse(e), wt.parse(f)) for f, e in zip(ft, et)):
                notes.append(f"{name}: arguments [{', '.join(ft)}] vs engine [{', '.join(et)}]")
                verdict = "rejected"
            for param, e in zip(em.params, et):
                # an argument typed as one message is converted to the engine's message before the call
                t = wt.parse(e)
                if len(t.members) == 1 and t.members[0].kind == "struct" and t.members[0].name in engine.messages:
                    cell = check_message(frontend, engine, t.members[0].name)
                    if cell.verdict in ("rejected", "misaligned"):
                        notes.append(f"{name}: argument {param.name} {cell.verdict}: {'; '.join(cell.notes[:2])}")
                        verdict = "rejected"
        if not wt.accepts(wt.parse(fm.result), wt.parse(em.result)):
            notes.append(f"{name}: result {em.result} where the frontend expects {fm.result}")
            verdict = "rejected" if verdict == "rejected" else "lossy"
    return Cell(verdict, notes)


def check_pair(frontend: Layout, engine: Layout) -> PairResult:
    cells: dict[str, Cell] = {}
    for column, message, sender_role in KINDS:
        sender, receiver = (frontend, engine) if sender_role == "frontend" else (engine, frontend)
        cells[column] = check_message(sender, receiver, message)
    cells["type bytes"] = check_type_bytes(frontend, engine)
    cells["UTILITY methods"] = check_utility(frontend, engine)
    return PairResult(frontend.name, engine.name, cells)


def compat_matrix(layouts: list[Layout]) -> list[PairResult]:
    """Every (frontend, engine) pair, frontend-major, in the order given."""
    return [check_pair(f, e) for f in layouts for e in layouts]


# --------------------------------------------------------------------------- markdown
def render_markdown(layouts: list[Layout], results: list[PairResult], observed: "Observed | None" = None) -> str:
    """``docs/compatibility.md``: the summary, the executed matrix of ``observed`` (when given),
    the features and the message kinds of every pair."""
    from .features import render_features
    from .observed import render_executed

    columns = [k[0] for k in KINDS] + ["type bytes", "UTILITY methods"]
    lines = [
        "# Cross-version compatibility",
        "",
        "<!-- generated by `ecp spec compat --out docs/compatibility.md`; do not edit by hand -->",
        "",
        "Which message kinds interoperate when a frontend built against one vLLM release talks to an",
        "engine built against another. Each payload is written with the sender's layout (a `full` sample",
        "with every optional field set, and a `sparse` one with defaults) and decoded with the receiver's",
        "layout (`ecp.spec.layout.wire`); the cell shows the worse result. Layouts compared:",
        "",
    ]
    for layout in layouts:
        lines.append(f"- `{layout.name}` (vLLM {layout.vllm_version}): {layout.source}")
    if layouts:
        oldest = layouts[0]
        lines += [
            "",
            f"**Where the line stops.** The oldest layout shipped is `{oldest.name}` (vLLM {oldest.vllm_version}):",
            "older releases are not extracted and checked here, so `--vllm` does not name them. A wheel or a",
            "checkout of any release whose V1 engine (`vllm/v1/engine/`) the extractor reads is judged as itself",
            "all the same (`--vllm PATH`, both conformance roles and the reference peers; a case whose clause",
            "needs a feature the release lacks is UNSUPPORTED, naming both), and `ecp spec release add",
            "--from-vllm PATH` ships it.",
        ]
        if len(layouts) > 1:
            from .compare import diff_layouts

            breaks = [f"{f.subject}: {f.message} ({f.rule.id})" for f in diff_layouts(oldest, layouts[1])
                      if f.severity == "breaking"]
            lines += [f"What `{layouts[1].name}` broke against it (`ecp spec diff {oldest.name} {layouts[1].name}`): "
                      + ("; ".join(breaks) if breaks else "nothing") + "."]
    lines += _grid(layouts, results)
    if observed is not None:
        lines += render_executed(layouts, observed)
    lines += render_features(layouts)
    lines += [
        "",
        "## Per pair",
        "",
        "Verdicts: **ok**; **ok (partly unchecked)**: a nested type one layout does not describe was not",
        "checked; **ok, lossy**: decodes, but the receiver ignores fields the sender wrote or fills fields",
        "the sender does not know with defaults; **MISALIGNED**: array positions carry different fields,",
        "values land in the wrong field; **REJECTED**: the receiver's decoder refuses the message (or, for",
        "UTILITY methods and type bytes, the engine does not know what the frontend sends); **n/c**: one",
        "layout does not describe the message (its source did not show it); **-**: one release has no such",
        "message kind. *type bytes* checks every on-wire request type the frontend's release sends;",
        "*UTILITY methods* checks every method of the frontend release's table against the engine's.",
        "",
        "| frontend | engine | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    notes: list[str] = []
    for result in results:
        cells = []
        for column in columns:
            cell = result.cells[column]
            text = VERDICTS[cell.verdict]
            if cell.notes:
                notes.append(f"{len(notes) + 1}. {result.frontend} frontend, {result.engine} engine, {column}: "
                             + "; ".join(cell.notes))
                text += f" [{len(notes)}]"
            cells.append(text)
        lines.append(f"| {result.frontend} | {result.engine} | " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Notes:", ""] + notes
    return "\n".join(lines) + "\n"


def _grid(layouts: list[Layout], results: list[PairResult]) -> list[str]:
    """Frontend release (rows) x engine release (columns): whether serving works and which
    features break (:mod:`.features`; details per pair below)."""
    from .features import predict_pair, summary_cell

    names = [layout.name for layout in layouts]
    lines = ["", "## Summary", "",
             "Rows: the frontend's release; columns: the engine's release. A cell says whether **serving** "
             "works (the handshake, a plain request, its outputs and ABORT) and which features break; where "
             "each break first shows is in *Features per pair*, and what each message kind does in "
             "*Per pair* (which also lists the UTILITY methods no route of these features calls).", "",
             "| frontend \\ engine | " + " | ".join(f"`{n}`" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for f in layouts:
        lines.append(f"| `{f.name}` | " + " | ".join(summary_cell(predict_pair(f, e)) for e in layouts) + " |")
    return lines


def worst_verdict(cells: list[Cell]) -> str:
    return max((c.verdict for c in cells), key=lambda v: _RANK[v])
