"""SamplingParams.validation_errors: vLLM's value checks (ECP-REQ-3), one message per broken check."""

from __future__ import annotations

import pytest

from ecp.spec import SamplingParams


def test_valid_params_have_no_errors():
    assert SamplingParams().validation_errors() == []
    assert SamplingParams(temperature=2.0, top_p=1.0, top_k=-1, min_p=1.0, max_tokens=1, min_tokens=1,
                          presence_penalty=-2.0, frequency_penalty=2.0, logprobs=-1).validation_errors() == []


@pytest.mark.parametrize("kwargs, fragment", [
    ({"n": 0}, "n must be at least 1"),
    ({"presence_penalty": 2.5}, "presence_penalty must be in [-2, 2]"),
    ({"frequency_penalty": -3.0}, "frequency_penalty must be in [-2, 2]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be positive"),
    ({"repetition_penalty": float("inf")}, "repetition_penalty must be positive"),
    ({"temperature": -1.0}, "temperature must be in [0, 2]"),
    ({"temperature": float("nan")}, "temperature must be in [0, 2]"),
    ({"top_p": 0.0}, "top_p must be in (0, 1]"),
    ({"top_k": -2}, "top_k must be -1"),
    ({"min_p": 1.5}, "min_p must be in [0, 1]"),
    ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ({"min_tokens": -1}, "min_tokens must be at least 0"),
    ({"max_tokens": 2, "min_tokens": 3}, "min_tokens (3) must be <= max_tokens (2)"),
    ({"stream_interval": 0}, "stream_interval must be at least 1"),
    ({"logprobs": -2}, "logprobs must be -1 or non-negative"),
    ({"prompt_logprobs": -5}, "prompt_logprobs must be -1 or non-negative"),
])
def test_each_broken_check_gives_its_message(kwargs, fragment):
    errs = SamplingParams(**kwargs).validation_errors()
    assert len(errs) == 1 and fragment in errs[0], errs
