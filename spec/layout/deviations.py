"""Where ecp.spec's own layout knowingly differs from vLLM 0.33.0's, and why.

``ecp spec diff vllm-0.33 current`` compares the layout extracted from the
vLLM 0.33.0 wheel (``spec/layouts/vllm-0.33.json``) with the layout of
ecp.spec's msgspec types. Every finding it reports must be listed here, with
the finding's exact message and the reason it is harmless on the wire; a
finding that is not listed is a divergence to fix in ecp.spec (a test fails
on it, and on an entry that no longer matches a finding).

ecp.spec's types are the generated 0.33 classes, so what differs is what the
overlay (:mod:`ecp.spec.overlay`) says by hand: its pins and decode limits,
whose findings are derived from the notes here, each with the note's ``why``
(one place for the reason), and, listed by hand below, the messages of ours
(``CoordinatorPublication``, the ``UtilityResult`` envelope) and where the
UTILITY table (:mod:`ecp.spec.utility_methods`) differs from the wheel's.

Kinds of deviation:

``unresolved``
    The extractor reads vLLM's source without importing it and records
    ``any`` where the type is not declared statically; ecp.spec pins the type
    the 0.33 source actually produces. The bytes are the same.
``map``
    vLLM carries a struct or dataclass of its own as a msgpack map; ecp.spec
    types it as ``map[str, any]`` (a receiver checks only that it is a map,
    a sender is responsible for the keys). The bytes are the same.
``stats``
    A typed statistics struct inside ``SchedulerStats`` that ecp.spec keeps as
    ``any``: scheduler stats are optional for frontends (``ECP-OUT-7``) and a
    receiver must not fail a step on them.
``ecp``
    Something ecp.spec describes that the extracted layout does not: a type
    the extractor cannot see, or a method that is not vLLM 0.33's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from ..version import VLLM_RELEASE

Kind = Literal["unresolved", "map", "stats", "ecp"]

#: the shipped layout the deviations are relative to
BASELINE = f"vllm-{VLLM_RELEASE}"


@dataclass(frozen=True)
class Deviation:
    """One expected finding of ``ecp spec diff vllm-0.33 current``."""

    rule: str
    subject: str
    #: the finding's message, exactly; any other change to the subject is a new finding
    message: str
    kind: Kind
    reason: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.rule, self.subject, self.message)


def _d(rule: str, subject: str, message: str, kind: Kind, reason: str) -> Deviation:
    return Deviation(rule, subject, message, kind, reason)


_MAP = "a msgpack map on the wire either way"

#: what ecp.spec adds or narrows by hand outside the overlay: its own messages and the UTILITY table
_LISTED: tuple[Deviation, ...] = (
    _d("DIFF-001", "CoordinatorPublication", "message CoordinatorPublication added", "ecp",
       "the coordinator's publication to frontends is not extracted from vLLM (the extractor covers "
       "frontend<->engine payloads only)"),
    _d("DIFF-001", "UtilityResult", "message UtilityResult added", "ecp",
       "the [type_info, value] envelope of UtilityOutput.result (ECP-UTIL-2), spec/envelope.py: vLLM's "
       "UtilityResult is a plain class the extractor does not see as a message"),
    # -- UTILITY methods
    _d("DIFF-056", "utility sleep", "result narrowed from any to nil", "unresolved",
       "the method returns None or a Future the engine core waits for; the reply's value is nil"),
    _d("DIFF-056", "utility pause_generation", "result narrowed from any to nil", "unresolved",
       "the method returns None or a Future the engine core waits for; the reply's value is nil"),
    _d("DIFF-056", "utility pause_scheduler", "result narrowed from any to nil", "unresolved",
       "the method returns None or a Future the engine core waits for; the reply's value is nil"),
    _d("DIFF-052", "utility collective_rpc",
       "arguments changed from [any, float | nil, array[any], map[str, any] | nil] "
       "to [str, float | nil, array[any], map[str, any] | nil]", "unresolved",
       "vLLM's method is str | Callable; a callable travels only pickled, which ecp never decodes (ECP-SEC-1), "
       "so on the wire it is a method name"),
    _d("DIFF-052", "utility reinitialize_distributed",
       "arguments changed from [struct:ReconfigureDistributedRequest] to [map[str, any]]", "map",
       f"ReconfigureDistributedRequest is a map-encoded msgspec Struct (vllm/v1/engine/__init__.py), {_MAP}"),
    _d("DIFF-002", "ReconfigureDistributedRequest", "message ReconfigureDistributedRequest removed", "map",
       "carried as map[str, any], the argument of utility reinitialize_distributed"),
    _d("DIFF-006", "utility handle_fault_tolerance", "arguments not compared: OLD does not document them",
       "unresolved", "answered by the engine's fault-tolerance sentinel, not an engine core method "
       "(vllm/v1/fault_tolerance/engine_core_sentinel.py): one FaultToleranceRequest map"),
    _d("DIFF-056", "utility handle_fault_tolerance", "result narrowed from any to map[str, any]", "unresolved",
       "the sentinel replies with a FaultToleranceResult as a map {request_id, success, reason}"),
    _d("DIFF-050", "utility get_kv_connector_handshake_entries",
       "new utility method get_kv_connector_handshake_entries", "ecp",
       "called by vLLM's Rust frontend source after 0.33; not in the 0.33.0 wheel (UtilityMethod.origin)"),
    _d("DIFF-050", "utility add_remote_kv_handshake", "new utility method add_remote_kv_handshake", "ecp",
       "called by vLLM's Rust frontend source after 0.33; not in the 0.33.0 wheel (UtilityMethod.origin)"),
)


def _from_overlay() -> tuple[Deviation, ...]:
    """The findings the overlay's pins and decode limits make, each with the note's reason: a pin narrows
    ``any`` (DIFF-020), ``receive="map"`` changes a message to a map (DIFF-022), ``receive="any"`` widens it
    (DIFF-021), and a message only such fields reached is gone from ecp.spec's layout (DIFF-002)."""
    from ..overlay import OVERLAY
    from .codegen import field_type
    from .resolve import load_shipped

    base = load_shipped(BASELINE)
    out: list[Deviation] = []
    typed: dict[str, list] = {}  # message -> its fields' types as ecp.spec has them
    why: dict[str, tuple[str, Kind]] = {}  # message a decode limit untypes -> (reason, kind)
    for name, msg in base.messages.items():
        typed[name] = []
        for f in msg.fields:
            note = OVERLAY.get(f"{name}.{f.name}")
            new = field_type(base, name, f.name, f.wire_type, note)
            typed[name].append(new)
            if note is None or new == f.wire_type:
                continue
            kind: Kind = "unresolved" if note.pin else "map" if note.receive == "map" else "stats"
            rule, verb = {"unresolved": ("DIFF-020", "narrowed"), "map": ("DIFF-022", "changed"),
                          "stats": ("DIFF-021", "widened")}[kind]
            out.append(_d(rule, f"{name}.{f.name}", f"type {verb} from {f.wire_type} to {new}", kind, note.why or ""))
            for k, ref in f.wire_type.refs():
                if k == "struct":
                    why.setdefault(ref, (f"carried untyped in {name}.{f.name}: {note.why}", kind))
    reached = {name for name, msg in base.messages.items() if msg.frame}  # from the top-level payloads
    todo = list(reached)
    while todo:
        for t in typed[todo.pop()]:
            for k, ref in t.refs():
                if k == "struct" and ref in base.messages and ref not in reached:
                    reached.add(ref)
                    todo.append(ref)
    for name in base.messages:  # in layout order; a message nested in an untyped one is gone with it
        if name in reached or name in why:
            continue
        parents = [p for p, msg in base.messages.items()
                   if any(("struct", name) in f.wire_type.refs() for f in msg.fields) and p in why]
        if parents:
            reason, kind = why[parents[0]]
            why[name] = (f"{reason} (nested in {parents[0]})", kind)
    for name in base.messages:
        if name not in reached and name in why:
            out.append(_d("DIFF-002", name, f"message {name} removed", why[name][1], why[name][0]))
    return tuple(out)


DEVIATIONS: tuple[Deviation, ...] = _LISTED + _from_overlay()
