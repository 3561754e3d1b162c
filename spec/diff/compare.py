"""Compare two layouts and list what changed for peers on either side.

:func:`diff_layouts` is pure: two :class:`~ecp.spec.layout.model.Layout`
values in, a list of :class:`Finding` out, in a stable order (messages in NEW
order, then enums, request types, utility methods). Each finding names its
rule (:mod:`ecp.spec.diff.rules`), the thing it is about, and which pairing
of peers it hurts: ``old->new`` (senders built against OLD, receivers built
against NEW), ``new->old``, ``both`` or ``none``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..layout import types as wt
from ..layout.model import FieldLayout, Layout, MessageLayout, UtilityMethodLayout
from .clauses import clause_for
from .rules import ACCEPT, RULES, Rule

Affects = Literal["old->new", "new->old", "both", "none"]


@dataclass(frozen=True)
class Finding:
    rule: Rule
    subject: str
    message: str
    #: sender->receiver roles of the thing compared (message direction), if any
    direction: str | None
    affects: Affects
    old: Any = None
    new: Any = None
    #: repository path where NEW defines the subject, for annotations
    file: str | None = None
    #: the clause of spec/PROTOCOL.md the change violates (:mod:`.clauses`)
    clause: str | None = None
    #: line of ``file`` (from the layout's ``provenance.locations``), for annotations
    line: int | None = None
    #: who is hurt, in the words of a comparison between peers (:mod:`.peer`)
    pairing: str | None = None

    @property
    def severity(self) -> str:
        return self.rule.severity

    @property
    def fix(self) -> str:
        """One line: how to make the change compatible, or how to accept a break."""
        if self.severity == "breaking":
            return f"{self.rule.fix}; or {ACCEPT}"
        return self.rule.fix

    def impact(self) -> str:
        """Who is hurt, in roles: ``frontends built against OLD -> engines built against NEW``."""
        if self.pairing is not None:
            return self.pairing
        if self.affects == "none":
            return "compatible in both directions" if self.severity == "info" else "same bytes"
        sender, _, receiver = (self.direction or "sender->receiver").partition("->")
        if sender == "both" or not receiver:
            sender, receiver = "senders", "receivers"
        else:
            sender, receiver = sender + "s", receiver + "s"
        old_new = f"{sender} built against OLD -> {receiver} built against NEW"
        new_old = f"{sender} built against NEW -> {receiver} built against OLD"
        return {"old->new": old_new, "new->old": new_old, "both": f"{old_new}, and {new_old}"}[self.affects]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule.id, "name": self.rule.name, "severity": self.severity, "subject": self.subject,
            "message": self.message, "direction": self.direction, "affects": self.affects,
            "impact": self.impact(), "old": self.old, "new": self.new, "file": self.file,
            "clause": self.clause, "line": self.line, "fix": self.fix,
        }


@dataclass
class _Collector:
    findings: list[Finding] = field(default_factory=list)

    def add(self, rule_id: str, subject: str, message: str, direction: str | None, affects: Affects,
            old: Any = None, new: Any = None, file: str | None = None) -> None:
        self.findings.append(Finding(RULES[rule_id], subject, message, direction, affects, old, new, file))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _repo_file(msg: MessageLayout | None) -> str | None:
    """``defined_in`` when it is a repository path: ``spec/...`` (ecp.spec) or ``vllm/...``
    (layouts extracted from vLLM's sources, so annotations land in a vLLM pull request)."""
    if msg and msg.defined_in and msg.defined_in.startswith(("spec/", "vllm/")) and " " not in msg.defined_in:
        return msg.defined_in
    return None


# --------------------------------------------------------------------------- fields
def _holds_any(m: wt.Member) -> bool:
    return m.kind == "any" or any(_holds_any(x) for a in m.args for x in a.members)


def _every_value_retyped(old: wt.WireType, new: wt.WireType) -> bool:
    """Whether no value of ``new`` (nil aside) is of a type ``old`` accepts: ``int -> float``
    widens (a float field takes ints) yet a sender of the new type sends ``1.0``, which a
    receiver of the old one refuses."""
    values = [m for m in new.members if m.kind != "nil"]
    if any(_holds_any(m) for m in values):
        return False  # unconstrained: it may well send the old type
    return bool(values) and not any(wt.accepts(old, wt.WireType((m,))) for m in values)


def _field_changes(out: _Collector, mname: str, old_f: FieldLayout, new_f: FieldLayout, msg: MessageLayout) -> None:
    subject = f"{mname}.{new_f.name}"
    d, file = msg.direction, _repo_file(msg)
    rel = wt.relation(old_f.wire_type, new_f.wire_type)
    if rel == "narrowed":
        out.add("DIFF-020", subject, f"type narrowed from {old_f.type} to {new_f.type}", d, "old->new",
                old_f.type, new_f.type, file)
    elif rel == "widened" and _every_value_retyped(old_f.wire_type, new_f.wire_type):
        out.add("DIFF-024", subject, f"type changed from {old_f.type} to {new_f.type}: NEW senders send every "
                                     f"value as a type OLD receivers refuse", d, "new->old", old_f.type, new_f.type,
                file)
    elif rel == "widened":
        out.add("DIFF-021", subject, f"type widened from {old_f.type} to {new_f.type}", d, "new->old",
                old_f.type, new_f.type, file)
    elif rel == "changed":
        out.add("DIFF-022", subject, f"type changed from {old_f.type} to {new_f.type}", d, "both",
                old_f.type, new_f.type, file)
    if old_f.required and not new_f.required:
        if msg.encoding == "map" and msg.omit_defaults:
            out.add("DIFF-023", subject, "required key became optional and may be omitted", d, "new->old",
                    True, False, file)
        else:
            out.add("DIFF-018", subject, "required field became optional", d, "none", True, False, file)
    elif new_f.required and not old_f.required:
        out.add("DIFF-017", subject, "optional field became required", d, "old->new", False, True, file)
    elif not old_f.required and not new_f.required and old_f.default != new_f.default:
        out.add("DIFF-019", subject, f"default changed from {_json(old_f.default)} to {_json(new_f.default)}",
                d, "both", old_f.default, new_f.default, file)


def _added_field(out: _Collector, mname: str, f: FieldLayout, msg: MessageLayout, inserted: bool,
                 shifted: list[str]) -> None:
    subject, d, file = f"{mname}.{f.name}", msg.direction, _repo_file(msg)
    where = f"field at position {f.index}" if msg.encoding == "array" else "key"
    if inserted:
        out.add("DIFF-012", subject, f"field inserted at position {f.index}; shifts {', '.join(shifted)}",
                d, "both", None, f.index, file)
    elif f.required:
        out.add("DIFF-011", subject, f"new required {where} ({f.type})", d, "old->new", None, f.type, file)
    else:
        out.add("DIFF-010", subject, f"new optional {where} ({f.type}, default {_json(f.default)})", d, "none",
                None, f.type, file)


def _compare_fields(out: _Collector, mname: str, old: MessageLayout, new: MessageLayout) -> None:
    old_names = [f.name for f in old.fields]
    new_names = [f.name for f in new.fields]
    removed = [n for n in old_names if n not in new_names]
    added = [n for n in new_names if n not in old_names]
    d, file = new.direction, _repo_file(new)

    # A name that vanished at the same position where a new name appeared, with the
    # same type, is a rename rather than a removal plus an insertion.
    renames: dict[str, str] = {}
    for i in range(min(len(old_names), len(new_names))):
        o, n = old_names[i], new_names[i]
        if o in removed and n in added and wt.relation(old.fields[i].wire_type, new.fields[i].wire_type) == "same":
            renames[o] = n
    for o, n in renames.items():
        removed.remove(o)
        added.remove(n)
        rule = "DIFF-015" if new.encoding == "array" else "DIFF-016"
        affects: Affects = "none" if new.encoding == "array" else "both"
        out.add(rule, f"{mname}.{n}", f"field renamed from {o!r} to {n!r}", d, affects, o, n, file)
        _field_changes(out, mname, old.fields[old_names.index(o)], new.fields[new_names.index(n)], new)

    for name in removed:
        f = old.field(name)
        assert f is not None
        where = f" from position {f.index}" if old.encoding == "array" else ""
        out.add("DIFF-013", f"{mname}.{name}", f"field removed{where}", d, "both", f.type, None, file)

    common = [n for n in old_names if n in new_names]
    for name in new_names:
        if name in added:
            f = new.field(name)
            assert f is not None
            later_old = [n for n in common if new_names.index(n) > f.index]
            inserted = new.encoding == "array" and any(old_names.index(n) <= f.index for n in later_old)
            shifted = [n for n in later_old if old_names.index(n) < new_names.index(n)]
            _added_field(out, mname, f, new, inserted and bool(shifted), shifted)
        elif name in common:
            old_f, new_f = old.field(name), new.field(name)
            assert old_f is not None and new_f is not None
            _field_changes(out, mname, old_f, new_f, new)

    if new.encoding == "array" and old.encoding == "array":
        old_order = [n for n in old_names if n in common]
        new_order = [n for n in new_names if n in common]
        if old_order != new_order:
            moved = [n for n, m in zip(old_order, new_order) if n != m]
            out.add("DIFF-014", mname, f"fields reordered: {', '.join(moved)}", d, "both", old_order, new_order, file)


def _compare_message(out: _Collector, name: str, old: MessageLayout, new: MessageLayout) -> None:
    d, file = new.direction, _repo_file(new)
    if old.encoding != new.encoding:
        out.add("DIFF-003", name, f"encoding changed from {old.encoding} to {new.encoding}", d, "both",
                old.encoding, new.encoding, file)
        return  # field positions/keys are meaningless across encodings
    if old.direction != new.direction:
        out.add("DIFF-004", name, f"direction changed from {old.direction} to {new.direction}", d, "both",
                old.direction, new.direction, file)
    if old.tag != new.tag:
        out.add("DIFF-005", name, f"tag changed from {old.tag} to {new.tag}", d, "both", old.tag, new.tag, file)
    _compare_fields(out, name, old, new)


# --------------------------------------------------------------------------- enums etc.
def _enum_direction(layout: Layout, enum_name: str) -> str | None:
    dirs = sorted({m.direction for m in layout.messages.values()
                   if any(("enum", enum_name) in f.wire_type.refs() for f in m.fields)})
    return dirs[0] if len(dirs) == 1 else ("both" if dirs else None)


def _compare_enums(out: _Collector, old: Layout, new: Layout) -> None:
    for name in sorted(set(old.enums) | set(new.enums)):
        if name in old.enums and name in new.enums:
            d = _enum_direction(new, name)
            ov, nv = old.enums[name].values, new.enums[name].values
            old_by_value = {v: k for k, v in ov.items()}
            for member, value in nv.items():
                if member in ov and ov[member] != value:
                    out.add("DIFF-035", f"enum {name}.{member}", f"{member} renumbered from {ov[member]} to {value}",
                            d, "both", ov[member], value)
                elif member not in ov and value in old_by_value:
                    out.add("DIFF-034", f"enum {name}.{member}",
                            f"value {value} reused: was {old_by_value[value]}, now {member}", d, "both",
                            old_by_value[value], member)
                elif member not in ov:
                    out.add("DIFF-032", f"enum {name}.{member}", f"new value {member} = {value}", d, "new->old",
                            None, value)
            new_values = set(nv.values())
            for member, value in ov.items():
                if member not in nv and value not in new_values:
                    out.add("DIFF-033", f"enum {name}.{member}", f"value {member} = {value} removed", d, "old->new",
                            value, None)
        elif name in new.enums and name not in old.not_described:
            out.add("DIFF-030", f"enum {name}", f"enum {name} added", _enum_direction(new, name), "none")
        elif name in old.enums and name not in new.not_described:
            out.add("DIFF-031", f"enum {name}", f"enum {name} removed", _enum_direction(old, name), "old->new")


def _compare_request_types(out: _Collector, old: Layout, new: Layout) -> None:
    d = "frontend->engine"
    old_by_byte = {rt.byte: rt for rt in old.request_types}
    new_by_byte = {rt.byte: rt for rt in new.request_types}
    for byte in sorted(set(old_by_byte) | set(new_by_byte)):
        o, n = old_by_byte.get(byte), new_by_byte.get(byte)
        subject = f"request type 0x{byte}"
        if o and n and o.name != n.name:
            out.add("DIFF-042", subject, f"byte 0x{byte} reused: was {o.name}, now {n.name}", d, "both", o.name, n.name)
        elif o and n and o.on_wire != n.on_wire:
            where = "on the wire" if n.on_wire else "engine-internal"
            out.add("DIFF-043", subject, f"{n.name} is now {where}", d, "both", o.on_wire, n.on_wire)
        # Engine-internal markers that appear or vanish never reach the wire.
        elif n and not o and n.on_wire:
            out.add("DIFF-040", subject, f"new request type {n.name}", d, "new->old", None, n.name)
        elif o and not n and o.on_wire:
            out.add("DIFF-041", subject, f"request type {o.name} removed", d, "old->new", o.name, None)


def _signature_affects(om, nm) -> Affects:
    """Trailing arguments with defaults appended: only NEW callers (passing them) hurt OLD engines."""
    n_old = len(om.params)
    same_prefix = len(nm.params) > n_old and all(
        wt.relation(wt.parse(a.type), wt.parse(b.type)) == "same" for a, b in zip(om.params, nm.params))
    if same_prefix and not any(p.required for p in nm.params[n_old:]):
        return "new->old"
    return "both"


def _same_signature(om: UtilityMethodLayout, nm: UtilityMethodLayout) -> bool:
    if om.params is None or nm.params is None or len(om.params) != len(nm.params):
        return False
    types = [(a.type, b.type) for a, b in zip(om.params, nm.params)] + [(om.result, nm.result)]
    return all(wt.relation(wt.parse(a), wt.parse(b)) == "same" for a, b in types)


def _compare_utility(out: _Collector, old: Layout, new: Layout) -> None:
    d = "frontend->engine"
    gone = [n for n in old.utility_methods if n not in new.utility_methods]
    came = [n for n in new.utility_methods if n not in old.utility_methods]
    # a method that vanished while one of the same signature appeared: a rename on both sides
    renamed = {o: n for o in gone for n in came if _same_signature(old.utility_methods[o], new.utility_methods[n])}
    renamed_to = {n: o for o, n in renamed.items()}
    for name, nm in new.utility_methods.items():
        om = old.utility_methods.get(name)
        subject = f"utility {name}"
        if not nm.handled:
            if om is None or om.handled:
                out.add("DIFF-057", subject, f"NEW frontends call {name} but no engine-side handler of NEW answers "
                                             f"it: every call fails, from frontends of either layout", d, "old->new")
            continue
        if om is None or not om.handled:
            was = f" (renamed from {renamed_to[name]}?)" if name in renamed_to else ""
            out.add("DIFF-050", subject, f"new utility method {name}{was}", d,
                    "new->old")
            continue
        if om.params is None and nm.params is None:
            pass  # neither side documents the arguments: nothing to compare
        elif om.params is None or nm.params is None:
            side = "OLD" if om.params is None else "NEW"
            out.add("DIFF-006", subject, f"arguments not compared: {side} does not document them", d, "none")
        else:
            old_types = [p.type for p in om.params]
            new_types = [p.type for p in nm.params]
            if len(old_types) != len(new_types) or any(
                    wt.relation(wt.parse(a), wt.parse(b)) != "same" for a, b in zip(old_types, new_types)):
                out.add("DIFF-052", subject, f"arguments changed from [{', '.join(old_types)}] to "
                                             f"[{', '.join(new_types)}]", d, _signature_affects(om, nm),
                        old_types, new_types)
            else:
                for i, (op, np_) in enumerate(zip(om.params, nm.params)):
                    if op.name and np_.name and op.name != np_.name:
                        out.add("DIFF-053", subject, f"argument {i} renamed from {op.name!r} to {np_.name!r}",
                                d, "none", op.name, np_.name)
        rel = wt.relation(wt.parse(om.result), wt.parse(nm.result))
        # Results travel engine -> frontend: a widened result reaches old frontends from new engines.
        result_rule: dict[str, tuple[str, Affects]] = {
            "changed": ("DIFF-054", "both"), "widened": ("DIFF-055", "new->old"), "narrowed": ("DIFF-056", "none")}
        if rel in result_rule:
            rule_id, affects = result_rule[rel]
            out.add(rule_id, subject, f"result {rel} from {om.result} to {nm.result}", "engine->frontend",
                    affects, om.result, nm.result)
    for name in gone:
        if not old.utility_methods[name].handled:
            continue  # OLD engines never answered it either
        now = f" (renamed to {renamed[name]}?)" if name in renamed else ""
        out.add("DIFF-051", f"utility {name}", f"utility method {name} removed{now}",
                d, "old->new")


# --------------------------------------------------------------------------- entry point
def diff_layouts(old: Layout, new: Layout) -> list[Finding]:
    """Every difference between ``old`` and ``new`` that a peer could notice. When exactly one
    side was read from Rust, the two are peers, not releases (:mod:`.peer`)."""
    from .peer import diff_peer, is_peer_pair

    if is_peer_pair(old, new):
        return diff_peer(old, new)
    out = _Collector()
    not_compared: list[str] = []
    for name, msg in new.messages.items():
        if name in old.messages:
            _compare_message(out, name, old.messages[name], msg)
        elif name in old.not_described:
            not_compared.append(name)
        else:
            out.add("DIFF-001", name, f"message {name} added", msg.direction, "none", file=_repo_file(msg))
    for name, msg in old.messages.items():
        if name in new.messages:
            continue
        if name in new.not_described:
            not_compared.append(name)
        else:
            out.add("DIFF-002", name, f"message {name} removed", msg.direction, "both")
    not_compared += [n for n in new.enums if n in old.not_described]
    not_compared += [n for n in old.enums if n in new.not_described]
    if not_compared:
        out.add("DIFF-006", "layout scope", f"not described by one side, not compared: {', '.join(not_compared)}",
                None, "none", old=[n for n in not_compared if n in old.not_described],
                new=[n for n in not_compared if n in new.not_described])
    _compare_enums(out, old, new)
    _compare_request_types(out, old, new)
    _compare_utility(out, old, new)
    return [_located(replace(f, clause=clause_for(f.rule.id, f.subject, old, new)), old, new)
            for f in out.findings]


def _candidates(subject: str) -> list[str]:
    """Location keys for ``subject``, most precise first: ``A.b`` then ``A``; ``enum E.M`` then
    ``enum E``; for the scope finding, none."""
    out = [subject]
    head, _, tail = subject.rpartition(".")
    if head and tail and " 0x" not in subject:
        out.append(head)
    return out


def location(layout: Layout, subject: str) -> tuple[str, int | None] | None:
    """``(file, line)`` where ``layout`` writes ``subject`` (or what holds it), if it records it."""
    locations = layout.provenance.locations if layout.provenance else {}
    for key in _candidates(subject):
        where = locations.get(key)
        if where:
            path, _, line = where.rpartition(":")
            return (path, int(line)) if path and line.isdigit() else (where, None)
    return None


def _located(f: Finding, old: Layout, new: Layout) -> Finding:
    # NEW first: the change under review is there; what NEW no longer has is found in OLD.
    where = location(new, f.subject) or location(old, f.subject)
    if where is None and f.subject == "layout scope":  # the first thing listed that either side locates
        names = [n for side in (f.old, f.new) for n in side or ()]
        where = next((loc for n in names for loc in (location(new, n), location(old, n)) if loc), None)
    if where is None:
        return f
    return replace(f, file=where[0], line=where[1])


def counts(findings: list[Finding]) -> dict[str, int]:
    return {s: sum(1 for f in findings if f.severity == s) for s in ("breaking", "warning", "info")}


def new_warnings(old: Layout, new: Layout) -> list[str]:
    """Extraction warnings ``new`` records that ``old`` does not (compared without line numbers:
    an unmodified construct that moved is the same warning)."""
    def key(w: str) -> str:
        path, _, rest = w.partition(":")
        return path + ":" + rest.partition(":")[2] if rest.partition(":")[0].isdigit() else w
    seen = {key(w) for w in (old.provenance.warnings if old.provenance else [])}
    return [w for w in (new.provenance.warnings if new.provenance else []) if key(w) not in seen]
