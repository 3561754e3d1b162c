"""Helpers shared by engine-role case modules."""

import contextlib
import time

from ecp.conformance import capabilities
from ecp.conformance.outcomes import CaseTimeout, Unsupported, CaseFailure
from ecp.spec import EngineCoreReadyResponse
from ecp.spec import FinishReason

QUIET_LIMIT_S = 3.0


@contextlib.contextmanager
def paused(fe, engines, mode: str = "abort"):
    """The shared engine with generation paused (``pause_generation``, by default mode abort) for the block.

    A user pause with mode abort or wait: vLLM 0.33 refuses new ADDs with ``engine_paused`` only then
    (mode keep, and ``pause_scheduler``, queue them until it resumes: ECP-REQ-7). A release without ``pause_generation`` (0.32 and older)
    is paused with what it has, ``pause_scheduler`` (:func:`capabilities.pause_method`).

    A block that fails leaves it resumed where the engine still answers, so that the probe after
    the case judges the engine and not the pause; the engine is relaunched before the next case anyway."""
    method = capabilities.pause_method(fe.profile)
    engines.mark_dirty()
    ok_value(fe.call(method, [mode]), method)
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            fe.call("resume_scheduler", [], timeout=1.0)
        raise
    ok_value(fe.call("resume_scheduler", []), "resume_scheduler")


def long_max_tokens(fe) -> int:
    """As long as the engine allows: the request must still run when the ABORT arrives."""
    return max(16, min((fe.max_model_len or 4096) - 8, 100_000))


def start_long(fe, tag: str, count: int = 1) -> list[tuple[str, int]]:
    """Start ``count`` requests as long as the engine allows and wait until each produced a token.

    The ADDs go out back to back so that an ABORT can follow within milliseconds: a fast
    engine must not finish them first. If one finished anyway the case cannot judge the
    ABORT and says so (UNSUPPORTED), instead of blaming the engine.
    """
    n = long_max_tokens(fe)
    rids = [fe.new_id(tag) for _ in range(count)]
    for rid in rids:
        fe.add(fe.request(rid, max_tokens=n))
    fe.wait(lambda: all(fe.seen(r) for r in rids), 5.0, f"a first output for each of {rids}")
    done = [r for r in rids if fe.terminals(r)]
    if done:
        raise Unsupported(f"{done} finished all {n} tokens before an ABORT could be sent (engine too fast "
                          "for max_model_len)")
    return [(rid, n) for rid in rids]


def goes_quiet(fe, rids, since: float, limit: float = QUIET_LIMIT_S) -> list[str]:
    """Pump until none of ``rids`` got an output for the quiet window; return those still producing."""
    end = time.monotonic() + limit
    while True:
        now = time.monotonic()
        busy = [r for r in rids if fe.seen(r) and max(since, fe.seen(r)[-1].t) > now - fe.quiet_window_s
                and not fe.terminals(r)]
        if now - since >= fe.quiet_window_s and not busy:
            return []
        if now >= end:
            return busy
        fe.pump(min(end, now + 0.05))


def abort_fenced(fe, ids: list[str]) -> str:
    """Send the ABORT of ``ids``, then a one-token ADD, the fence; its id.

    A long request can reach its natural end while the ABORT is on its way (a fast engine, a
    loaded harness). The engine reads its input socket in order, so the fence's first output
    leaves after the engine took the ABORT: a natural end that arrives before it was produced
    before, and :func:`check_aborted` does not blame the engine for it."""
    fe.abort(ids)
    fence = fe.new_id("fence")
    fe.add(fe.request(fence, max_tokens=1))
    return fence


#: How long check_aborted waits for the fence's first output when it needs it.
FENCE_WAIT_S = 5.0


def tokens_past_fence(fe, rids, fence: str) -> list[str]:
    """Those of ``rids`` that got tokens in or after the output message carrying the fence's first
    output on the same output socket (ECP-ABORT-2.2: the engine took the ABORT before the fence's ADD,
    so it produced them after the ABORT). Waits up to FENCE_WAIT_S for that output; none: nothing to
    judge here (the quiet window still judges). Unlike a quiet window, this does not depend on the
    engine's pace or the harness's load."""
    with contextlib.suppress(CaseTimeout):
        fe.wait(lambda: bool(fe.seen(fence)), FENCE_WAIT_S, f"a first output for the fence {fence}")
    if not fe.seen(fence):
        return []
    first = fe.seen(fence)[0]
    return [r for r in rids if any(s.t >= first.t and s.output.new_token_ids and s.client == first.client
                                   and s.engine_index == first.engine_index for s in fe.seen(r))]


def check_aborted(fe, rid: str, n: int, fence: str | None = None) -> None:
    """``rid`` (asked for ``n`` tokens) was aborted: it may only end with ABORT, once, before its
    last token. With ``fence`` (:func:`abort_fenced`), a natural end after all ``n`` tokens that
    arrived before the fence's first output is a race the case cannot judge (UNSUPPORTED)."""
    for t in fe.terminals(rid):
        if t.output.finish_reason != FinishReason.ABORT:
            if fence is not None and t.output.finish_reason == FinishReason.LENGTH and len(fe.tokens(rid)) >= n:
                with contextlib.suppress(CaseTimeout):
                    fe.wait(lambda: bool(fe.seen(fence)), FENCE_WAIT_S, f"a first output for the fence {fence}")
                if fe.seen(fence) and t.t < fe.seen(fence)[0].t:
                    raise Unsupported(f"{rid} finished all {n} tokens before the engine took the ABORT (engine "
                                      "too fast for max_model_len)")
            raise CaseFailure(f"aborted request {rid} ended with {t.output.finish_reason!r} after "
                            f"{len(fe.tokens(rid))} tokens; an aborted request may only end with ABORT")
    if len(fe.terminals(rid)) > 1:
        raise CaseFailure(f"{len(fe.terminals(rid))} terminal outputs for aborted {rid}", clause="ECP-OUT-1")
    if len(fe.tokens(rid)) >= n:
        raise CaseFailure(f"aborted request {rid} still produced all {n} tokens")


def ok_value(reply, method: str):
    u = reply.utility
    if u.failure_message is not None:
        raise CaseFailure(f"{method} failed: {u.failure_message!r}", clause="ECP-UTIL-3")
    if u.result is None:
        raise CaseFailure(f"{method} succeeded without a result envelope [type_info, value]", clause="ECP-UTIL-2")
    return u.result.value


def expect_bool(reply, method: str) -> bool:
    value = ok_value(reply, method)
    if not isinstance(value, bool):
        raise CaseFailure(f"{method} returned {value!r} ({type(value).__name__}), expected a bool",
                        clause="ECP-UTIL-9")
    return value


def _ready_payloads(fe) -> list[EngineCoreReadyResponse]:
    return [p for r in fe.evidence.records.values() for p in r.ready_payloads.values() if isinstance(p, EngineCoreReadyResponse)]


def require_feature(fe, feature: str) -> None:
    """Raise :class:`Unsupported`, naming the declaration, when the engine declared that it lacks
    ``feature`` (an :mod:`ecp.conformance.capabilities` name): in its ready payload, or with
    ``--engine-lacks``."""
    capabilities.require(capabilities.get("engine", feature), fe.declared_lacks, _ready_payloads(fe), fe.profile)


def feature_missing(fe, feature: str, observed: str) -> CaseFailure:
    """The FAIL to raise when the engine turns out to lack ``feature`` without having declared it."""
    return capabilities.missing(capabilities.get("engine", feature), observed)
