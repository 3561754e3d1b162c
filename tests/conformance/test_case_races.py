"""A case must not blame an engine for a race it lost to the harness: a long request that reached
its natural end before the engine took the call or ABORT meant to end it (a fast engine, a loaded
harness)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ecp.conformance.engine.cases._common import check_aborted
from ecp.conformance.engine.cases.test_utility import _aborts_before_reply
from ecp.conformance.outcomes import CaseTimeout, Unsupported, CaseFailure
from ecp.spec import EngineCoreOutput, FinishReason, UtilityOutput, UtilityResult


class RacingEngine:
    """Just enough of the harness frontend for _aborts_before_reply: the long request has its first
    token, and the call's reply arrives at ``reply_t`` with the request's terminal output at
    ``end_t`` (harness receive times; one output socket keeps the engine's order)."""

    max_model_len = 24

    def __init__(self, reason: FinishReason, tokens: int, end_t: float, reply_t: float) -> None:
        self.reason, self.count, self.end_t, self.reply_t = reason, tokens, end_t, reply_t
        self.rid = None
        self.called = False

    def new_id(self, tag):
        return f"ecp-{tag}-1"

    def request(self, rid, max_tokens):
        self.rid = rid
        return rid

    def add(self, _request):
        pass

    def wait(self, predicate, _timeout, what):
        assert predicate(), what

    def seen(self, _rid):
        return [object()]

    def tokens(self, _rid):
        return list(range(self.count))

    def terminals(self, _rid):
        if not self.called:
            return []
        out = EngineCoreOutput(request_id=self.rid, new_token_ids=[1], finish_reason=self.reason)
        return [SimpleNamespace(output=out, t=self.end_t, finished_requests={self.rid})]

    def call(self, _method, _args, timeout):
        self.called = True
        return SimpleNamespace(utility=UtilityOutput(call_id=1, result=UtilityResult(None, None)), t=self.reply_t)


N = RacingEngine.max_model_len - 8  # what start_long asks for


def test_a_natural_end_before_the_reply_is_a_race_the_case_cannot_judge():
    with pytest.raises(Unsupported, match="before the engine took"):
        _aborts_before_reply(RacingEngine(FinishReason.LENGTH, N, end_t=1.0, reply_t=2.0), "sleep", [1, "abort"], "s")


def test_a_natural_end_after_the_reply_is_still_a_violation():
    with pytest.raises(CaseFailure, match="expected ABORT"):
        _aborts_before_reply(RacingEngine(FinishReason.LENGTH, N, end_t=3.0, reply_t=2.0), "sleep", [1, "abort"], "s")


def test_a_short_length_end_before_the_reply_is_a_violation():
    # a request the call ended early must end with ABORT: LENGTH before its max_tokens is no race
    with pytest.raises(CaseFailure, match="expected ABORT"):
        _aborts_before_reply(RacingEngine(FinishReason.LENGTH, N - 5, end_t=1.0, reply_t=2.0), "sleep", [1, "abort"],
                             "s")


def test_an_abort_before_the_reply_passes():
    _aborts_before_reply(RacingEngine(FinishReason.ABORT, 3, end_t=1.0, reply_t=2.0), "sleep", [1, "abort"], "s")


class AbortedEngine:
    """Just enough of the harness frontend for check_aborted: ``rid`` ended with ``reason`` after
    ``tokens`` tokens, received at ``end_t``; the fence's first output at ``fence_t`` (None: never)."""

    def __init__(self, reason: FinishReason, tokens: int, end_t: float, fence_t: float | None) -> None:
        self.reason, self.count, self.end_t, self.fence_t = reason, tokens, end_t, fence_t

    def terminals(self, rid):
        if rid == "fence":
            return []
        out = EngineCoreOutput(request_id=rid, new_token_ids=[1], finish_reason=self.reason)
        return [SimpleNamespace(output=out, t=self.end_t)]

    def tokens(self, _rid):
        return list(range(self.count))

    def seen(self, rid):
        return [SimpleNamespace(t=self.fence_t)] if rid == "fence" and self.fence_t is not None else []

    def wait(self, predicate, _timeout, what):
        if not predicate():
            raise CaseTimeout(f"no {what}")


def test_a_natural_end_before_the_fence_is_a_race_the_abort_case_cannot_judge():
    with pytest.raises(Unsupported, match="before the engine took the ABORT"):
        check_aborted(AbortedEngine(FinishReason.LENGTH, 16, end_t=1.0, fence_t=2.0), "r", 16, "fence")


@pytest.mark.parametrize("engine, fence", [
    (AbortedEngine(FinishReason.LENGTH, 16, end_t=3.0, fence_t=2.0), "fence"),   # after the fence
    (AbortedEngine(FinishReason.LENGTH, 16, end_t=1.0, fence_t=None), "fence"),  # the fence never answered
    (AbortedEngine(FinishReason.LENGTH, 9, end_t=1.0, fence_t=2.0), "fence"),    # cut short, yet LENGTH
    (AbortedEngine(FinishReason.LENGTH, 16, end_t=1.0, fence_t=2.0), None),      # no fence sent
])
def test_other_non_abort_ends_stay_violations(engine, fence):
    with pytest.raises(CaseFailure, match="may only end with ABORT"):
        check_aborted(engine, "r", 16, fence)
