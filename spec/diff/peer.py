"""A peer's copy of the protocol against a vLLM release: Python against Rust.

``ecp spec diff`` compares two releases of one implementation by default. When one side
is a layout read from Rust (``ecp spec layout --from-rust``) and the other one from
Python, it compares two *peers* instead: the Rust crate plays one role (its layout's
``provenance.tree``: ``rust-frontend`` or ``rust-engine``) and vLLM's Python the other,
and each message is checked in the direction it travels between them:

* the receiver's array must take every length the sender writes (serde_tuple reads a
  fixed count and fails on more elements; msgspec refuses more than it declares and
  fewer than its required fields), field by field at the same position;
* the receiver's required map keys must always be sent;
* the receiver's type must accept the sender's (``int`` in ``float`` yes, the reverse no);
* enum values and request-type bytes must mean the same member on both sides;
* a frontend may call only UTILITY methods the engine defines, with an argument count
  the method takes.

Each finding names the Rust item with its file and line, and says which peer cannot
read what (``EngineCoreOutput (src/output.rs:40) reads 18 fields, vLLM 0.33 sends 19
...``). Which release the Python side is comes from its layout, never from here.
"""

from __future__ import annotations

from dataclasses import replace

from ..layout import types as wt
from ..layout.model import Layout, MessageLayout
from ..layout.rust import rust_role
from .clauses import clause_for, frames_reaching
from .compare import Affects, Finding, location
from .rules import RULES


def _holds_any(text: str) -> bool:
    """Whether ``any`` occurs anywhere in the type: an unconstrained sender is not checked."""
    def member(m: wt.Member) -> bool:
        return m.kind == "any" or any(member(x) for a in m.args for x in a.members)
    return any(member(m) for m in wt.parse(text).members)


class _Peer:
    def __init__(self, old: Layout, new: Layout) -> None:
        self.rust_is_new = rust_role(new) is not None
        self.py, self.rs = (old, new) if self.rust_is_new else (new, old)
        self.role = rust_role(self.rs) or "frontend"
        self.other = "engine" if self.role == "frontend" else "frontend"
        self.release = f"vLLM {self.py.vllm_version}"
        self.frames = frames_reaching(self.py)
        self.findings: list[Finding] = []

    # ------------------------------------------------------------------ helpers
    def where(self, subject: str) -> str:
        loc = location(self.rs, subject)
        return f"{loc[0]}:{loc[1]}" if loc and loc[1] else (loc[0] if loc else "?")

    def rust_name(self, name: str) -> str:
        msg = self.rs.messages.get(name)
        if msg is not None and msg.note and msg.note.startswith("Rust struct "):
            return msg.note[len("Rust struct "):].split(" ")[0]
        return name

    def add(self, rule: str, subject: str, message: str, direction: str | None, rust_sends: bool,
            old=None, new=None) -> None:
        """``rust_sends``: the break hurts messages the Rust crate sends (else those it reads)."""
        sender, receiver = ("this Rust " + self.role, f"{self.release} {self.other}s") if rust_sends else (
            f"{self.release} {self.other}s", "this Rust " + self.role)
        rust_side = "new" if self.rust_is_new else "old"
        affects: Affects = (f"{rust_side}->{'old' if self.rust_is_new else 'new'}" if rust_sends  # type: ignore
                            else f"{'old' if self.rust_is_new else 'new'}->{rust_side}")
        self.findings.append(Finding(RULES[rule], subject, message, direction, affects, old, new,
                                     pairing=f"{sender} -> {receiver}"))

    def loose(self, text: str, rust: bool) -> wt.WireType:
        """The type with each map-encoded struct of ``rust``'s side read as ``map[str, any]``
        and each struct the other layout names otherwise left as it is: a Rust struct may copy a
        Python dict (``ReasoningParserKwargs``), and two structs of other names are compared
        by name only when both layouts describe them (``--name`` maps the rest)."""
        layout = self.rs if rust else self.py
        other = self.py if rust else self.rs
        out = []
        for m in wt.parse(text).members:
            msg = layout.messages.get(m.name) if m.kind == "struct" else None
            if msg is not None and m.name not in other.messages and msg.encoding == "map":
                out.append("map[str, any]")
            else:
                out.append(str(m))
        return wt.parse(" | ".join(out))

    def frame(self, name: str) -> str:
        return self.frames.get(name, "messages carrying " + name)

    def sends(self, direction: str) -> tuple[bool, bool]:
        """(Rust sends it, Rust reads it) for a message travelling ``direction``."""
        if direction == "both":
            return True, True
        sender = direction.split("->")[0]
        rust_sends = sender == self.role or (sender == "coordinator" and self.role == "frontend")
        return rust_sends, not rust_sends

    # ------------------------------------------------------------------ messages
    def messages(self) -> None:
        only_py = [n for n in self.py.messages if n not in self.rs.messages and n not in self.rs.not_described]
        only_rs = [n for n in self.rs.messages if n not in self.py.messages]
        for name, p in self.py.messages.items():
            r = self.rs.messages.get(name)
            if r is None:
                continue
            rust_sends, rust_reads = self.sends(p.direction)
            if p.encoding != r.encoding:
                self.add("DIFF-003", name, f"{self.rust_name(name)} ({self.where(name)}) is a msgpack {r.encoding}, "
                                           f"{self.release} writes {name} as a {p.encoding}: no "
                                           f"{self.frame(name)} decodes", p.direction, rust_sends,
                         p.encoding, r.encoding)
                continue
            if p.encoding == "array":
                self.positions(name, p, r)
            if rust_reads:
                self.compare(name, p, r, sender=p, receiver=r, rust_sends=False)
            if rust_sends:
                self.compare(name, p, r, sender=r, receiver=p, rust_sends=True)
        if only_py or only_rs:
            parts = []
            if only_py:
                parts.append(f"{self.release} only: {', '.join(only_py)}")
            if only_rs:
                parts.append(f"Rust only: {', '.join(only_rs)} (named differently? --name RUST=PYTHON)")
            self.findings.append(Finding(RULES["DIFF-006"], "layout scope", "not compared, " + "; ".join(parts),
                                         None, "none", only_py if self.rust_is_new else only_rs,
                                         only_rs if self.rust_is_new else only_py))

    def compare(self, name: str, p: MessageLayout, r: MessageLayout, sender: MessageLayout,
                receiver: MessageLayout, rust_sends: bool) -> None:
        d = p.direction
        rn, at = self.rust_name(name), self.where(name)
        who = f"this Rust {self.role}" if not rust_sends else f"{self.release} {self.other}s"
        if p.encoding == "array":
            self.array(name, p, r, sender, receiver, rust_sends, rn, at, who)
        else:
            self.map(name, p, r, sender, receiver, rust_sends, rn, at, who)
        # types of the fields both sides know
        for rf in receiver.fields:
            sf = sender.field(rf.name)
            if sf is None or (p.encoding == "array" and sf.index != rf.index):
                continue
            sent = self.loose(sf.type, rust_sends)
            if _holds_any(str(sent)):
                continue  # an unconstrained sender: nothing to check
            if not wt.accepts(self.loose(rf.type, not rust_sends), sent):
                subj = f"{name}.{rf.name}"
                reader, writer = ("the Rust side", self.release) if not rust_sends else (self.release, "the Rust side")
                self.add("DIFF-062", subj, f"{rn}.{rf.name} ({self.where(subj)}): {reader} reads {rf.type}, {writer} "
                                           f"sends {sf.type}: {who} cannot decode {self.frame(name)} payloads "
                                           f"holding it", d, rust_sends, sf.type, rf.type)
        if rust_sends:
            for rf in r.fields:
                if rf.note and "Rust f32" in rf.note and rf.type.startswith("float"):
                    subj = f"{name}.{rf.name}"
                    self.add("DIFF-069", subj, f"{rn}.{rf.name} ({self.where(subj)}) sends float32 where "
                                               f"{self.release} sends float64", d, True, "float64", "float32")

    def positions(self, name: str, p: MessageLayout, r: MessageLayout) -> None:
        """Once per array message: a field both know at another position, a position named otherwise."""
        d = p.direction
        rn = self.rust_name(name)
        rust_sends = self.sends(d)[0]
        for f in r.fields:
            pf = p.field(f.name)
            if pf is not None and pf.index != f.index:
                subj = f"{name}.{f.name}"
                first = r.fields[min(f.index, pf.index)]
                self.add("DIFF-061", subj, f"{rn}.{f.name} ({self.where(subj)}) is at position {f.index}, "
                                           f"{self.release} has it at {pf.index} (from {first.name} on, every "
                                           f"value is read from the wrong position)", d, rust_sends,
                         pf.index, f.index)
                break  # the first one shifted: the rest follow from it
        for i in range(min(len(p.fields), len(r.fields))):
            pf, rf = p.fields[i], r.fields[i]
            if pf.name != rf.name and r.field(pf.name) is None and p.field(rf.name) is None:
                subj = f"{name}.{rf.name}"
                self.add("DIFF-068", subj, f"{rn} ({self.where(subj)}) calls position {i} {rf.name!r}, "
                                           f"{self.release} {pf.name!r}: same bytes, check the meaning", d,
                         rust_sends, pf.name, rf.name)

    def array(self, name, p, r, sender, receiver, rust_sends, rn, at, who) -> None:
        d = p.direction
        s_names, r_names = [f.name for f in sender.fields], [f.name for f in receiver.fields]
        n_send, n_recv = len(s_names), len(r_names)
        required_recv = sum(1 for f in receiver.fields if f.required)
        if n_send > n_recv:
            extra = sender.fields[n_recv]
            always = extra.required
            tail = f"any {self.release.split()[1]} {self.other}'s" if not rust_sends else "a"
            scope = (f"this {self.role} cannot decode {tail} {self.frame(name)}" if always and not rust_sends
                     else f"{who} cannot decode {self.frame(name)} payloads that carry {extra.name}")
            if rust_sends:
                scope = f"{self.release} {self.other}s refuse every {self.frame(name)} this {self.role} sends"
                msg = (f"{rn} ({at}) sends {n_send} fields, {self.release} reads at most {n_recv} "
                       f"({extra.name} at {n_recv}): {scope}")
            else:
                msg = (f"{rn} ({at}) reads {n_recv} fields, {self.release} sends {n_send} "
                       f"({extra.name} at {n_recv}): {scope}")
            self.add("DIFF-060", name, msg, d, rust_sends, n_send if not rust_sends else n_recv,
                     n_recv if not rust_sends else n_send)
        elif n_send < required_recv:
            missing = receiver.fields[n_send]
            if rust_sends:
                msg = (f"{rn} ({at}) sends {n_send} fields, {self.release} requires {required_recv} "
                       f"({missing.name} at {n_send}): {self.release} {self.other}s refuse every "
                       f"{self.frame(name)} this {self.role} sends")
            else:
                msg = (f"{rn} ({at}) requires {required_recv} fields, {self.release} sends {n_send} "
                       f"({missing.name} at {n_send} is missing): this {self.role} cannot decode any "
                       f"{self.frame(name)}")
            self.add("DIFF-060", name, msg, d, rust_sends, n_send, required_recv)
        # the receiver requires a position the sender may leave out (omitted trailing defaults)
        if not rust_sends:
            optional_from = next((f.index for f in sender.fields if not f.required), len(sender.fields))
            late = [f for f in receiver.fields if f.required and f.index >= optional_from]
            if late and n_send >= required_recv:
                f = late[0]
                subj = f"{name}.{f.name}"
                self.add("DIFF-063", subj, f"{rn}.{f.name} ({self.where(subj)}) is required at position {f.index}; "
                                           f"{self.release} may end the array before it: give it #[serde(default)]",
                         d, False, False, True)

    def map(self, name, p, r, sender, receiver, rust_sends, rn, at, who) -> None:
        d = p.direction
        missing = [f.name for f in p.fields if r.field(f.name) is None]
        if missing and not rust_sends and r.note is not None and "deny_unknown_fields" in r.note:
            always = [n for n in missing if p.field(n).required]
            self.add("DIFF-071", name, f"{rn} ({at}) refuses keys it does not know, and {self.release} writes "
                                       f"{', '.join(missing)}: this {self.role} cannot decode "
                                       f"{'any' if always else 'such a'} {self.frame(name)}", d, False,
                     missing, None)
        if missing and (not rust_sends or all(not f.required for f in p.fields if f.name in missing)):
            verb = "sends" if rust_sends else "reads"
            self.add("DIFF-070", name, f"{rn} ({at}) {verb} {len(p.fields) - len(missing)} of {self.release}'s "
                                       f"{len(p.fields)} keys; not copied: {', '.join(missing)}", d, rust_sends,
                     len(p.fields), len(p.fields) - len(missing))
        for f in receiver.fields:
            if not f.required:
                continue
            sf = sender.field(f.name)
            omitted = sf is not None and rust_sends and sf.note is not None and "skip_serializing_if" in sf.note
            may_omit = sf is not None and not rust_sends and not sf.required and p.omit_defaults
            if sf is None or omitted or may_omit:
                subj = f"{name}.{f.name}"
                why = ("never sends it" if sf is None else "leaves it out when it holds its default"
                       if may_omit else "leaves it out (skip_serializing_if)")
                if rust_sends:
                    msg = (f"{rn} ({at}) {why.replace('never sends it', 'lacks ' + f.name)}: "
                           f"{self.release} {self.other}s require {f.name} and refuse "
                           f"{'every' if sf is None else 'such a'} {self.frame(name)} this {self.role} sends")
                else:
                    msg = (f"{rn}.{f.name} ({self.where(subj)}) is required; {self.release} {why}: this "
                           f"{self.role} cannot decode {'any' if sf is None else 'such a'} "
                           f"{self.release.split()[1]} {self.other}'s {self.frame(name)}")
                self.add("DIFF-063", subj, msg, d, rust_sends, None, f.name)

    # ------------------------------------------------------------------ enums, types, methods
    def enums(self) -> None:
        for name, pe in self.py.enums.items():
            re_ = self.rs.enums.get(name)
            if re_ is None:
                continue
            d = "engine->frontend" if name == "FinishReason" else "both"
            rust_sends, rust_reads = self.sends(d)
            for member, value in pe.values.items():
                rv = re_.values.get(member)
                subj = f"enum {name}.{member}"
                if rv is not None and rv != value:
                    self.add("DIFF-064", subj, f"{name}::{member} ({self.where(subj)}) is {rv} in Rust, {value} in "
                                               f"{self.release}: the peers read each other's values as other "
                                               f"members", d, rust_sends, value, rv)
                elif rv is None and rust_reads and value not in re_.values.values():
                    self.add("DIFF-064", subj, f"Rust {name} ({self.where(f'enum {name}')}) has no member for "
                                               f"{member} = {value}: this {self.role} cannot decode it", d, False,
                             value, None)
            for member, rv in re_.values.items():
                if member not in pe.values and rv not in pe.values.values() and rust_sends:
                    subj = f"enum {name}.{member}"
                    self.add("DIFF-064", subj, f"{name}::{member} = {rv} ({self.where(subj)}) is no value of "
                                               f"{self.release}'s {name}", d, True, None, rv)

    def request_types(self) -> None:
        py = {rt.byte: rt.name for rt in self.py.request_types}
        for rt in self.rs.request_types:
            subj = f"request type 0x{rt.byte}"
            if py.get(rt.byte) not in (None, rt.name) or (rt.byte not in py and self.role == "frontend"):
                now = py.get(rt.byte)
                meaning = f"means {now} to {self.release}" if now else f"is no request type of {self.release}"
                self.add("DIFF-065", subj, f"{rt.name} = 0x{rt.byte} ({self.where(subj)}) {meaning}",
                         "frontend->engine", self.role == "frontend", now, rt.name)
        for rt in self.rs.request_types:
            match = next((b for b, n in py.items() if n == rt.name), None)
            if match is not None and match != rt.byte:
                subj = f"request type 0x{rt.byte}"
                if not any(f.subject == subj for f in self.findings):
                    self.add("DIFF-065", subj, f"{rt.name} is 0x{rt.byte} in Rust ({self.where(subj)}), 0x{match} in "
                                               f"{self.release}", "frontend->engine", self.role == "frontend",
                             match, rt.byte)

    def utility(self) -> None:
        if self.role != "frontend":
            return
        for name, um in self.rs.utility_methods.items():
            subj = f"utility {name}"
            pm = self.py.utility_methods.get(name)
            if pm is None or not pm.handled:
                self.add("DIFF-066", subj, f"the Rust frontend calls {name} ({self.where(subj)}), which "
                                           f"{self.release} engines do not define: every call fails",
                         "frontend->engine", True, None, name)
                continue
            if um.params is None or pm.params is None:
                continue
            k, n = len(um.params), len(pm.params)
            r = sum(1 for x in pm.params if x.required)
            if not r <= k <= n:
                self.add("DIFF-067", subj, f"the Rust frontend calls {name} with {k} argument(s) "
                                           f"({self.where(subj)}); {self.release} engines take {r}"
                                           f"{'' if r == n else f' to {n}'}: every call fails",
                         "frontend->engine", True, n, k)

    def run(self) -> list[Finding]:
        self.messages()
        self.enums()
        self.request_types()
        self.utility()
        old, new = (self.py, self.rs) if self.rust_is_new else (self.rs, self.py)
        out = []
        for f in self.findings:
            where = location(self.rs, f.subject)
            if f.subject == "layout scope":  # the first thing listed that a side locates, Rust first
                names = [n for side in ((f.new, f.old) if self.rust_is_new else (f.old, f.new)) for n in side or ()]
                where = next((loc for n in names for loc in (location(self.rs, n), location(self.py, n)) if loc),
                             None)
            f = replace(f, clause=clause_for(f.rule.id, f.subject, old, new))
            if where is not None:
                f = replace(f, file=where[0], line=where[1])
            out.append(f)
        return out


def is_peer_pair(old: Layout, new: Layout) -> bool:
    """Whether exactly one side was read from Rust: compare peers, not releases."""
    return (rust_role(old) is None) != (rust_role(new) is None)


def diff_peer(old: Layout, new: Layout) -> list[Finding]:
    """Findings between a Python layout and a Rust crate's, one side each (either order)."""
    return _Peer(old, new).run()
