"""Clause coverage: for every spec clause, the cases that drive a peer into it, or why none can.

This module is the one home of that table. A clause is *covered* in a role when a case of that
role cites it (:mod:`ecp.conformance.registry`), or when :data:`REASONS` states why the clause
cannot be observed on the wire in that role and what checks it instead. A reason is only for
what truly cannot be driven: a rule with no bytes of its own (no authentication, one pinned
version), a property that is not a message (who binds a socket), or a failure a conforming peer
cannot be made to have on purpose. Anything a harness can provoke gets a case.

:func:`clause_rows` joins the spec's clauses, the cases and the reasons (and, given a run's
results, each case's outcome) into the coverage matrix that ``ecp conformance list --matrix``
prints and every report format renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ecp.spec import clauses as spec_clauses

from .registry import ROLE_CATALOGS, Case

ROLES: tuple[str, ...] = tuple(ROLE_CATALOGS)


@dataclass(frozen=True)
class Reason:
    """Why a clause has no case in ``roles``, and what checks it instead."""

    roles: tuple[str, ...]
    why: str
    checked_by: str


#: clause -> the roles it binds, where its cases do not say it (a clause that binds both roles but
#: has a case in one only is listed here, so the other role's gap shows)
_BOTH = ("engine", "frontend")
_ENG = ("engine",)
_FE = ("frontend",)

BINDS: dict[str, tuple[str, ...]] = {
    # the engine sends, the frontend receives (or the reverse): each side has its own obligation
    **{c: _BOTH for c in ("ECP-OUT-8", "ECP-OUT-4", "ECP-OUT-5", "ECP-FRAME-3", "ECP-FRAME-4", "ECP-FRAME-5",
                          "ECP-FRAME-6", "ECP-FRAME-7", "ECP-FRAME-8", "ECP-FRAME-10", "ECP-COMPAT-2",
                          "ECP-DP-5")},
    **{c: _ENG for c in ("ECP-FRAME-2", "ECP-REQ-7", "ECP-REJECT-5", "ECP-ROB-5", "ECP-HS-13")},
    **{c: _FE for c in ("ECP-HS-7", "ECP-HS-9", "ECP-HS-10", "ECP-HS-11", "ECP-HS-12", "ECP-FRAME-1",
                        "ECP-REQ-8", "ECP-OUT-9", "ECP-ABORT-1", "ECP-UTIL-6", "ECP-UTIL-10", "ECP-UTIL-12")},
}

REASONS: dict[str, Reason] = {
    "ECP-SOCK-1": Reason(
        _BOTH, "Who binds and who connects is not a message: there is no frame to check.",
        "Every case: in the engine role the harness binds every socket, so an engine that binds instead of "
        "connecting never completes a handshake and every case fails; in the frontend role the harness's "
        "engines only connect, so a frontend that does not bind is never reached."),
    "ECP-SOCK-5": Reason(
        _BOTH, "A socket's high-water marks are local settings with no bytes on the wire.",
        "Their effect is: the burst cases (FE-ABORT-3, 2,000 streams dropped at once; ENG-ABORT-3, one ABORT "
        "with 1,024 ids) fail when a peer drops messages of a burst."),
    "ECP-OUT-8": Reason(
        _ENG, "A conforming engine has no fatal failure a frontend can provoke on purpose.",
        "Each engine-role case: an engine that dies without ENGINE_CORE_DEAD is reported CRASH (which cites "
        "this clause), one that announces its death is a FAIL starting 'fail-closed:'; the reference "
        "engine's fatal path is tested in tests/engine/ and tests/reliability/."),
    "ECP-SEC-2": Reason(
        _BOTH, "A default address is a property of a peer's configuration, not of the protocol's bytes.",
        "The reference peers' defaults (127.0.0.1 and ipc) are set in their option parsers and exercised by "
        "tests/client/test_handshake.py and tests/frontend/test_server_socket.py."),
    "ECP-SEC-3": Reason(
        _BOTH, "The rule is an absence: the protocol carries no credentials or encryption to check.",
        "Treating every frame as untrusted is checked by the cases of ECP-FRAME-9 (ENG-ROB-5), ECP-SEC-1 "
        "(ENG-SEC-1..3) and ECP-ROB-1 (ENG-ROB-1..4)."),
    "ECP-COMPAT-1": Reason(
        _BOTH, "There is no version field or negotiation on the wire to observe.",
        "The layout gate: tests/diff/test_spec_matches_vllm.py compares ecp.spec's types with the layout "
        "extracted from the vLLM 0.33.0 wheel, and every case decodes with that one layout."),
    "ECP-COMPAT-3": Reason(
        _BOTH, "An umbrella over rules that each have their own clause; it adds no behaviour of its own.",
        "The clauses it names: full-length arrays ECP-FRAME-3, the result envelope ECP-UTIL-2, a terminal "
        "output per request ECP-OUT-1, a non-empty ready payload ECP-HS-4, tolerant receivers ECP-FRAME-4, "
        "ECP-FRAME-5 and ECP-COMPAT-2, each with its cases."),
    "ECP-ABORT-4": Reason(
        _ENG, "A MAY with both choices conforming: an engine that emits an ABORT output and one that does not "
        "both pass, so no engine can fail it.", "The abort cases (ENG-ABORT-1..4) accept either."),
    "ECP-OUT-7": Reason(
        _ENG, "A MAY for the engine: sending scheduler_stats or not are both conforming.",
        "When an engine sends them the recording mode decodes them on every message."),
    "ECP-HS-12": Reason(
        _FE, "A MAY with both choices conforming: a frontend that accepts an empty ready payload (vLLM's Python "
        "frontend) and one that rejects it (vllm-rs) both pass, so no frontend can fail it; the MUST it carries "
        "binds engines, which never send one.",
        "Engines: ENG-HS-3 requires every required key of the ready payload. Frontends: FE-HS-2/3 check the "
        "payloads engines do send; the reference client's acceptance of an empty one is "
        "tests/client/test_handshake.py."),
    "ECP-FRAME-8": Reason(
        _FE, "A frontend sends tensors only inside prompt embeddings or multimodal inputs, which need a model "
        "of the frontend's own (its hidden size, its processor) and an option it may not have "
        "(vLLM: --enable-prompt-embeds); a text-only frontend, the reference one included, has no tensor to "
        "place in an aux frame.",
        "The one encoder of ecp.spec places them (tests/spec/test_codec.py: a 400-byte multimodal tensor goes "
        "to an aux frame, a 4-byte one inline); receivers of both forms: FE-OUT-6 (frontends) and ENG-OUT-10 "
        "for what engines send."),
    "ECP-UTIL-13": Reason(
        _FE, "A MAY with both choices conforming: a frontend that bounds its utility waits and one that waits "
        "without a deadline both pass, so no frontend can fail it.",
        "What a bound must never do is answer early: FE-OUT-3 holds one engine's answer back and fails a frontend "
        "that answers before it (ECP-UTIL-7), whether it bounds its waits (ecp serve: 300 s) or not (vLLM 0.33)."),
    "ECP-UTIL-11": Reason(
        _FE, "A MAY listing three conforming behaviours; none of them can be failed.",
        "ECP-UTIL-4, ECP-UTIL-5 and ECP-UTIL-7 (FE-UTIL-1..4) check the methods whose DP behaviour is fixed."),
}


@dataclass
class ClauseRow:
    """One row of the coverage matrix."""

    clause: str
    level: str
    title: str
    binds: tuple[str, ...]
    #: role -> case ids citing this clause
    cases: dict[str, list[str]] = field(default_factory=dict)
    reason: Reason | None = None
    #: case id -> outcome, for the cases a run ran (empty without results)
    outcomes: dict[str, str] = field(default_factory=dict)

    @property
    def missing_roles(self) -> list[str]:
        """Roles this clause binds with neither a case nor a reason."""
        reasoned = self.reason.roles if self.reason else ()
        return [r for r in self.binds if not self.cases.get(r) and r not in reasoned]

    @property
    def status(self) -> str:
        """``case`` (every bound role has a case), ``reason`` (some role is covered by a reason only),
        or ``missing``."""
        if self.missing_roles:
            return "missing"
        if self.reason and any(not self.cases.get(r) for r in self.binds):
            return "reason"
        return "case"

    @property
    def verdict(self) -> str:
        """The worst outcome of this clause's cases in a run ('' when none ran)."""
        order = ("ERROR", "CRASH", "FAIL", "TIMEOUT", "XPASS", "XFAIL", "UNSUPPORTED", "PASS")
        seen = [o for o in self.outcomes.values()]
        for o in order:
            if o in seen:
                return o
        return seen[0] if seen else ""

    def to_dict(self) -> dict[str, Any]:
        return {"clause": self.clause, "level": self.level, "title": self.title, "binds": list(self.binds),
                "cases": {r: list(v) for r, v in self.cases.items()}, "status": self.status,
                "missing_roles": self.missing_roles,
                "reason": None if self.reason is None else {"roles": list(self.reason.roles),
                                                            "why": self.reason.why,
                                                            "checked_by": self.reason.checked_by},
                "outcomes": dict(self.outcomes), "verdict": self.verdict}


def clause_rows(cases: Iterable[Case], outcomes: Mapping[str, str] | None = None,
                roles: Iterable[str] | None = None) -> list[ClauseRow]:
    """The coverage matrix: one row per live clause, in catalogue order.

    ``cases`` should be every role's cases (which roles a clause binds is read off them);
    ``outcomes`` maps case id -> outcome of a run; ``roles`` limits the matrix to those roles (a
    clause binding only other roles is then left out)."""
    want = tuple(roles) if roles is not None else ROLES
    by_clause: dict[str, dict[str, list[str]]] = {}
    for c in cases:
        for r in c.roles:
            for cited in c.clauses:
                by_clause.setdefault(cited, {}).setdefault(r, []).append(c.id)
    rows = []
    for cl in spec_clauses._CLAUSES:
        if cl.withdrawn:
            continue
        reason = REASONS.get(cl.id)
        binds = BINDS.get(cl.id) or tuple(dict.fromkeys(
            [*by_clause.get(cl.id, {}), *(reason.roles if reason else ())])) or want
        binds = tuple(r for r in binds if r in want)
        if not binds:
            continue
        if reason is not None and not set(reason.roles) & set(binds):
            reason = None
        row = ClauseRow(cl.id, cl.level, cl.title, binds,
                        {r: ids for r, ids in by_clause.get(cl.id, {}).items() if r in binds}, reason)
        if outcomes:
            row.outcomes = {cid: outcomes[cid] for ids in row.cases.values() for cid in ids if cid in outcomes}
        rows.append(row)
    return rows


def gaps(rows: Iterable[ClauseRow], level: str = "MUST") -> list[ClauseRow]:
    """The rows at ``level`` with a bound role that has neither a case nor a reason."""
    return [r for r in rows if r.level == level and r.status == "missing"]


def summary(rows: list[ClauseRow]) -> dict[str, Any]:
    """Counts for a report's summary line."""
    out: dict[str, Any] = {"clauses": len(rows)}
    for status in ("case", "reason", "missing"):
        out[status] = sum(r.status == status for r in rows)
    out["must_missing"] = len(gaps(rows, "MUST"))
    out["should_may_missing"] = len(gaps(rows, "SHOULD")) + len(gaps(rows, "MAY"))
    ran = [r for r in rows if r.outcomes]
    out["clauses_run"] = len(ran)
    out["clauses_passing"] = sum(r.verdict in ("PASS", "XFAIL") for r in ran)
    out["clauses_unsupported"] = sum(r.verdict == "UNSUPPORTED" for r in ran)
    return out


def summary_line(rows: list[ClauseRow]) -> str:
    s = summary(rows)
    line = (f"coverage: {s['clauses']} clauses: {s['case']} with cases, {s['reason']} with a stated reason, "
            f"{s['missing']} missing")
    if s["clauses_run"]:
        failing = s["clauses_run"] - s["clauses_passing"] - s["clauses_unsupported"]
        line += f"; of {s['clauses_run']} clauses run: {s['clauses_passing']} pass, {failing} fail"
        if s["clauses_unsupported"]:
            line += f", {s['clauses_unsupported']} unsupported"
    return line


def format_matrix(rows: list[ClauseRow], roles: Iterable[str] = ROLES) -> list[str]:
    """The matrix as console lines: clause, level, then per role its cases (with outcomes) or the reason."""
    roles = tuple(roles)
    lines = [f"{'clause':<14} {'level':<6} " + " ".join(f"{r:<34}" for r in roles) + " title"]
    for row in rows:
        cells = []
        for r in roles:
            if r not in row.binds:
                cells.append("-")
            elif row.cases.get(r):
                cells.append(" ".join(f"{c}={row.outcomes[c]}" if c in row.outcomes else c for c in row.cases[r]))
            elif row.reason and r in row.reason.roles:
                cells.append("(reason)")
            else:
                cells.append("MISSING")
        lines.append(f"{row.clause:<14} {row.level:<6} " + " ".join(f"{c:<34}" for c in cells) + f" {row.title}")
    return lines
