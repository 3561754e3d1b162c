"""Engine-role abort cases (client ABORT messages)."""

import time

from ecp.conformance.outcomes import CaseFailure
from ecp.conformance.engine.cases._common import (
    QUIET_LIMIT_S, abort_fenced, check_aborted, goes_quiet, start_long, tokens_past_fence,
)
from ecp.conformance.registry import case
from ecp.spec import FinishReason

@case("ENG-ABORT-1")
def test_abort_stops_running(engine):
    fe = engine
    [(rid, n)] = start_long(fe, "abort")
    fence = abort_fenced(fe, [rid])
    busy = goes_quiet(fe, [rid], time.monotonic())
    if busy:
        raise CaseFailure(f"{rid} kept producing tokens for {QUIET_LIMIT_S}s after ABORT "
                          f"({len(fe.tokens(rid))} so far)")
    if tokens_past_fence(fe, [rid], fence):
        raise CaseFailure(f"{rid} got tokens with or after the first output of {fence}, a request ADDed after "
                          "its ABORT on the same input: the engine produced them after it took the ABORT "
                          "(ECP-ABORT-2.2)")
    check_aborted(fe, rid, n, fence)
    fe.serves(after="an ABORT")


@case("ENG-ABORT-2")
def test_abort_unknown_id_noop(engine):
    fe = engine
    rid = fe.new_id("bystander")
    n = 8
    fe.add(fe.request(rid, max_tokens=n))
    ghost = fe.new_id("never-added")
    fe.abort([ghost])
    term = fe.wait_finished(rid, max_tokens=n)
    fe.observe()
    if fe.seen(ghost):
        raise CaseFailure(f"ABORT of unknown id {ghost} produced {len(fe.seen(ghost))} output(s) for it")
    if term.output.finish_reason != FinishReason.LENGTH or len(fe.tokens(rid)) != n:
        raise CaseFailure(f"a running request ended with {term.output.finish_reason!r} after "
                        f"{len(fe.tokens(rid))}/{n} tokens after an ABORT of an unknown id")


@case("ENG-ABORT-3")
def test_abort_1024_ids(engine):
    fe = engine
    running = start_long(fe, "bulk", 3)
    ids = [fe.new_id("never-added") for _ in range(1024 - len(running))]
    for pos, (rid, _) in zip((0, 511, len(ids)), running):
        ids.insert(pos, rid)
    assert len(ids) == 1024
    fence = abort_fenced(fe, ids)
    busy = goes_quiet(fe, [r for r, _ in running], time.monotonic())
    if busy:
        raise CaseFailure(f"after one ABORT of 1,024 ids, {busy} kept producing tokens")
    late = tokens_past_fence(fe, [r for r, _ in running], fence)
    if late:
        raise CaseFailure(f"after one ABORT of 1,024 ids, {late} got tokens with or after the first output of "
                          f"{fence}, a request ADDed after the ABORT (ECP-ABORT-2.2)")
    for rid, n in running:
        check_aborted(fe, rid, n, fence)
    fe.serves(after="an ABORT of 1,024 ids")


@case("ENG-ABORT-4")
def test_abort_finished_id(engine):
    fe = engine
    rid = fe.new_id("done")
    fe.add(fe.request(rid, max_tokens=2))
    fe.wait_finished(rid, max_tokens=2)
    before = len(fe.seen(rid))
    fe.abort([rid])
    fe.observe()
    if len(fe.seen(rid)) != before:
        raise CaseFailure(f"ABORT of finished {rid} produced {len(fe.seen(rid)) - before} more output(s)")
    fe.serves(after="an ABORT of a finished id")
