"""Engine-role request and output cases. Tokens are unpredictable: assert structure."""

import time

from ecp.conformance.engine.cases._common import goes_quiet, long_max_tokens, ok_value, paused, start_long
from ecp.conformance import capabilities
from ecp.conformance.outcomes import CaseTimeout, Unsupported, CaseFailure
from ecp.conformance.registry import case
from ecp.spec import FinishReason
from ecp.spec.clauses import CLAUSES

MAX_OVERLONG_PROMPT = 1 << 22  # beyond this max_model_len the case is not practical


def _expect_error_output(fe, rid: str, what: str) -> None:
    term = fe.wait_finished(rid)
    out = term.output
    if out.finish_reason != FinishReason.ERROR:
        raise CaseFailure(f"{what}: request ended with {out.finish_reason!r} after {len(fe.tokens(rid))} "
                        "token(s), expected ERROR")
    if not CLAUSES["ECP-OUT-5"].holds_in(fe.profile.layout):
        pass  # the release's ERROR outputs carry no RequestError (0.32 and older): the finish reason is all
    elif out.error is None or not out.error.code or not isinstance(out.error.message, str):
        raise CaseFailure(f"{what}: ERROR output without a RequestError {{code, message, retryable}}",
                        clause="ECP-OUT-5")
    elif out.error.retryable is not False:
        raise CaseFailure(f"{what}: the ERROR says retryable: {out.error.retryable!r}; the same ADD would be "
                        "refused again, so it must say false", clause="ECP-OUT-5")
    if fe.tokens(rid):
        raise CaseFailure(f"{what}: {len(fe.tokens(rid))} token(s) produced for a rejected request")


@case("ENG-REQ-1")
def test_exact_max_tokens(engine):
    fe = engine
    for n in (1, 7):
        rid = fe.new_id("len")
        fe.add(fe.request(rid, max_tokens=n))
        term = fe.wait_finished(rid, max_tokens=n)
        fe.observe()
        got = len(fe.tokens(rid))
        if got != n:
            raise CaseFailure(f"max_tokens={n}, ignore_eos: {got} tokens produced")
        if term.output.finish_reason != FinishReason.LENGTH:
            raise CaseFailure(f"max_tokens={n} reached but finish_reason is {term.output.finish_reason!r}, "
                            "expected LENGTH")


#: Greedy decoding is a function of the prompt; the fixed sampling seed makes it one for
#: engines that key their sampling on the seed or, without one, on the request id.
SEED = 1234


def _greedy_first_token(fe, prompt):
    rid = fe.new_id("probe-first")
    fe.add(fe.request(rid, max_tokens=1, prompt=prompt, seed=SEED))
    fe.wait_finished(rid, max_tokens=1)
    toks = fe.tokens(rid)
    if len(toks) != 1:
        raise CaseFailure(f"max_tokens=1 produced {len(toks)} tokens", clause="ECP-REQ-4")
    return toks[0]


@case("ENG-REQ-2")
def test_stop_token_finishes_stop(engine):
    fe = engine
    prompt = [5, 6, 7, 8]
    first = _greedy_first_token(fe, prompt)
    rid = fe.new_id("stop")
    fe.add(fe.request(rid, max_tokens=8, prompt=prompt, stop_token_ids=[first], ignore_eos=False, seed=SEED))
    term = fe.wait_finished(rid, max_tokens=8)
    toks = fe.tokens(rid)
    if term.output.finish_reason != FinishReason.STOP:
        raise CaseFailure(f"greedy first token {first} is in stop_token_ids but the request ended with "
                        f"{term.output.finish_reason!r} after {len(toks)} tokens, expected STOP")
    if len(toks) != 1 or toks[0] != first:
        raise CaseFailure(f"stopped on token {first}, expected exactly that one token, got {toks}")
    if term.output.stop_reason != first:
        raise CaseFailure(f"stop_reason is {term.output.stop_reason!r}; a request stopped by a token of "
                        f"stop_token_ids carries that token, {first}, in stop_reason")
    # the stop token is also the max_tokens-th token: the stop condition wins over the length cap
    rid = fe.new_id("stop-at-cap")
    fe.add(fe.request(rid, max_tokens=1, prompt=prompt, stop_token_ids=[first], ignore_eos=False, seed=SEED))
    out = fe.wait_finished(rid, max_tokens=1).output
    if (out.finish_reason, out.stop_reason) != (FinishReason.STOP, first):
        raise CaseFailure(f"token {first} is both in stop_token_ids and the max_tokens=1st token: the request ended "
                        f"with {out.finish_reason!r} (stop_reason {out.stop_reason!r}), expected STOP "
                        f"(stop_reason {first})")
    # EOS stops with stop_reason nil; judged when the engine produces the EOS id (a synthetic
    # executor may never produce a request's EOS id, as no case can force a model to)
    rid = fe.new_id("eos")
    fe.add(fe.request(rid, max_tokens=8, prompt=prompt, ignore_eos=False, seed=SEED, _eos_token_id=first))
    out = fe.wait_finished(rid, max_tokens=8).output
    toks = fe.tokens(rid)
    if first in toks and (out.finish_reason, out.stop_reason, toks.index(first)) != (FinishReason.STOP, None,
                                                                                      len(toks) - 1):
        raise CaseFailure(f"the request's _eos_token_id {first} was produced as token {toks.index(first) + 1} of "
                        f"{len(toks)}; the request ended with {out.finish_reason!r} (stop_reason "
                        f"{out.stop_reason!r}), expected STOP on it with stop_reason nil")


@case("ENG-REQ-3")
def test_min_tokens(engine):
    fe = engine
    prompt = [5, 6, 7, 8]
    first = _greedy_first_token(fe, prompt)
    rid = fe.new_id("min")
    fe.add(fe.request(rid, max_tokens=6, min_tokens=4, prompt=prompt, stop_token_ids=[first], ignore_eos=False,
                      seed=SEED))
    term = fe.wait_finished(rid, max_tokens=6)
    n = len(fe.tokens(rid))
    if n < 4:
        raise CaseFailure(f"min_tokens=4 but the request finished ({term.output.finish_reason!r}) after {n} tokens")


@case("ENG-REQ-4")
def test_duplicate_id_error(engine):
    fe = engine
    rid = fe.new_id("dup")
    n = long_max_tokens(fe)
    # back to back: an engine reads its input in order, so the second ADD meets the first one
    # admitted and unfinished -- in flight -- whatever the speed of the engine
    fe.add(fe.request(rid, max_tokens=n))
    fe.add(fe.request(rid, max_tokens=n))
    fe.wait(lambda: bool(fe.terminals(rid)), 5.0, f"an ERROR output for the duplicate ADD of {rid}")
    first = fe.terminals(rid)[0]
    if first.output.finish_reason != FinishReason.ERROR:
        seen = fe.seen(rid)
        ran = sum(len(s.output.new_token_ids) for s in seen[:seen.index(first) + 1])
        if first.output.finish_reason == FinishReason.LENGTH and ran == n:
            # the original ran to its end before the engine read the second ADD (the harness sends them
            # back to back, but a loaded machine can hold the second one back): the id was no longer in
            # flight, so the second ADD was a new request, which is correct -- a second stream says so
            fe.wait(lambda: len(fe.terminals(rid)) > 1, 5.0, f"the second ADD of {rid}, a new request once "
                    "the first had ended")
            raise Unsupported(f"{rid} finished all {n} tokens before the engine read its second ADD, which it "
                              "then served as a new request (engine too fast for max_model_len)")
        raise CaseFailure(f"the duplicate ADD of in-flight {rid} was answered with {first.output.finish_reason!r} "
                        f"after {len(fe.tokens(rid))} token(s), expected ERROR")
    if not CLAUSES["ECP-OUT-5"].holds_in(fe.profile.layout):
        pass  # no RequestError in the release (0.32 and older): the finish reason is all it says
    elif first.output.error is None:
        raise CaseFailure("the ERROR output for the duplicate ADD carries no RequestError", clause="ECP-OUT-5")
    elif first.output.error.retryable is not False:
        raise CaseFailure(f"the ERROR for the duplicate ADD of {rid} says retryable: {first.output.error.retryable!r}; "
                        "the same ADD would be refused again, so it must say false", clause="ECP-OUT-5")
    if first.finished_requests and rid in first.finished_requests:
        raise CaseFailure(f"the ERROR for the duplicate ADD lists {rid} in finished_requests while the original "
                        f"{rid} still runs (a frontend forgets which engine serves it)", clause="ECP-OUT-5")
    # the running request must go on producing tokens after the rejection
    seen_at_error = len(fe.seen(rid))
    fe.wait(lambda: len(fe.seen(rid)) > seen_at_error, 5.0, f"more tokens for the running {rid} after the ERROR")
    later = fe.seen(rid)[seen_at_error:]
    if any(s.output.finish_reason not in (None, FinishReason.LENGTH) for s in later):
        raise CaseFailure(f"after rejecting the duplicate, the running {rid} ended with "
                        f"{[s.output.finish_reason for s in later if s.output.finish_reason is not None]}")
    fe.abort([rid])
    goes_quiet(fe, [rid], time.monotonic())
    # no longer in flight at the engine, the id is a new request there (sentence 2)
    ended = len(fe.terminals(rid))
    fe.add(fe.request(rid, max_tokens=2))
    fe.wait(lambda: len(fe.terminals(rid)) > ended, 5.0, f"a terminal output for {rid}, added again after it ended")
    again = fe.terminals(rid)[ended]
    if again.output.finish_reason != FinishReason.LENGTH:
        raise CaseFailure(f"{rid}, added again after it was aborted and went quiet, ended with "
                        f"{again.output.finish_reason!r} after {len(fe.tokens(rid))} token(s) in all; "
                        "expected a new request's 2 tokens and LENGTH")


@case("ENG-REQ-5")
def test_over_long_prompt_error(engine):
    fe = engine
    if fe.max_model_len is None:
        raise CaseFailure("no max_model_len known from the ready payload", clause="ECP-HS-4")
    if fe.max_model_len >= MAX_OVERLONG_PROMPT:
        raise Unsupported(f"max_model_len {fe.max_model_len} is too large to send a longer prompt")
    rid = fe.new_id("long")
    fe.add(fe.request(rid, max_tokens=1, prompt=[1] * (fe.max_model_len + 1)))
    _expect_error_output(fe, rid, f"prompt of {fe.max_model_len + 1} tokens (max_model_len {fe.max_model_len})")
    if len(fe.terminals(rid)) != 1:
        raise CaseFailure(f"{len(fe.terminals(rid))} terminal outputs for one rejected request", clause="ECP-OUT-1")
    fe.serves(after="an over-long prompt")


@case("ENG-REQ-6")
def test_invalid_params_error(engine):
    fe = engine
    rid = fe.new_id("badparams")
    fe.add(fe.request(rid, max_tokens=2, temperature=-1.0))
    _expect_error_output(fe, rid, "temperature=-1.0")
    fe.serves(after="invalid sampling parameters")


@case("ENG-OUT-1")
def test_one_terminal_output(engine):
    fe = engine
    ids = {fe.new_id("conc"): n for n in (1, 3, 5, 9)}
    for rid, n in ids.items():
        fe.add(fe.request(rid, max_tokens=n))
    for rid, n in ids.items():
        fe.wait_finished(rid, max_tokens=n)
    fe.observe()
    for rid, n in ids.items():
        seen = fe.seen(rid)
        terms = [i for i, s in enumerate(seen) if s.output.finish_reason is not None]
        if len(terms) != 1:
            raise CaseFailure(f"{rid}: {len(terms)} terminal outputs, expected exactly 1")
        if terms[0] != len(seen) - 1:
            raise CaseFailure(f"{rid}: {len(seen) - 1 - terms[0]} output(s) after the terminal output")


@case("ENG-OUT-2")
def test_engine_index(engine):
    fe = engine
    rank = int.from_bytes(fe.identity(0), "little")
    rid = fe.new_id("idx")
    fe.add(fe.request(rid, max_tokens=3))
    fe.wait_finished(rid, max_tokens=3)
    reply = fe.call("is_sleeping")
    got = {s.engine_index for s in fe.seen(rid)} | {reply.engine_index}
    if got != {rank}:
        raise CaseFailure(f"rank {rank} answered a request and a utility call with engine_index {sorted(got)}")
    expected = {fe.start_index + k for k in range(fe.engine_count)}
    for client, msg in fe.messages:
        if msg.engine_index not in expected:
            raise CaseFailure(f"an output message carries engine_index {msg.engine_index}; the engines' ranks "
                            f"are {sorted(expected)}")


@case("ENG-OUT-3")
def test_outputs_to_client(engines):
    with engines.fresh(clients=2, engine_count=1) as eut:
        fe = eut.fe
        rid = fe.new_id("c1")
        fe.add(fe.request(rid, max_tokens=3, client=1))
        fe.wait_finished(rid, max_tokens=3)
        reply = fe.call("is_sleeping", client=1)
        fe.observe()
        wrong = sorted({s.client for s in fe.seen(rid)} - {1})
        if wrong:
            raise CaseFailure(f"outputs of a client_index=1 request arrived on output(s) {wrong}")
        if reply.client != 1 or len(fe.replies[reply.utility.call_id]) != 1:
            raise CaseFailure(f"the utility reply for client 1 arrived on output[{reply.client}]")


@case("ENG-OUT-4")
def test_delta_tokens(engine):
    fe = engine
    rid = fe.new_id("delta")
    n = 10
    fe.add(fe.request(rid, max_tokens=n))
    fe.wait_finished(rid, max_tokens=n)
    fe.observe()
    per_output = [len(s.output.new_token_ids) for s in fe.seen(rid)]
    if sum(per_output) != n:
        raise CaseFailure(f"new_token_ids per output {per_output} sum to {sum(per_output)}, expected {n} "
                        "(cumulative instead of delta?)")


@case("ENG-REQ-9")
def test_paused_engine_errors(engine, engines):
    fe = engine
    # an ADD refused as paused is a user pause's (pause_generation) with its error code (0.33)
    capabilities.require_release(fe.profile, utility="pause_generation", field="EngineCoreOutput.error")
    with paused(fe, engines):
        rid = fe.new_id("while-paused")
        fe.add(fe.request(rid, max_tokens=2))
        term = fe.wait_finished(rid)
        out = term.output
        if out.finish_reason != FinishReason.ERROR or out.error is None:
            raise CaseFailure(f"an ADD while paused ended with {out.finish_reason!r} after {len(fe.tokens(rid))} "
                            f"token(s), error={out.error!r}; expected an ERROR output with code engine_paused")
        if out.error.code != "engine_paused" or out.error.retryable is not True:
            raise CaseFailure(f"an ADD while paused got error code={out.error.code!r}, "
                            f"retryable={out.error.retryable!r}; expected engine_paused, retryable: true")
        if fe.tokens(rid):
            raise CaseFailure(f"{len(fe.tokens(rid))} token(s) produced for an ADD refused while paused")
    fe.serves(after="pause_scheduler and resume_scheduler")
    # mode wait refuses new ADDs from the moment the pause is received, while a running request still
    # finishes before the pause's reply (ECP-REQ-7.3)
    [(running, n)] = start_long(fe, "draining")
    call_id = fe.send_utility("pause_generation", ["wait"])
    rid = fe.new_id("while-draining")
    fe.add(fe.request(rid, max_tokens=2))
    term = fe.wait_finished(rid)
    if term.output.finish_reason != FinishReason.ERROR or term.output.error is None \
            or term.output.error.code != "engine_paused":
        raise CaseFailure(f"an ADD sent after pause_generation [\"wait\"], while request {running} was still "
                        f"running, ended with {term.output.finish_reason!r}, error={term.output.error!r}; "
                        "a pause in mode wait refuses new ADDs with engine_paused from the moment it is received")
    fe.send_raw(fe.codec.encode_abort([running]), decode=lambda: f"ABORT {running}")
    fe.wait(lambda: bool(fe.replies.get(call_id)), 10.0, "the reply to pause_generation [\"wait\"]")
    ok_value(fe.call("resume_scheduler", []), "resume_scheduler")


@case("ENG-REQ-14")
def test_pause_keep_queues(engine, engines):
    fe = engine
    # only a user pause with mode abort or wait refuses ADDs; mode keep (or pause_scheduler, for a
    # release without pause_generation) queues them and runs them after the resume
    method = capabilities.pause_method(fe.profile)
    rid = fe.new_id("queued")
    with paused(fe, engines, mode="keep"):
        fe.add(fe.request(rid, max_tokens=2))
        fe.observe()
        if fe.seen(rid):
            first = fe.seen(rid)[0].output
            raise CaseFailure(f"an ADD while paused by {method}(mode keep) got an output before the resume "
                            f"(finish_reason {first.finish_reason!r}, error {first.error!r}, "
                            f"{len(fe.tokens(rid))} token(s)); expected it queued until resume_scheduler",
                            clause="ECP-REQ-7")
    try:
        term = fe.wait_finished(rid, max_tokens=2)
    except CaseTimeout:
        raise CaseFailure(f"an ADD queued while paused by {method}(mode keep) got no output after "
                        "resume_scheduler (it was dropped)", clause="ECP-REQ-7") from None
    if term.output.finish_reason != FinishReason.LENGTH or len(fe.tokens(rid)) != 2:
        raise CaseFailure(f"an ADD queued while paused by {method}(mode keep) ended with "
                        f"{term.output.finish_reason!r} after {len(fe.tokens(rid))} token(s) once resumed; "
                        "expected LENGTH after 2", clause="ECP-REQ-7")
    fe.serves(after=f"{method}(mode keep) and resume_scheduler")
