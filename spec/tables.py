"""Field tables of ``spec/PROTOCOL.md``, generated from the typed definitions.

PROTOCOL.md holds blocks delimited by ``<!-- fields:Name -->`` and
``<!-- /fields -->``; :func:`refresh_protocol` rewrites each block with the
current field table of the struct ``Name``, in wire order, so the prose can
never drift from the code. ``ecp schema`` refreshes them; ``ecp schema
--check`` (and a test) fail when they are stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from . import control, handshake, outputs, request, sampling
from .version import VLLM_RELEASE

PROTOCOL_MD = Path(__file__).resolve().parent / "PROTOCOL.md"

STRUCTS: dict[str, type] = {
    "EngineCoreRequest": request.EngineCoreRequest,
    "SamplingParams": sampling.SamplingParams,
    "PoolingParams": request.PoolingParams,
    "LateInteractionParams": request.LateInteractionParams,
    "LateChunkingParams": request.LateChunkingParams,
    "LoRARequest": request.LoRARequest,
    "MultiModalFeatureSpec": request.MultiModalFeatureSpec,
    "PlaceholderRange": request.PlaceholderRange,
    "KvHintsEnvelope": request.KvHintsEnvelope,
    "EngineCoreOutputs": outputs.EngineCoreOutputs,
    "EngineCoreOutput": outputs.EngineCoreOutput,
    "EngineCoreEvent": outputs.EngineCoreEvent,
    "RequestError": outputs.RequestError,
    "PrefillStats": outputs.PrefillStats,
    "SchedulerStats": outputs.SchedulerStats,
    "LogprobsLists": outputs.LogprobsLists,
    "LogprobsTensors": outputs.LogprobsTensors,
    "SamplingMaskLists": outputs.SamplingMaskLists,
    "UtilityOutput": outputs.UtilityOutput,
    "UtilityResult": outputs.UtilityResult,
    "UtilityRequest": control.UtilityRequest,
    "StartDPWave": control.StartDPWave,
    "CoordinatorPublication": control.CoordinatorPublication,
    "Hello": handshake.Hello,
    "Ready": handshake.Ready,
    "EngineHandshakeMetadata": handshake.EngineHandshakeMetadata,
    "EngineZmqAddresses": handshake.EngineZmqAddresses,
    "EngineCoreReadyResponse": handshake.EngineCoreReadyResponse,
}

_BLOCK_RE = re.compile(r"(<!-- fields:(\w+) -->\n)(.*?)(<!-- /fields -->)", re.S)
_METHODS_RE = re.compile(r"(<!-- utility-methods -->\n)(.*?)(<!-- /utility-methods -->)", re.S)
_ROUTES_RE = re.compile(r"(<!-- http-routes -->\n)(.*?)(<!-- /http-routes -->)", re.S)
_MACHINE_RE = re.compile(r"(<!-- machine:(\w+) -->\n)(.*?)(<!-- /machine -->)", re.S)



def type_name(t: mi.Type) -> str:
    """A msgspec type in the layout type grammar (the vocabulary of ``spec/layouts/``),
    marked up for a Markdown table cell."""
    from .layout.introspect import type_string

    text = re.sub(r"\b(struct|enum):(\w+)", lambda m: f"`{m.group(2)}`" + (" (int)" if m.group(1) == "enum" else ""),
                  type_string(t))
    return text.replace("|", "\\|")


def _default(f: mi.Field) -> str:
    if f.required:
        return "**required**"
    value: Any = f.default if f.default is not mi.NODEFAULT else f.default_factory()
    if isinstance(value, msgspec.Struct):
        return f"`{type(value).__name__}()`"
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (set, frozenset)):
        return "[] (empty set)" if not value else repr(sorted(value))
    if hasattr(value, "value") and hasattr(value, "name"):  # enum member
        return f"{value.value} ({value.name})"
    return f"`{msgspec.json.encode(value).decode()}`"


def wire_shape(typ: Any) -> str:
    """How many keys (or elements) a struct has on the wire and how many are required, the tag
    included: what ``spec/PROTOCOL.md`` and ``ecp summary`` both say."""
    info = mi.type_info(typ)
    tag = 0 if info.tag_field is None else 1
    total, required = len(info.fields) + tag, sum(f.required for f in info.fields) + tag
    unit = "elements" if info.array_like else "keys"
    shape = f"{total} {unit}" + (f", {required} required" if required else "")
    if tag:
        shape += f" (the tag `{info.tag_field}` and {len(info.fields)} fields)"
    return shape


def render_table(name: str) -> str:
    """A struct's field table; for a message the layouts know, column ``vLLM`` gives the
    shipped releases that have each field (by name: its position may differ)."""
    from .profile.wire import layout_field_names
    from .releases import feature_span, releases_with

    info = mi.type_info(STRUCTS[name])
    layout = "array" if info.array_like else "map"
    spans = None
    if releases_with(f"message:{name}"):
        spans = {attr: feature_span(f"field:{name}.{wire}") for attr, wire in layout_field_names(STRUCTS[name])}
    extra = (" vLLM |", "---|") if spans else ("", "")
    rows = ["| # | field | wire type | default |" + extra[0], "|---|---|---|---|" + extra[1]]
    if info.tag_field is not None:
        rows.append(f"| – | `{info.tag_field}` | str `\"{info.tag}\"` | **required** (tag) |" + (" all |" if spans else ""))
    for i, f in enumerate(info.fields):
        cell = f" {spans[f.name]} |" if spans else ""
        rows.append(f"| {i} | `{f.encode_name}` | {type_name(f.type)} | {_default(f)} |{cell}")
    head = f"`{name}`: msgpack **{layout}** of {wire_shape(STRUCTS[name])}."
    return head + "\n\n" + "\n".join(rows) + "\n"


def _wire_literal(value: Any) -> str:
    """A default value as the msgpack value a caller would send (``nil``, ``true``, ``[]``, ``"abort"``)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_wire_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def render_utility_methods() -> str:
    """The method table of section 8, from :data:`ecp.spec.utility_methods.UTILITY_METHODS`."""
    from .utility_methods import UTILITY_METHODS

    from .releases import feature_span

    rows = [f"| Method | Args (positional) | Result | ✓ | Python {VLLM_RELEASE} DP rule | Conforming DP rule | vLLM |",
            "|---|---|---|---|---|---|---|"]
    for m in UTILITY_METHODS.values():
        if m.params is None:
            args = "(not documented)"
        else:
            args = "`[" + ", ".join((f"{p.name}: {p.type}" if p.name else p.type)
                                    + ("" if p.required else f" = {_wire_literal(p.default)}")
                                    for p in m.params) + "]`"
        rule = f"{m.aggregation} ({m.aggregation_clause})"
        mark = " †" if m.origin else ""
        rows.append(f"| `{m.name}`{mark} | {args.replace('|', chr(92) + '|')} | `{m.result}` "
                    f"| {'✓' if m.observed else ''} | {m.dp_rule} | {rule} "
                    f"| {feature_span(f'utility:{m.name}').replace('none', '–')} |")
    origins = sorted({m.origin for m in UTILITY_METHODS.values() if m.origin})
    notes = "".join(f"\n† {origin}: a vLLM {VLLM_RELEASE} engine answers with a failure message.\n" for origin in origins)
    return "\n".join(rows) + "\n" + notes


#: a clause's anchor: ``**ECP-OUT-5** (MUST, vLLM 0.33)``, ``**ECP-HS-8** (MUST, hardened)``
_KEYWORD_SPAN_RE = re.compile(r"\*\*(ECP-[A-Z]+-\d+)\*\* \((MUST|SHOULD|MAY)((?:, hardened)?)(?:, vLLM [0-9.–]+)?\)")


def _keyword_span(m: re.Match) -> str:
    """The anchor with its clause's release span beside the keyword: the shipped releases that have
    every feature a release-bound clause needs (``ECP-OUT-5``: vLLM 0.33); none where that is all."""
    from .clauses import CLAUSES

    clause = CLAUSES.get(m.group(1))
    span = clause.release_span() if clause is not None and clause.features else "all"
    return f"**{m.group(1)}** ({m.group(2)}{m.group(3)}" + ("" if span == "all" else f", vLLM {span}") + ")"


def refresh_protocol(text: str) -> str:
    """``text`` with every generated block (field tables, method table, machine tables, HTTP
    routes) brought up to date."""
    from .http import render_routes
    from .machine.table import render_table as render_machine
    def repl(m: re.Match) -> str:
        return m.group(1) + render_table(m.group(2)) + m.group(4)

    text = _BLOCK_RE.sub(repl, text)
    text = _KEYWORD_SPAN_RE.sub(_keyword_span, text)
    text = _METHODS_RE.sub(lambda m: m.group(1) + render_utility_methods() + m.group(3), text)
    text = _ROUTES_RE.sub(lambda m: m.group(1) + render_routes() + m.group(3), text)
    return _MACHINE_RE.sub(lambda m: m.group(1) + render_machine(m.group(2)) + m.group(4), text)
