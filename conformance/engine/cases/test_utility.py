"""Engine-role utility-call cases."""

from ecp.conformance.engine.cases._common import expect_bool, ok_value, require_feature, start_long
from ecp.conformance.outcomes import CaseTimeout, Unsupported, CaseFailure
from ecp.conformance.registry import case
from ecp.spec import FinishReason


@case("ENG-UTIL-1")
def test_result_envelope(engine):
    fe = engine
    for method in ("is_sleeping", "reset_mm_cache"):
        reply = fe.call(method)
        ok_value(reply, method)
        result = reply.utility.result
        # ecp never asks for insecure serialization, so type_info is nil; a 1-element envelope [value]
        # reads as type_info=value
        if result.type_info is not None or (method == "is_sleeping" and not isinstance(result.value, bool)):
            raise CaseFailure(f"{method}: result is [{result.type_info!r}, {result.value!r}], expected the "
                            "envelope [nil, value] (a 2-element array)")


@case("ENG-UTIL-2")
def test_call_id_echo_u64(engine):
    fe = engine
    for cid in (0, 1, 0x1234567890ABCDEF, 2**63, 2**64 - 1):
        before = {k: len(v) for k, v in fe.replies.items()}
        fe.send_utility("is_sleeping", call_id=cid)
        # any new reply ends the wait: one carrying another id is the violation
        fe.wait(lambda: any(len(v) > before.get(k, 0) for k, v in fe.replies.items()), 3.0,
                f"a reply to is_sleeping with call_id {cid}")
        new = sorted(k for k, v in fe.replies.items() if len(v) > before.get(k, 0))
        if new != [cid]:
            raise CaseFailure(f"call_id {cid} was answered with call_id(s) {new}")


@case("ENG-UTIL-3")
def test_unknown_method_failure(engine):
    fe = engine
    reply = fe.call("ecp_no_such_method", [1, "x"])
    u = reply.utility
    if not isinstance(u.failure_message, str) or not u.failure_message:
        raise CaseFailure(f"unknown method answered with failure_message={u.failure_message!r}, "
                        f"result={u.result!r}; expected a failure message")
    if u.result is not None:
        raise CaseFailure(f"a failed call carries a result {u.result!r}; it must be nil")
    expect_bool(fe.call("is_sleeping"), "is_sleeping")
    fe.serves(after="an unknown utility method")


@case("ENG-UTIL-4")
def test_sleep_wake_transitions(engine, engines):
    fe = engine
    require_feature(fe, "sleep")
    engines.mark_dirty()  # whatever happens, the next case gets an engine that never slept
    if expect_bool(fe.call("is_sleeping"), "is_sleeping") is not False:
        raise CaseFailure("a freshly started engine reports is_sleeping = true")
    ok_value(fe.call("sleep", [1, "wait"]), "sleep")
    if expect_bool(fe.call("is_sleeping"), "is_sleeping") is not True:
        raise CaseFailure("is_sleeping is false right after sleep(1, 'wait')")
    # an ADD while asleep: queued until the wake_up, or refused at once with a retryable engine_paused
    # ERROR; never run while asleep, never dropped
    rid = fe.new_id("asleep")
    fe.add(fe.request(rid, max_tokens=2))
    fe.observe()
    if fe.tokens(rid):
        raise CaseFailure(f"{rid}, sent while the engine sleeps, produced {len(fe.tokens(rid))} token(s) before "
                        "any wake_up", clause="ECP-UTIL-8")
    refused = fe.terminals(rid)
    if refused:
        out = refused[0].output
        if out.finish_reason != FinishReason.ERROR or out.error is None or \
                (out.error.code, out.error.retryable) != ("engine_paused", True):
            raise CaseFailure(f"{rid}, sent while the engine sleeps, ended with {out.finish_reason!r} "
                            f"(error {out.error!r}) before any wake_up; it is queued, or refused with ERROR "
                            "{code: engine_paused, retryable: true}", clause="ECP-UTIL-8")
    # level 1 put both tags to sleep: waking the weights alone leaves the engine asleep (ECP-UTIL-8.7)
    partly = ok_value(fe.call("wake_up", [["weights"]]), "wake_up")
    if expect_bool(fe.call("is_sleeping"), "is_sleeping") is not True or partly is True:
        raise CaseFailure(f"after sleep(1) and wake_up(['weights']) (answered {partly!r}) the engine reports itself "
                        "awake; level 1 puts kv_cache to sleep too, so it sleeps until that tag is woken")
    if fe.tokens(rid):
        raise CaseFailure(f"{rid} produced tokens after a wake_up that left kv_cache asleep", clause="ECP-UTIL-8")
    woke = ok_value(fe.call("wake_up", [None]), "wake_up")
    if woke is not None and not isinstance(woke, bool):
        raise CaseFailure(f"wake_up returned {woke!r}, expected a bool", clause="ECP-UTIL-9")
    if expect_bool(fe.call("is_sleeping"), "is_sleeping") is not False:
        raise CaseFailure("is_sleeping is still true after wake_up(None)")
    if not refused:
        try:
            term = fe.wait_finished(rid, max_tokens=2)
        except CaseTimeout:
            raise CaseFailure(f"{rid}, sent while the engine slept, got no output: neither a retryable "
                            "engine_paused ERROR while asleep nor its tokens after the wake_up (it was dropped)",
                            clause="ECP-UTIL-8") from None
        if term.output.finish_reason != FinishReason.LENGTH or len(fe.tokens(rid)) != 2:
            raise CaseFailure(f"{rid}, queued while the engine slept, ended with {term.output.finish_reason!r} "
                            f"after {len(fe.tokens(rid))} token(s) once awake; expected LENGTH after 2",
                            clause="ECP-UTIL-8")
    fe.serves(after="sleep and wake_up")


@case("ENG-UTIL-5")
def test_reset_prefix_cache_bool(engine):
    fe = engine
    value = expect_bool(fe.call("reset_prefix_cache", [False, False]), "reset_prefix_cache")
    if value is not True:
        raise CaseFailure("reset_prefix_cache on an idle engine returned false")


def _aborts_before_reply(fe, method: str, args: list, tag: str) -> None:
    """Call ``method(*args)`` while a long request runs: mode abort (given, or the default when left
    out) ends it with an ABORT output listed in finished_requests, before the reply."""
    [(rid, n)] = start_long(fe, tag)
    reply = fe.call(method, args, timeout=5.0)
    ok_value(reply, method)
    call = f"{method}({', '.join(map(repr, args))})"
    defaulted = len(args) < (2 if method == "sleep" else 1)  # the mode argument left out
    terms = fe.terminals(rid)
    if not terms:
        raise CaseFailure(f"{call} replied but running request {rid} got no terminal output"
                        + ("; a left-out mode is 'abort' (vLLM 0.33's default)" if defaulted else ""),
                        clause="ECP-UTIL-8" if defaulted else None)
    term = terms[0]
    if (term.output.finish_reason == FinishReason.LENGTH and len(fe.tokens(rid)) >= n
            and term.t < reply.t):
        # its natural end came before the reply, so before the engine took the call (one output
        # socket keeps the engine's order): it finished on its own while the call was on its way
        raise Unsupported(f"{rid} finished all {n} tokens before the engine took {call} (engine too fast "
                          "for max_model_len)")
    if term.output.finish_reason != FinishReason.ABORT:
        raise CaseFailure(f"{call} ended {rid} with {term.output.finish_reason!r}, expected ABORT")
    if term.t > reply.t:
        raise CaseFailure(f"the ABORT output for {rid} arrived after the {method} reply")
    if not term.finished_requests or rid not in term.finished_requests:
        raise CaseFailure(f"the ABORT output for {rid} is not listed in finished_requests "
                        f"({term.finished_requests!r})")


@case("ENG-UTIL-6")
def test_sleep_abort_ends_requests(engine, engines):
    fe = engine
    require_feature(fe, "sleep")
    engines.mark_dirty()
    _aborts_before_reply(fe, "sleep", [1, "abort"], "sleeper")
    ok_value(fe.call("wake_up", [None]), "wake_up")
    # the defaults of the method table: sleep [] is sleep [1, "abort"], a pause [] is ["abort", true]
    _aborts_before_reply(fe, "sleep", [], "sleeper-default")
    ok_value(fe.call("wake_up", [None]), "wake_up")
    for method in [m for m in ("pause_generation", "pause_scheduler") if m in fe.profile.utility_methods]:
        _aborts_before_reply(fe, method, [], f"{method}-default")
        ok_value(fe.call("resume_scheduler", []), "resume_scheduler")


@case("ENG-UTIL-7")
def test_supported_tasks_type(engine):
    fe = engine
    value = ok_value(fe.call("get_supported_tasks"), "get_supported_tasks")
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise CaseFailure(f"get_supported_tasks returned {value!r}, expected an array of strings")
