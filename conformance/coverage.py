"""Clause and sentence coverage: for every spec clause and every normative sentence, the cases that
drive a peer into it, or why none can.

This module is the one home of that table. A clause is *covered* in a role when a case of that
role cites it (:mod:`ecp.conformance.registry`), or when :data:`REASONS` states why the clause
cannot be observed on the wire in that role and what checks it instead. A *sentence*
(``ECP-HS-5.2``, :func:`ecp.spec.clauses.sentences`) is covered in a role only when a case of
that role names it in ``checks``, or when a reason keyed by the sentence, or by its clause, covers
that role: citing a clause never covers its sentences, so a case that checks one statement of a
clause does not hide the statements it never exercises. A reason is only for
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
    """Why a clause (keyed by clause id) or one sentence (keyed by sentence id) has no case in
    ``roles``, and what checks it instead. A clause's reason covers each of its sentences."""

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
    "ECP-SEC-4": Reason(
        _BOTH, "Which producers an engine allows is its operator's configuration (an allow-list the harness "
        "cannot read), and a refused producer is an absence: no connection to observe from the wire.",
        "The reference engine: tests/frontend/test_kv_trust.py puts decoy listeners at every form of address a "
        "request can name (host/port, tcp://, ipc://, an ipc path climbing out of the allowed directory, "
        "inproc://) and checks that none is connected to, that each request is answered with a 400 naming "
        "kv_transfer_params and that each refusal is logged once, while the allowed producer gets its notice; "
        "campaigns/hostile_bounds.py addresses repeats it with 1,000 addresses and decoys listening."),
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

    # ------------------------------------------------------------- sentences (keyed by sentence id)
    "ECP-HS-1.2": Reason(
        _FE, "The scripted engines say HELLO with the keys vLLM 0.33's engine sends; the frontend role has no "
        "engine that adds unknown keys.",
        "ecp.spec's one HELLO decoder: tests/spec/test_codec.py decodes the Rust mock engine's HELLO with its "
        "extra parallel_config_hash key."),
    "ECP-HS-2.2": Reason(
        _ENG, "The harness sends only well-formed INITs; a malformed one is a handshake it cannot recover "
        "from to judge anything else in the launch.",
        "ecp.spec's INIT type refuses such an INIT while decoding (the reference engine decodes with it): "
        "tests/spec/test_codec.py::test_init_with_unusable_addresses_is_refused."),
    "ECP-HS-2.3": Reason(
        _FE, "Coordinated (MoE) DP needs a MoE model at the frontend; the frontend role's engines are "
        "scripted, so a non-empty parallel_config cannot be provoked.",
        "FE-HS-1 decodes every INIT with ecp.spec's EngineHandshakeMetadata (parallel_config a map)."),
    "ECP-HS-1.5": Reason(
        _FE, "The MAY is a frontend's choice about engines whose local/headless do not fit the deployment it "
        "was started for; a scripted engine cannot tell which deployment the frontend under test expects.",
        "ENG-HS-1 checks the two MUSTs of the values on the engine side."),
    "ECP-DP-5.6": Reason(
        _ENG, "How rank 0 learns that every rank is idle has no bytes on the ECP wire; both choices conform.",
        "ENG-DP-5 passes both: the reference engine (rank 0 reports its own idleness) and the raw-frame test "
        "engine (its ranks agree first), tests/conformance/test_engine_role.py."),
    "ECP-ROB-1.4": Reason(
        _FE, "A conforming frontend never sends a malformed UTILITY, so an engine's failure answer to one "
        "cannot be provoked in the frontend role.",
        "ecp.spec's utility machine (state REFUSED) and ecp.spec.recover_utility: tests/spec/test_machine.py; "
        "the harness itself takes such an answer as the reply to the call id it sent (ENG-ROB-2, ENG-ROB-4)."),
    "ECP-HS-6.2": Reason(
        _FE, "The gate is structural: the scripted engines wait for the coordinator's READY before their own, "
        "so a coordinator that never publishes it fails every launch with a coordinator.",
        "FE-DP-1 (a launch with a coordinator) and tests/conformance_frontend/test_waves.py."),
    "ECP-HS-8.1": Reason(
        _FE, "A stage's bound is minutes (vLLM: 600 s for the ready payload), longer than any case.",
        "What an unbounded stage must never cause, serving before READY, is FE-HS-4 (ECP-HS-8.2); the reference "
        "client's bounds: tests/client/test_handshake.py."),
    "ECP-FRAME-2.2": Reason(
        _FE, "Not distinguishable on the wire: a receiver that decodes the sentinel as msgpack gets a decode "
        "error, on which ECP-ROB-3 fails it closed all the same.",
        "FE-ROB-1 and FE-OUT-3 (ENGINE_CORE_DEAD reaches the frontend; it must fail closed)."),
    "ECP-FRAME-5.2": Reason(
        _BOTH, "Every msgpack decoder (vLLM's msgspec, vllm-rs's rmp) reads a wider integer form, so a peer "
        "that writes one interoperates and the harness's decoders cannot tell.",
        "ecp.spec's encoder: tests/spec/test_vectors.py re-encodes vLLM's Python bytes byte-identically."),
    "ECP-FRAME-6.3": Reason(
        _ENG, "A receiver that misreads a present default as a request for it changes no observable output "
        "with the model-free engines the suite can assume.",
        "Nothing on a peer yet; ENG-REQ-13 sends vllm-rs's ADD, which carries default values (top_p, "
        "min_p, penalties) explicitly, and fails an engine that does not serve it as sent."),
    **{sid: Reason(
        _ENG, "No case asks an engine for prompt logprobs yet: the model-free engines the suite runs against (the "
        "reference engine's synthetic executor, vLLM's fake executor) compute none, so there is no tensor to judge.",
        "tests/spec/test_vectors.py::test_tensor_vectors_hold_vllms_logprob_dtypes_inline_and_in_aux_frames reads "
        "vLLM 0.33's own prompt-logprob bytes (torch names int32/float32/int32, P - 1 rows, inline and in aux "
        "frames) with ecp.spec's decoder.") for sid in ("ECP-OUT-10.4", "ECP-OUT-10.5")},
    "ECP-HS-2.4": Reason(
        _BOTH, "The harness sends only well-formed INITs (engine role); rejecting an INIT is an engine's act, "
        "which a frontend cannot be driven into (frontend role).",
        "ecp.spec's INIT type refuses such an INIT while decoding: "
        "tests/spec/test_codec.py::test_init_with_unusable_addresses_is_refused."),
    "ECP-FRAME-7.3": Reason(
        _BOTH, "No peer of the suite can be made to send an aux frame without a tensor: ecp.spec's encoder appends "
        "a frame only for a tensor it places there; a receiver's choice (ignore or refuse) is free.",
        "ecp.spec's encoder: tests/spec/test_codec.py (aux frames only for tensors of 256 bytes or more)."),
    "ECP-REQ-1.5": Reason(
        _FE, "A rule for engines (the frontend role's engines are scripted).",
        "The reference engine's scheduler queues what max_num_seqs does not admit: tests/engine."),
    "ECP-UTIL-12.3": Reason(
        _FE, "A rule for engines; a conforming frontend never sends a negative call id.",
        "ENG-ROB-4 sends a UTILITY with call id -5 and fails an engine that answers it with a result."),
    **{sid: Reason(
        roles, "A MAY whose choices all conform: no peer can fail it.", checked_by)
       for sid, roles, checked_by in (
           ("ECP-HS-1.6", _ENG, "ENG-HS-1 accepts either pair and checks the two MUSTs of ECP-HS-1."),
           ("ECP-HS-5.3", _ENG, "ENG-DP-1 checks that a DP > 1 engine sends a hash (ECP-HS-5.2), whatever string."),
           ("ECP-HS-8.3", _BOTH, "Nothing on the wire: an engine's own waits show only as its start-up time."),
           ("ECP-REQ-1.4", _BOTH, "The harness sends n = 1 (ECP-REQ-1.1); the frontend role's FE-REQ cases decode "
            "every ADD."),
           ("ECP-REQ-4.2", _ENG, "Frontends never send max_tokens nil; ENG-REQ-1 checks max_tokens as sent."),
           ("ECP-REQ-4.3", _ENG, "ENG-REQ-5 checks a prompt longer than max_model_len is refused."),
           ("ECP-OUT-10.3", _ENG, "ENG-OUT-9 checks the logprob tensors of an explicit K."),
           ("ECP-UTIL-3.2", _ENG, "ENG-UTIL-3 (an unknown method) and ENG-ROB-4 (a UTILITY whose args are a str)."),
           ("ECP-UTIL-3.3", _ENG, "ENG-UTIL-1 checks the result envelope of what an engine does serve."),
           ("ECP-UTIL-8.8", _ENG, "ENG-UTIL-4 checks the tags an engine puts to sleep and wakes."),
           ("ECP-UTIL-8.9", _ENG, "ENG-UTIL-6 checks what mode abort does to running requests."),
           ("ECP-UTIL-8.10", _ENG, "ENG-UTIL-4 checks the tags of level 1."),
           ("ECP-DP-4.3", _ENG, "ENG-DP-2 sends START_DP_WAVE without a coordinator and checks the engine serves."),
       )},
    "ECP-FRAME-11.3": Reason(
        _BOTH, "A statement about the bytes of spec/vectors (which of them are vLLM's choice), not a behaviour a "
        "peer shows on the wire; what a peer writes is ECP-FRAME-11.1's (ENG-REQ-11, FE-OUT-5).",
        "tests/spec/test_second_encoder.py: every vector re-encoded by the msgpack package differs only as the "
        "table allows, and ecp.spec decodes every allowed variant to the vector's value."),
    "ECP-FRAME-6.4": Reason(
        _BOTH, "A rule for tools that compare bytes, not a behaviour of a peer on the wire.",
        "tests/spec/test_vectors.py compares the vllm-rs (fixmap) and Python (map16) forms by meaning."),
    "ECP-FRAME-7.2": Reason(
        _BOTH, "No case sends a tensor whose buffer disagrees with its shape yet: engines receive no tensors "
        "from the harness (see ECP-FRAME-8.2) and the frontend role's tensors are well formed.",
        "ecp.spec's tensor decoder refuses the mismatch: tests/spec/test_codec.py; ENG-OUT-9 checks the "
        "sizes an engine sends."),
    "ECP-FRAME-8.2": Reason(
        _ENG, "An engine receives tensors only in prompt embeddings or multimodal inputs, which need its model "
        "(hidden size, processor); the harness sends text prompts.",
        "ecp.spec's decoder reads both forms (tests/spec/test_codec.py); FE-OUT-6 checks frontends."),
    "ECP-REQ-1.2": Reason(
        _FE, "A frontend sends prompt_embeds only with an option and a model of its own (vLLM: "
        "--enable-prompt-embeds); the frontend role's frontends are text-only.",
        "FE-REQ-1 decodes every ADD with ecp.spec's EngineCoreRequest, whose prompt_embeds is a tensor."),
    "ECP-OUT-6.1": Reason(
        _ENG, "A mixed message is decoded by the harness like any other; no case provokes one, and only DP "
        "control on a client's socket is what vLLM's frontends reject.",
        "Only its consequence that vLLM's frontends need: ENG-DP-5 (DP control never on a client's socket)."),
    "ECP-ABORT-8.2": Reason(
        _FE, "A ZeroMQ send to a live peer does not fail; the harness cannot make one engine's socket refuse a "
        "send on purpose.",
        "tests/client/test_abort.py::test_explicit_abort_survives_a_send_failure_to_one_engine."),
    "ECP-UTIL-2.2": Reason(
        _FE, "No scripted engine sends a bare value where the envelope belongs yet.",
        "ecp.spec's decoder raises on it: "
        "tests/spec/test_codec.py::test_finish_reason_out_of_range_and_bare_utility_result."),
    "ECP-UTIL-2.3": Reason(
        _FE, "No scripted engine sends a non-nil type_info; receivers ignoring it is not provoked yet.",
        "Only the sender's half: ENG-UTIL-1 checks that engines send it nil."),
    "ECP-DP-4.2": Reason(
        _ENG, "Whether an engine started running on a START_DP_WAVE shows only in the DP control it sends "
        "later, which vLLM sends for MoE models only.",
        "ENG-DP-2 (START_DP_WAVE accepted, engines keep serving) and ENG-DP-6 (a newer wave is adopted)."),
    "ECP-HTTP-4.3": Reason(
        _FE, "It binds clients, the harness included: the harness reads /v1/models once per launch before its "
        "first request.",
        "conformance/frontend/http_driver.py (HttpDriver.models, HttpDriver.model), which every frontend-role "
        "case drives."),
    "ECP-HTTP-6.1": Reason(
        _FE, "No case checks the form of a response's id yet; the abort cases use it as the external id.",
        "FE-ABORT-8 aborts by the response id and fails when that does not end the stream."),
    "ECP-HTTP-6.4": Reason(
        _FE, "A permission: resolving more ids and resolving external ids only both conform.",
        "FE-ABORT-8 aborts by the external id, which every frontend resolves."),
    "ECP-HTTP-6.5": Reason(
        _FE, "No case aborts an id that names nothing yet.",
        "ecp serve: tests/frontend/test_http.py lists such ids as not found."),
    "ECP-ABORT-5.3": Reason(
        _FE, "A MAY with both choices conforming: a frontend that yields to its loop before a drain and one "
        "that does not both pass.", "FE-ABORT-4..6 bound the ABORT count either way (ECP-ABORT-5.1)."),
    "ECP-HTTP-7.3": Reason(
        _FE, "An optional route form (FastDeploy's); FE-ABORT-8/9 drive whichever abort route a frontend serves.",
        "ecp serve's route, its abort_all and its 400: tests/frontend/test_http.py."),
}


class _Covered:
    """What a clause row and a sentence row share: the roles a requirement binds, the cases
    covering each role, and the reason standing in for a missing case."""

    level: str
    binds: tuple[str, ...]
    cases: dict[str, list[str]]
    reason: Reason | None
    #: the status of a row every bound role of which has a case
    covered = "case"

    @property
    def missing_roles(self) -> list[str]:
        """Roles this requirement binds with neither a case nor a reason."""
        reasoned = self.reason.roles if self.reason else ()
        return [r for r in self.binds if not self.cases.get(r) and r not in reasoned]

    @property
    def status(self) -> str:
        """:attr:`covered` (every bound role has a case), ``reason`` (some role is covered by a
        reason only), or ``missing``."""
        if self.missing_roles:
            return "missing"
        if any(not self.cases.get(r) for r in self.binds):
            return "reason"
        return self.covered

    def _reason_dict(self) -> dict[str, Any] | None:
        return None if self.reason is None else {"roles": list(self.reason.roles), "why": self.reason.why,
                                                 "checked_by": self.reason.checked_by}


def _binding(reason: Reason | None, binds: tuple[str, ...]) -> Reason | None:
    """A reason counts only for a requirement binding one of its roles."""
    return reason if reason is not None and set(reason.roles) & set(binds) else None


def gaps(rows: Iterable[_Covered], level: str = "MUST") -> list[Any]:
    """The rows (clauses or sentences) at ``level`` with a bound role that has neither a case
    nor a reason."""
    return [r for r in rows if r.level == level and r.status == "missing"]


def _counts(rows: list[Any], key: str, covered: str) -> dict[str, Any]:
    out: dict[str, Any] = {key: len(rows)}
    for status in (covered, "reason", "missing"):
        out[status] = sum(r.status == status for r in rows)
    out["must_missing"] = len(gaps(rows, "MUST"))
    out["should_may_missing"] = len(gaps(rows, "SHOULD")) + len(gaps(rows, "MAY"))
    return out


@dataclass
class ClauseRow(_Covered):
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
                "missing_roles": self.missing_roles, "reason": self._reason_dict(),
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
        row = ClauseRow(cl.id, cl.level, cl.title, binds,
                        {r: ids for r, ids in by_clause.get(cl.id, {}).items() if r in binds}, _binding(reason, binds))
        if outcomes:
            row.outcomes = {cid: outcomes[cid] for ids in row.cases.values() for cid in ids if cid in outcomes}
        rows.append(row)
    return rows


def summary(rows: list[ClauseRow]) -> dict[str, Any]:
    """Counts for a report's summary line."""
    out = _counts(rows, "clauses", ClauseRow.covered)
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


# ----------------------------------------------------------------------------- sentences
#: sentence -> the roles it binds, where they differ from its clause's (a receiver's rule in a
#: clause whose other sentences bind the sender)
SENTENCE_BINDS: dict[str, tuple[str, ...]] = {
    # the receiver of HELLO, INIT, SamplingParams, an ADD, an output, a utility reply
    "ECP-HS-1.2": _FE, "ECP-HS-2.2": _ENG, "ECP-FRAME-4.2": _ENG, "ECP-FRAME-6.2": _ENG, "ECP-FRAME-6.3": _ENG,
    "ECP-FRAME-2.2": _FE, "ECP-UTIL-2.2": _FE,
    # the sender of INIT, READY, the ready payload, DP control, a tensor in an ADD
    "ECP-HS-2.3": _FE, "ECP-HS-4.3": _ENG, "ECP-HS-5.2": _ENG, "ECP-OUT-6.1": _ENG, "ECP-OUT-8.1": _ENG,
    "ECP-DP-5.1": _FE, "ECP-DP-5.2": _ENG, "ECP-DP-5.3": _ENG, "ECP-DP-5.4": _ENG, "ECP-REQ-1.2": _FE,
    "ECP-DP-5.5": _ENG, "ECP-DP-5.6": _ENG, "ECP-OUT-5.2": _ENG, "ECP-OUT-5.3": _ENG,
    "ECP-FRAME-8.2": _BOTH,
    # what a frontend (or its coordinator) does with what it received
    # a release's own shapes: the engine's part, the frontend's part
    "ECP-COMPAT-4.2": _ENG, "ECP-COMPAT-4.3": _ENG, "ECP-COMPAT-4.4": _FE,
    "ECP-HS-6.2": _FE, "ECP-SOCK-2.3": _FE, "ECP-HS-1.5": _FE, "ECP-ROB-1.4": _FE, "ECP-FRAME-8.3": _FE, "ECP-REQ-1.3": _ENG,
}


@dataclass
class SentenceRow(_Covered):
    """One row of the sentence coverage: a normative sentence, the cases that check it, or a reason."""

    sentence: str
    clause: str
    level: str
    text: str
    binds: tuple[str, ...]
    #: role -> case ids naming this sentence in ``checks``
    cases: dict[str, list[str]] = field(default_factory=dict)
    reason: Reason | None = None
    #: the id the reason is keyed by: the sentence's own, or its clause's
    reason_key: str | None = None
    covered = "check"

    def to_dict(self) -> dict[str, Any]:
        reason = self._reason_dict()
        return {"sentence": self.sentence, "clause": self.clause, "level": self.level, "text": self.text,
                "binds": list(self.binds), "cases": {r: list(v) for r, v in self.cases.items()},
                "status": self.status, "missing_roles": self.missing_roles,
                "reason": None if reason is None else {"key": self.reason_key, **reason}}


def sentence_rows(cases: Iterable[Case], roles: Iterable[str] | None = None) -> list[SentenceRow]:
    """The sentence coverage: one row per numbered sentence whose clause binds one of ``roles``.

    A sentence binds its clause's roles (:func:`clause_rows`, :data:`BINDS`) unless
    :data:`SENTENCE_BINDS` says otherwise, and every role of a case that names it."""
    cases = list(cases)
    want = tuple(roles) if roles is not None else ROLES
    clause_binds = {row.clause: row.binds for row in clause_rows(cases)}
    by_sentence: dict[str, dict[str, list[str]]] = {}
    for c in cases:
        for r in c.roles:
            for sid in c.checks:
                by_sentence.setdefault(sid, {}).setdefault(r, []).append(c.id)
    rows = []
    for sid, s in spec_clauses.sentences().items():
        binds = SENTENCE_BINDS.get(sid) or tuple(dict.fromkeys([*clause_binds.get(s.clause, ()),
                                                               *by_sentence.get(sid, {})]))
        binds = tuple(r for r in binds if r in want)
        if not binds:
            continue
        key = sid if sid in REASONS else s.clause if s.clause in REASONS else None
        reason = _binding(REASONS[key] if key else None, binds)
        key = key if reason is not None else None
        rows.append(SentenceRow(sid, s.clause, s.level, s.text, binds,
                                {r: ids for r, ids in by_sentence.get(sid, {}).items() if r in binds}, reason, key))
    return rows


#: the sentences at a level with a bound role that has neither a check nor a reason
sentence_gaps = gaps


def sentence_summary(rows: list[SentenceRow]) -> dict[str, Any]:
    """Counts: sentences, by status, and the MUST sentences missing per role."""
    out = _counts(rows, "sentences", SentenceRow.covered)
    must = gaps(rows, "MUST")
    out["must_missing_by_role"] = {role: sum(role in r.missing_roles for r in must)
                                   for role in ROLES if any(role in r.binds for r in rows)}
    return out


def sentence_summary_line(rows: list[SentenceRow]) -> str:
    s = sentence_summary(rows)
    per_role = ", ".join(f"{role} {n}" for role, n in s["must_missing_by_role"].items())
    return (f"sentences: {s['sentences']}: {s['check']} checked by cases, {s['reason']} with a stated reason, "
            f"{s['missing']} missing; MUST sentences without a check or reason: {s['must_missing']}"
            + (f" ({per_role})" if per_role else ""))
