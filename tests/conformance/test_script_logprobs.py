"""The scripted engines' logprobs: ``EngineScript.logprobs_asked`` answers exactly what a request asks."""

import struct
import time

from ecp.conformance.frontend.script import ALTERNATIVE_LOGPROB, SCRIPTED_LOGPROB, EngineScript, Generation
from ecp.spec import EngineCoreRequest, SamplingParams


def _request(rid: str, logprobs: int | None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [329, 7], None, SamplingParams(max_tokens=2, logprobs=logprobs), None,
                             time.time(), None, None, None)


def _step_outputs(script: EngineScript, logprobs: int | None) -> list:
    gen = Generation(lambda: script)
    gen.add(_request("r", logprobs))
    outs = []
    for _ in range(2):  # max_tokens=2: two steps end it
        outs += gen.step().outputs[0]
    assert outs[-1].finish_reason is not None
    return outs


def test_logprobs_are_sent_as_the_request_asks():
    script = EngineScript(logprobs_asked=True)
    assert all(o.new_logprobs is None for o in _step_outputs(script, None))
    for k in (0, 2):
        for out in _step_outputs(script, k):
            lp = out.new_logprobs
            token = out.new_token_ids[0]
            assert lp.logprob_token_ids.shape == (1, k + 1) and lp.logprobs.shape == (1, k + 1)
            ids = struct.unpack(f"<{k + 1}q", lp.logprob_token_ids.data)
            assert ids[0] == token and len(set(ids)) == k + 1 and max(ids) < 332
            values = struct.unpack(f"<{k + 1}f", lp.logprobs.data)
            assert values[0] == SCRIPTED_LOGPROB and list(values[1:]) == [ALTERNATIVE_LOGPROB - j for j in range(k)]


def test_without_the_option_no_logprobs_are_sent_even_when_asked():
    assert all(o.new_logprobs is None for o in _step_outputs(EngineScript(), 2))
    # the older option still sends one alternative whatever was asked
    assert all(o.new_logprobs.logprobs.shape == (1, 2) for o in _step_outputs(EngineScript(logprobs=True), None))
