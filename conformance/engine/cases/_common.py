"""Helpers shared by engine-role case modules."""

import time

from ecp.conformance.outcomes import Violation
from ecp.spec import FinishReason

QUIET_LIMIT_S = 3.0


def long_max_tokens(fe) -> int:
    """As long as the engine allows: the request must still run when the ABORT arrives."""
    return max(16, min((fe.max_model_len or 4096) - 8, 100_000))


def start_long(fe, tag: str) -> tuple[str, int]:
    rid = fe.new_id(tag)
    n = long_max_tokens(fe)
    fe.add(fe.request(rid, max_tokens=n))
    fe.wait(lambda: bool(fe.seen(rid)), 5.0, f"a first output for {rid}")
    return rid, n


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


def check_aborted(fe, rid: str, n: int) -> None:
    for t in fe.terminals(rid):
        if t.output.finish_reason != FinishReason.ABORT:
            raise Violation(f"aborted request {rid} ended with {t.output.finish_reason!r} after "
                            f"{len(fe.tokens(rid))} tokens; an aborted request may only end with ABORT")
    if len(fe.terminals(rid)) > 1:
        raise Violation(f"{len(fe.terminals(rid))} terminal outputs for aborted {rid}", clause="ECP-OUT-1")
    if len(fe.tokens(rid)) >= n:
        raise Violation(f"aborted request {rid} still produced all {n} tokens")
