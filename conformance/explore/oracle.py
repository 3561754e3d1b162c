"""What a session is judged by, besides the protocol machine that judges every frame.

The machine (recording mode) sees each frame on its own; the properties here need the whole
history of a session -- what was sent when, and in which state the session had put each rank:

* every admitted request ends exactly once (``ECP-OUT-1``; the machine sees duplicates and
  frames after a terminal, this sees the terminal that never came);
* a running request that was aborted produces nothing later than ``ABORT_GRACE_S`` after the
  ABORT left, and any terminal it gets then is ABORT (``ECP-ABORT-2``);
* a duplicate ADD, sent right behind its original's ADD, is answered with an ERROR output, or,
  where the original ended at the engine first, runs as a new request after the original's
  terminal output (``ECP-REQ-2``); neither dropped nor run beside the original;
* every ERROR output carries ``{code, message, retryable}`` and lists its id in
  ``finished_requests``, but the ERROR answering a duplicate ADD of a running request, which must
  not list it; an ERROR refusing an ADD (a prompt over ``max_model_len``, a duplicate id) says
  ``retryable: false`` unless its code is ``engine_paused`` (``ECP-OUT-5``); an ADD refused while
  generation is paused with mode abort or wait gets ``engine_paused``, ``retryable: true``, and no
  other ADD gets ``engine_paused`` but one to a sleeping rank: any other pause (mode keep,
  ``pause_scheduler``) queues (``ECP-REQ-7``); an ``abort_immediately`` ADD is never refused so
  (``ECP-REJECT-5``);
* an ADD sent while its rank sleeps produces no token before the ``wake_up`` left, and is not
  dropped: it gets a terminal output, an ERROR being ``engine_paused``, ``retryable: true``
  (``ECP-UTIL-8``);
* every utility call is answered exactly once (``ECP-UTIL-1``), with a result of the table's type
  (``ECP-UTIL-9``); ``get_supported_tasks`` names ``generate`` (``ECP-HS-13``); ``is_sleeping``
  follows the sleeps and wake-ups the session sent that rank (``ECP-UTIL-8``);
  ``reset_prefix_cache`` on an idle rank succeeds (``ECP-UTIL-9``, as ``ENG-UTIL-5`` checks it);
  an unknown method, or more arguments than the method table lists, is answered with a failure
  (``ECP-UTIL-3``); a ``sleep`` or pause whose mode is ``abort`` ends, before its reply, every
  request that was running on that rank and client when it was sent (``ECP-ABORT-9``; ``ECP-UTIL-8``
  when the mode was left out, whose default is ``abort``);
* a rank that ran a request stamped ``current_wave`` W reports no ``wave_complete`` below W after
  that request's end, by the engine's own timestamps (``ECP-DP-5``);
* output messages carry their array-like structs at full length (``ECP-FRAME-3``) and tensor
  buffers of 256 bytes or more in aux frames (``ECP-FRAME-8``) -- rules the machine's tolerant
  decoding cannot see;
* the peer serves a fresh request on every rank after the session (``ECP-ROB-1``: no wedge).

Releases: a session is judged by the rules of the release the harness speaks (``--vllm``; the
harness frontend's ``profile``): a clause that does not bind that release (it needs a feature the
release lacks, :meth:`ecp.spec.clauses.Clause.holds_in`) is no finding (:func:`binding`), array
lengths are the release's, and a utility result's type is the release's where its method table
differs from vLLM 0.33's (wake_up answers nil before 0.31).

Process faults: the time a rank stood still (SIGSTOP to SIGCONT) is added to the bounds that
measure it. After a SIGKILL the harness, as a frontend, fails closed (``ECP-ROB-3``): what the
engines still owed (terminals, utility replies) is failed by the frontend, not asked of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ecp.spec import VLLM_RELEASE, FinishReason
from ecp.spec.clauses import CLAUSES
from ecp.spec.profile import shipped_profile
from ecp.spec.utility_methods import UTILITY_METHODS

from ..engine.raw_outputs import misplaced_tensor, short_array

#: how long after an ABORT left the harness an engine may still be producing for that request
ABORT_GRACE_S = 0.5


@dataclass
class Finding:
    """One rule a session broke: ``clause``, what happened, and the step it showed at (None: at the
    session's end)."""

    clause: str
    message: str
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"clause": self.clause, "message": self.message, "step": self.step}


@dataclass
class RequestRecord:
    rid: str
    engine: int
    max_tokens: int
    step: int
    #: the request must get a terminal output (not ended by a client ABORT or abort_immediately)
    owes_terminal: bool = True
    #: monotonic time the first ABORT naming it left, while it was running (None: never aborted so)
    aborted_running_at: float | None = None
    abort_step: int | None = None
    wave: int | None = None
    #: added while its rank refused new ADDs: generation paused with mode abort or wait (the reply to
    #: the pause had come)
    while_paused: bool = False
    abort_immediately: bool = False
    #: the one id in its stop_token_ids: a token a greedy twin of it produced (None: no stop token)
    stop_token: int | None = None
    #: the logprobs it asked for (None: none)
    logprobs: int | None = None
    #: its prompt is longer than max_model_len: an ERROR refusing it is owed
    oversize: bool = False
    #: sent while its rank slept (after the reply to a sleep), and when the wake_up for it left
    while_asleep: bool = False
    woken_at: float | None = None
    #: when a duplicate ADD (same id) was sent while it ran, and at which step (None: none was)
    duplicate_at: float | None = None
    duplicate_step: int | None = None


@dataclass
class CallRecord:
    cid: int
    method: str
    args: list[Any]
    engine: int
    step: int
    #: what the session's model says the answer must be (None: no expectation)
    expect: Any = None
    client: int = 0
    #: when it left, and the requests that were running on its rank and client then
    sent_at: float = 0.0
    running: tuple[str, ...] = ()
    #: it must be refused with a failure (an unknown method, surplus arguments: ECP-UTIL-3)
    refused: bool = False


@dataclass(frozen=True)
class Stop:
    """Engines (by number in the session) that stood still from ``t0`` to ``t1`` (SIGSTOP..SIGCONT)."""

    engines: frozenset[int]
    t0: float
    t1: float


@dataclass
class History:
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    calls: dict[int, CallRecord] = field(default_factory=dict)
    stops: list[Stop] = field(default_factory=list)
    #: when a rank was SIGKILLed (None: none was); the harness failed closed then
    killed_at: float | None = None
    #: call ids of the malformed UTILITY messages sent (their id recoverable): a reply may carry them
    refused_ids: set[int] = field(default_factory=set)

    def stretched(self, engine: int, start: float, bound: float) -> float:
        """The end of a bound of ``bound`` seconds from ``start`` on ``engine``, stretched by every
        stop of that engine that began before it ended."""
        end = start + bound
        for stop in sorted(self.stops, key=lambda s: s.t0):
            if engine in stop.engines and stop.t1 > start and stop.t0 < end:
                end += stop.t1 - max(stop.t0, start)
        return end


def duplicate_answer(fe, rec: RequestRecord) -> Any:
    """The ERROR output answering the duplicate ADD of ``rec`` (the first ERROR for its id received
    after the duplicate left), or None."""
    if rec.duplicate_at is None:
        return None
    return next((s for s in fe.seen(rec.rid) if s.t >= rec.duplicate_at
                 and s.output.finish_reason == FinishReason.ERROR), None)


def _unanswered_duplicate(fe, rec: RequestRecord) -> str:
    """What is wrong with a duplicate ADD that got no ERROR, or "" when nothing is: sent right behind
    its original's ADD it normally meets the original in flight (an ERROR is owed), but a harness
    descheduled between the two sends can let a fast engine end the original first, and then the
    duplicate is a new request there (ECP-REQ-2 sentence 2). Such a new request follows the
    original's terminal output; an engine that ran both at once shows more tokens than one request
    may have before the first terminal, and one that dropped the duplicate shows one terminal."""
    terminals = own_terminals(fe, rec)
    if len(terminals) == 1:
        return "the id has one terminal output: the duplicate was neither refused nor run"
    if len(terminals) >= 2:
        first = terminals[0].t
        before = sum(len(s.output.new_token_ids) for s in fe.seen(rec.rid) if s.t <= first)
        if before > rec.max_tokens:
            return (f"{before} tokens came before the id's first terminal output, more than its max_tokens="
                    f"{rec.max_tokens}: the engine ran the duplicate beside the original")
    return ""


def own_outputs(fe, rec: RequestRecord) -> list[Any]:
    """The outputs of ``rec`` itself: those for its id but the answer to its duplicate."""
    answer = duplicate_answer(fe, rec)
    return [s for s in fe.seen(rec.rid) if s is not answer]


def own_terminals(fe, rec: RequestRecord) -> list[Any]:
    """The terminal outputs of ``rec`` itself: those for its id but the answer to its duplicate."""
    return [s for s in own_outputs(fe, rec) if s.output.finish_reason is not None]


#: the calls whose mode may end running requests: where the method table puts the mode, and its default
MODE_AT = {name: next((k, p.default) for k, p in enumerate(UTILITY_METHODS[name].params) if p.name == "mode")
           for name in ("sleep", "pause_generation", "pause_scheduler")}


def binding(findings: list[Finding], layout: Any) -> list[Finding]:
    """The findings whose clause binds a peer of ``layout``'s release (every one for vLLM 0.33's
    clauses; a clause that needs a feature the release lacks, ``ECP-OUT-5``'s RequestError before
    0.33, cannot be broken by it)."""
    return [f for f in findings if f.clause not in CLAUSES or CLAUSES[f.clause].holds_in(layout)]


def result_kind(method: str, profile: Any = None) -> str:
    """The result type a reply to ``method`` must have: the method table's (:data:`UTILITY_METHODS`),
    or the release's where its layout says otherwise than vLLM 0.33's (``None``: vLLM 0.33)."""
    kind = UTILITY_METHODS[method].result if method in UTILITY_METHODS else "any"
    theirs = profile.utility_methods.get(method) if profile is not None else None
    if theirs is None:
        return kind
    ours = shipped_profile(VLLM_RELEASE).utility_methods.get(method)
    return theirs.result if ours is None or ours.result != theirs.result else kind


def _type_ok(kind: str, value: Any) -> bool:
    """Whether ``value`` has the method table's result type ``kind`` (only the plain kinds are checked)."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "nil":
        return value is None
    if kind == "str":
        return isinstance(value, str)
    if kind == "array[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "array[int]":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return True


def check_calls(fe, history: History) -> list[Finding]:
    """Every call answered exactly once, with a result of its type and the value the model expects."""
    found = []
    for cid, call in history.calls.items():
        replies = fe.replies.get(cid, [])
        name = f"{call.method}{tuple(call.args)!r} (call_id {cid}) to rank {fe.start_index + call.engine}"
        if len(replies) > 1 or (not replies and history.killed_at is None):
            found.append(Finding("ECP-UTIL-1", f"{name} was answered {len(replies)} times", call.step))
            continue
        if not replies:
            continue  # the harness failed closed before the reply came
        u = replies[0].utility
        if call.refused and u.failure_message is None:
            found.append(Finding("ECP-UTIL-3", f"{name} was answered with a result, not a failure: an unknown "
                                               "method, or more arguments than the method table lists, is refused",
                                 call.step))
            continue
        if u.failure_message is not None or u.result is None:
            continue  # a failure (ECP-UTIL-3) is a legal answer; a missing envelope is the machine's
        found += _ended_before_reply(fe, history, call, replies[0])
        value = u.result.value
        kind = result_kind(call.method, getattr(fe, "profile", None))
        if not _type_ok(kind, value):
            found.append(Finding("ECP-UTIL-9", f"{name} returned {value!r}, not a {kind}", call.step))
        elif call.method == "get_supported_tasks" and "generate" not in value:
            found.append(Finding("ECP-HS-13", f"{name} returned {value!r}, without \"generate\"", call.step))
        elif call.expect is not None and value != call.expect:
            clause = "ECP-UTIL-8" if call.method == "is_sleeping" else "ECP-UTIL-9"
            found.append(Finding(clause, f"{name} returned {value!r}; the session's model expects "
                                         f"{call.expect!r}", call.step))
    strays = sorted(k for k in fe.replies if k not in history.calls and k not in history.refused_ids)
    if strays:
        found.append(Finding("ECP-UTIL-1", f"replies carry call_id(s) {strays} that were never sent"))
    return found


def _ended_before_reply(fe, history: History, call: CallRecord, reply: Any) -> list[Finding]:
    """A successful sleep or pause whose mode is ``abort`` (given, or left out: the method table's
    default) ended every request running on its rank and client when it left before its reply: their
    terminal outputs and the reply share one output socket (ECP-ABORT-9, ECP-UTIL-8)."""
    if call.method not in MODE_AT or not call.running:
        return []
    at, default = MODE_AT[call.method]
    defaulted = len(call.args) <= at
    if (default if defaulted else call.args[at]) != "abort":
        return []
    late = [rid for rid in call.running if rid in history.requests and history.requests[rid].owes_terminal
            and not any(s.t <= reply.t for s in own_terminals(fe, history.requests[rid]))]
    if not late:
        return []
    args = ", ".join(map(repr, call.args))
    return [Finding("ECP-UTIL-8" if defaulted else "ECP-ABORT-9",
                    f"{call.method}({args}) to rank {fe.start_index + call.engine} replied before running request(s) "
                    f"{late} got a terminal output" + ("; a mode left out is abort (the method table's default)"
                                                       if defaulted else "; mode abort ends them before the reply"),
                    call.step)]


def check_requests(fe, history: History) -> list[Finding]:
    """Terminals owed and given, aborted requests that kept producing, and adopted waves."""
    found = []
    produced: dict[str, list[tuple[float, Any]]] = {}
    for _client, msg in fe.messages:
        if not hasattr(msg, "outputs"):
            continue
        for out in msg.outputs:
            produced.setdefault(out.request_id, []).append((msg.timestamp, out))
    for rid, rec in history.requests.items():
        terminals = own_terminals(fe, rec)
        if rec.while_asleep and rec.owes_terminal and not terminals and history.killed_at is None:
            found.append(Finding("ECP-UTIL-8", f"request {rid}, sent while its rank slept, was dropped: neither an "
                                               f"engine_paused ERROR nor a terminal output after the wake_up "
                                               f"({len(fe.tokens(rid))} tokens)", rec.step))
        elif rec.owes_terminal and not terminals and history.killed_at is None:
            found.append(Finding("ECP-OUT-1", f"request {rid} (max_tokens={rec.max_tokens}) never got a terminal "
                                              f"output ({len(fe.tokens(rid))} tokens)", rec.step))
        if rec.while_asleep:
            early = [s for s in fe.seen(rid) if s.output.new_token_ids
                     and (rec.woken_at is None or s.t < rec.woken_at)]
            if early:
                found.append(Finding("ECP-UTIL-8", f"request {rid}, sent while its rank slept, produced "
                                                   f"{sum(len(s.output.new_token_ids) for s in early)} token(s) "
                                                   "before any wake_up was sent", rec.step))
        found += _stop_and_logprobs(fe, rec, terminals)
        if rec.aborted_running_at is None:
            continue
        bound = history.stretched(rec.engine, rec.aborted_running_at, ABORT_GRACE_S)
        answer = duplicate_answer(fe, rec)
        late = [out for ts, out in produced.get(rid, []) if ts > bound and (answer is None or out is not answer.output)
                and (out.new_token_ids or out.finish_reason not in (None, FinishReason.ABORT))]
        if late:
            ended = late[-1].finish_reason
            found.append(Finding("ECP-ABORT-2", f"request {rid} was aborted while running but produced "
                                                f"{sum(len(o.new_token_ids) for o in late)} more token(s) over "
                                                f"{ABORT_GRACE_S}s later (ended {ended!r})", rec.abort_step))
    # waves: a rank that ran a request stamped W reports no wave_complete below W after that request's
    # end. Both times are the engine's own (its messages' timestamps), so a report sent right behind the
    # terminal output is judged as surely as a later one, whatever order two sockets deliver them in. A
    # request the engine refused (an ERROR, no token) is left out: it need not have joined its wave
    sent_at = {id(out): ts for outs in produced.values() for ts, out in outs}
    ran: dict[int, list[tuple[float, int, int]]] = {}
    for rec in history.requests.values():
        ends = own_terminals(fe, rec)
        if rec.wave is None or not ends or ends[0].output.finish_reason == FinishReason.ERROR \
                or not any(s.output.new_token_ids for s in own_outputs(fe, rec)):
            continue
        ran.setdefault(fe.start_index + rec.engine, []).append((sent_at[id(ends[0].output)], rec.wave, rec.step))
    for msg in fe.coordinator_messages:
        if msg.wave_complete is None:
            continue
        late = next(((wave, step) for t, wave, step in ran.get(msg.engine_index, ())
                     if msg.timestamp > t and msg.wave_complete < wave), None)
        if late is not None:
            found.append(Finding("ECP-DP-5", f"rank {msg.engine_index} finished a request stamped current_wave="
                                             f"{late[0]} and then reported wave_complete={msg.wave_complete}", late[1]))
            break
    return found


def _stop_and_logprobs(fe, rec: RequestRecord, terminals: list[Any]) -> list[Finding]:
    """A stop token ends its request with STOP and that token as stop_reason, also when it is the
    last token allowed (ECP-REQ-5); a request that asked for logprobs gets them with every token
    unless the engine declared that it lacks them (ECP-HS-4)."""
    found = []
    rid = rec.rid
    if rec.logprobs is not None and "logprobs" not in fe.declared_lacks:
        bare = [out for _client, msg in fe.messages if hasattr(msg, "outputs")
                for out in msg.outputs if out.request_id == rid and out.new_token_ids and out.new_logprobs is None]
        if bare:
            found.append(Finding("ECP-HS-4", f"request {rid} asked for logprobs={rec.logprobs} and got "
                                             f"{sum(len(o.new_token_ids) for o in bare)} token(s) without them, "
                                             "from an engine that did not declare that it lacks logprobs", rec.step))
    if rec.stop_token is None or not terminals:
        return found
    tokens = fe.tokens(rid)
    end = terminals[0].output
    if rec.stop_token not in tokens or end.finish_reason in (FinishReason.ABORT, FinishReason.ERROR):
        return found
    at = tokens.index(rec.stop_token)
    if len(tokens) > at + 1 or end.finish_reason != FinishReason.STOP or end.stop_reason != rec.stop_token:
        found.append(Finding("ECP-REQ-5", f"request {rid} produced its stop token {rec.stop_token} as token "
                                          f"{at + 1} of {len(tokens)} (max_tokens={rec.max_tokens}) and ended with "
                                          f"{end.finish_reason!r}, stop_reason={end.stop_reason!r}; expected STOP there, "
                                          f"stop_reason={rec.stop_token}", rec.step))
    return found


def check_raw_outputs(fe, profile: Any = None) -> list[Finding]:
    """The first output message whose arrays are not full length (in ``profile``'s release; ``None``:
    vLLM 0.33), and the first with a misplaced tensor."""
    found: dict[str, Finding] = {}
    checks = (("ECP-FRAME-3", lambda frames: short_array(frames, profile)), ("ECP-FRAME-8", misplaced_tensor))
    for client, frames in fe.raw_outputs:
        for clause, check in checks:
            if clause not in found:
                problem = check(frames)
                if problem is not None:
                    found[clause] = Finding(clause, f"output[{client}]: {problem}")
        if len(found) == 2:
            break
    return list(found.values())


def check_errors(fe, history: History) -> list[Finding]:
    """The shape of every ERROR output, what a refused ADD is answered with, and what a paused or
    sleeping rank answers an ADD with."""
    found = []
    for rid, rec in history.requests.items():
        answer = duplicate_answer(fe, rec)
        if rec.duplicate_at is not None and answer is None and history.killed_at is None:
            problem = _unanswered_duplicate(fe, rec)
            if problem:
                found.append(Finding("ECP-REQ-2", f"the duplicate ADD of running request {rid} was not answered "
                                                  f"with an ERROR output, and {problem}", rec.duplicate_step))
        if answer is not None:
            e = answer.output.error
            if e is None or not isinstance(e.code, str) or not e.code or not isinstance(e.message, str) \
                    or not isinstance(e.retryable, bool):
                found.append(Finding("ECP-OUT-5", f"the ERROR answering the duplicate ADD of running request {rid} "
                                                  f"carries error={e!r}", rec.duplicate_step))
            elif answer.finished_requests and rid in answer.finished_requests:
                found.append(Finding("ECP-OUT-5", f"the ERROR answering the duplicate ADD of running request {rid} "
                                                  f"lists it in finished_requests={answer.finished_requests!r}; the "
                                                  "original still runs", rec.duplicate_step))
            elif e.retryable and e.code != "engine_paused":
                found.append(Finding("ECP-OUT-5", f"the ERROR answering the duplicate ADD of running request {rid} "
                                                  f"says code={e.code!r}, retryable: true; a refused ADD is not "
                                                  "retryable", rec.duplicate_step))
        for seen in own_terminals(fe, rec):
            out = seen.output
            if out.finish_reason != FinishReason.ERROR:
                continue
            e = out.error
            if rec.abort_immediately and rec.while_paused and e is not None and e.code == "engine_paused":
                found.append(Finding("ECP-REJECT-5", f"abort_immediately ADD {rid}, sent while paused, was refused "
                                                     f"with engine_paused instead of being processed", rec.step))
            elif e is None or not isinstance(e.code, str) or not e.code or not isinstance(e.message, str) \
                    or not isinstance(e.retryable, bool):
                found.append(Finding("ECP-OUT-5", f"the ERROR output of {rid} carries error={e!r}", rec.step))
            elif not seen.finished_requests or rid not in seen.finished_requests:
                found.append(Finding("ECP-OUT-5", f"the ERROR output of {rid} comes in a message whose "
                                                  f"finished_requests={seen.finished_requests!r} lacks it", rec.step))
            elif rec.while_paused and not rec.abort_immediately and (e.code != "engine_paused" or e.retryable is not True):
                found.append(Finding("ECP-REQ-7", f"ADD {rid} sent while paused got error code={e.code!r}, "
                                                  f"retryable={e.retryable!r}; expected engine_paused, retryable: "
                                                  "true", rec.step))
            elif not rec.while_paused and not rec.while_asleep and e.code == "engine_paused":
                found.append(Finding("ECP-REQ-7", f"ADD {rid} was refused with engine_paused, but its rank did not "
                                                  "refuse ADDs then (not paused, or paused with pause_generation "
                                                  "mode keep or pause_scheduler, which queue them)", rec.step))
            elif rec.while_asleep and not rec.oversize and not rec.abort_immediately \
                    and (e.code != "engine_paused" or e.retryable is not True):
                found.append(Finding("ECP-UTIL-8", f"ADD {rid} sent while its rank slept got error code={e.code!r}, "
                                                   f"retryable={e.retryable!r}; it is queued, or refused with "
                                                   "engine_paused, retryable: true", rec.step))
            elif rec.oversize and e.retryable and e.code != "engine_paused":
                found.append(Finding("ECP-OUT-5", f"the ERROR refusing ADD {rid} (a prompt over max_model_len) says "
                                                  f"code={e.code!r}, retryable: true; a refused ADD is not retryable",
                                     rec.step))
    return found
