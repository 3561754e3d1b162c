"""Frontend-role output cases: what the frontend does with outputs it did not expect, and that it
reads every encoding of an output message a conforming engine may send."""

from __future__ import annotations

import asyncio
from typing import Any

from ecp.conformance.frontend.cases._common import EXPECT_S, SHORT_MAX_TOKENS, expect, program, unique
from ecp.conformance.frontend.http_driver import Reply
from ecp.conformance.frontend.output_forms import FORMS
from ecp.conformance.frontend.script import SCRIPTED_LOGPROB, EngineScript
from ecp.conformance.frontend.session import FrontendManager, FrontendUnderTest
from ecp.conformance.outcomes import PeerCrashed, CaseFailure
from ecp.conformance.registry import case

#: tokens a request runs before its engine ends it with ERROR (FE-OUT-2)
ERROR_AFTER = 1
#: tokens of each request in the encoding cases (FE-OUT-4..7): a first, middle and terminal output
FORM_TOKENS = 4
#: the finish_reason FE-OUT-8's engines send for LENGTH: outside STOP 0 .. REPETITION 4
UNKNOWN_FINISH_REASON = 7


async def _still_serving(fe: FrontendUnderTest, what: str, clause: str) -> None:
    """A completion finishes normally and /health answers 200 (the frontend did not fail)."""
    program(fe, EngineScript())
    reply = await fe.driver.complete("ecp still serving", SHORT_MAX_TOKENS)
    expect(reply.ok, f"after {what}, a plain completion answered HTTP {reply.status_code}: {reply.text[:200]}",
           clause)
    status = await fe.driver.health()
    expect(status == 200, f"after {what}, GET /health answered {status}", clause)


async def unknown_ids_dropped(m: FrontendManager) -> None:
    """FE-OUT-1."""
    fe = await m.shared()
    program(fe, EngineScript(stray_outputs=True))
    for stream in (False, True):
        what = "outputs for an id it never sent"
        if stream:
            s = await fe.driver.stream_completion("ecp stray stream", SHORT_MAX_TOKENS)
            expect(s.status_code == 200, f"a streaming completion answered HTTP {s.status_code}: {s.text[:200]}")
            end = await s.read_to_end(EXPECT_S)
            expect(not end.timed_out and not end.ended_with_error,
                   f"the engine also sent {what}; the stream of the request it served ended with "
                   f"{end.transport_error or end.error_events[:1] or end.finish_reasons or 'nothing'}")
        else:
            reply = await fe.driver.complete("ecp stray", SHORT_MAX_TOKENS)
            expect(reply.ok, f"the engine also sent {what}; the request it served answered HTTP "
                             f"{reply.status_code}: {reply.text[:200]}")
    await _still_serving(fe, "outputs for ids it never sent", "ECP-OUT-9")


async def error_output_reaches_client(m: FrontendManager) -> None:
    """FE-OUT-2."""
    fe = await m.shared()
    program(fe, EngineScript(error_after=ERROR_AFTER))
    reply = await fe.driver.complete("ecp engine error", 8)
    finish = None
    if reply.ok and isinstance(reply.body, dict):
        finish = [c.get("finish_reason") for c in reply.body.get("choices") or [] if isinstance(c, dict)]
    expect(not reply.ok or "error" in (finish or []) or (isinstance(reply.body, dict) and "error" in reply.body),
           f"the engine ended the request with ERROR (RequestError); the non-streaming client got HTTP "
           f"{reply.status_code} with finish_reason {finish}: {reply.text[:200]}")
    stream = await fe.driver.stream_completion("ecp engine error stream", 8)
    if stream.status_code == 200:
        end = await stream.read_to_end(EXPECT_S)
        expect(not end.timed_out, f"the engine ended the request with ERROR; the stream never ended "
                                  f"within {EXPECT_S:g} s")
        expect(end.ended_with_error, f"the engine ended the request with ERROR (RequestError); the stream "
                                     f"ended normally with finish_reason {end.finish_reasons}")
    else:
        stream.drop()
    m.mark_dirty()   # a frontend may count engine errors: later cases start from a clean launch


async def engine_dead_fails_waiters(m: FrontendManager) -> None:
    """FE-OUT-3."""
    async with m.fresh() as fe:
        fe.require_dev_endpoints()
        fe.require_engines(2)
        victim = fe.engines[0]
        victim.script = EngineScript(silent_methods=frozenset({"is_sleeping"}))
        # the launch's capability probe asked is_sleeping too: only a call after this one is the case's
        asked = len(victim.recorder.utilities("is_sleeping"))
        pending = asyncio.ensure_future(fe.driver.request("GET", "/is_sleeping"))
        try:
            await fe.until(lambda: pending.done() or len(victim.recorder.utilities("is_sleeping")) > asked,
                           EXPECT_S, "GET /is_sleeping's utility call to reach engine 0")
            expect(not pending.done(), "GET /is_sleeping was answered before engine 0 answered its utility "
                                       "call", "ECP-UTIL-7")
            await victim.die()
            try:
                reply = await asyncio.wait_for(asyncio.shield(pending), EXPECT_S)
            except (asyncio.TimeoutError, TimeoutError):
                raise CaseFailure(f"engine 0 sent ENGINE_CORE_DEAD while GET /is_sleeping waited for its answer; "
                                f"{EXPECT_S:g} s later the request is still waiting") from None
            except PeerCrashed:
                return   # exiting is a way of failing closed
            expect(not reply.ok, f"engine 0 sent ENGINE_CORE_DEAD while GET /is_sleeping waited for its answer; "
                                 f"the frontend answered HTTP {reply.status_code} {reply.text[:100]} instead of "
                                 f"an error")
        finally:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)


def _choice(reply: Reply) -> dict[str, Any]:
    choices = (reply.body or {}).get("choices") if isinstance(reply.body, dict) else None
    return choices[0] if choices and isinstance(choices[0], dict) else {}


async def _served_alike(fe: FrontendUnderTest, forms: tuple[str, ...], **script: Any) -> dict[str, Reply]:
    """One completion of the same prompt per output form, the first in the ``full`` form: each must
    finish with ``length`` and the same text (the frontend read every form as the same message)."""
    prompt = unique("forms")
    extra = {"logprobs": 1} if script.get("logprobs") else {}
    replies: dict[str, Reply] = {}
    for form in ("full", *forms):
        program(fe, EngineScript(output_form=form, **script))
        reply = replies[form] = await fe.driver.complete(prompt, FORM_TOKENS, **extra)
        what = f"the engines wrote every output message in the {form!r} form ({FORMS[form]})"
        expect(reply.ok, f"{what}; the completion answered HTTP {reply.status_code}: {reply.text[:200]}")
        choice, plain = _choice(reply), _choice(replies["full"])
        expect(choice.get("finish_reason") == "length",
               f"{what}; the completion finished with {choice.get('finish_reason')!r}, not 'length'")
        expect(choice.get("text") == plain.get("text"),
               f"{what}; the completion's text is {choice.get('text')!r}, the same tokens in the full form gave "
               f"{plain.get('text')!r}")
    return replies


async def tolerant_output_arrays(m: FrontendManager) -> None:
    """FE-OUT-4."""
    await _served_alike(await m.shared(), ("short", "long"))


async def tolerant_output_scalars(m: FrontendManager) -> None:
    """FE-OUT-5."""
    await _served_alike(await m.shared(), ("scalars", "wire-forms"))


async def output_tensors(m: FrontendManager) -> None:
    """FE-OUT-6: logprob tensors inline and in aux frames; a frontend that reports logprobs reports the
    engine's values."""
    replies = await _served_alike(await m.shared(), ("tensors-inline", "tensors-aux"), logprobs=True)
    for form in ("tensors-inline", "tensors-aux"):
        logprobs = _choice(replies[form]).get("logprobs")
        if not isinstance(logprobs, dict) or not logprobs.get("token_logprobs"):
            continue   # the frontend reports no logprobs: reading the message was the check
        values = logprobs["token_logprobs"]
        expect(all(v == SCRIPTED_LOGPROB for v in values),
               f"the engines sent logprob {SCRIPTED_LOGPROB} for every token ({form!r} form); the completion "
               f"reports token_logprobs {values}")


async def python_and_rust_output_forms(m: FrontendManager) -> None:
    """FE-OUT-7."""
    await _served_alike(await m.shared(), ("python", "rust"))


async def release_output_shapes(m: FrontendManager) -> None:
    """FE-OUT-9: the release's full and sparse samples (``--vllm``: the engines write that release's frames)."""
    await _served_alike(await m.shared(), ("sample-full", "sample-sparse"))


async def unknown_finish_reason_not_normal(m: FrontendManager) -> None:
    """FE-OUT-8: in a launch of its own, since refusing the message may end the frontend."""
    scripts = [EngineScript(finish_code=UNKNOWN_FINISH_REASON) for _ in range(m.cfg.engine_count)]
    async with m.fresh(scripts=scripts) as fe:
        try:
            reply = await fe.driver.complete(unique("finish7"), SHORT_MAX_TOKENS)
        except PeerCrashed:
            return   # exiting is a way of refusing it
        except CaseFailure:
            return   # the connection closed without an answer: not a normal finish either
        finish = _choice(reply).get("finish_reason") if reply.ok else None
        expect(not reply.ok or finish not in ("stop", "length", "abort", "repetition"),
               f"the engine ended the request with finish_reason {UNKNOWN_FINISH_REASON}, which is no "
               f"FinishReason; the completion answered HTTP {reply.status_code} with finish_reason {finish!r}")


@case("FE-OUT-1")
def test_unknown_ids_dropped(frontends):
    frontends.run(unknown_ids_dropped)


@case("FE-OUT-2")
def test_error_output_reaches_client(frontends):
    frontends.run(error_output_reaches_client)


@case("FE-OUT-3")
def test_engine_dead_fails_waiters(frontends):
    frontends.run(engine_dead_fails_waiters)


@case("FE-OUT-4")
def test_tolerant_output_arrays(frontends):
    frontends.run(tolerant_output_arrays)


@case("FE-OUT-5")
def test_tolerant_output_scalars(frontends):
    frontends.run(tolerant_output_scalars)


@case("FE-OUT-6")
def test_output_tensors(frontends):
    frontends.run(output_tensors)


@case("FE-OUT-7")
def test_python_and_rust_output_forms(frontends):
    frontends.run(python_and_rust_output_forms)


@case("FE-OUT-8")
def test_unknown_finish_reason_not_normal(frontends):
    frontends.run(unknown_finish_reason_not_normal)


@case("FE-OUT-9")
def test_release_output_shapes(frontends):
    frontends.run(release_output_shapes)
