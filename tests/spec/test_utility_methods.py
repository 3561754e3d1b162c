"""The utility method table: binding a call's arguments, and checking an implementation against it."""

from __future__ import annotations

import pytest

from ecp.spec.errors import LocalProtocolError, UtilityArgumentError
from ecp.spec.layout.types import value_matches
from ecp.spec.utility_methods import REQUIRED, UTILITY_METHODS, failure_message, no_such_method


def test_bind_names_the_arguments_and_fills_the_defaults_in_order():
    profile = UTILITY_METHODS["profile"]
    assert profile.bind([False, "run"]) == {"is_start": False, "profile_prefix": "run", "delay_iterations": None,
                                            "max_iterations": None, "profiler_kwargs": None}
    assert UTILITY_METHODS["sleep"].bind([]) == {"level": 1, "mode": "abort"}
    assert UTILITY_METHODS["reset_prefix_cache"].bind([True]) == {"reset_running_requests": True,
                                                                  "reset_connector": False}
    assert UTILITY_METHODS["collective_rpc"].bind(["ping"]) == {"method": "ping", "timeout": None, "args": (),
                                                                "kwargs": None}
    assert UTILITY_METHODS["is_sleeping"].bind([]) == {}


def test_bind_refuses_surplus_and_missing_arguments_with_the_clause():
    with pytest.raises(UtilityArgumentError) as surplus:
        UTILITY_METHODS["sleep"].bind([1, "abort", 3])
    assert surplus.value.clause == "ECP-UTIL-3" and (surplus.value.expected, surplus.value.got) == (2, 3)
    assert surplus.value.message == "sleep() takes at most 2 positional arguments but 3 were given"
    with pytest.raises(UtilityArgumentError) as missing:
        UTILITY_METHODS["collective_rpc"].bind([])
    assert missing.value.message == "collective_rpc() missing required positional argument: 'method'"
    with pytest.raises(UtilityArgumentError):
        UTILITY_METHODS["is_sleeping"].bind([None])
    # the engine's answer to such a call (ECP-UTIL-3), as vLLM writes it
    assert failure_message("sleep", surplus.value.message).startswith("Call to sleep method failed: sleep() takes")
    assert failure_message("x", no_such_method("x")) == (
        "Call to x method failed: 'EngineCoreProc' object has no attribute 'x'")


def test_defaults_are_trailing_and_of_their_argument_type():
    for method in UTILITY_METHODS.values():
        params = method.params or ()
        required = [p.required for p in params]
        assert required == sorted(required, reverse=True), method.name  # no required argument after a default
        for p in params:
            assert p.required == (p.default is REQUIRED)
            if not p.required:
                assert value_matches(p.type, p.default), (method.name, p.name, p.default)


def test_check_signature_compares_names_order_and_defaults():
    sleep = UTILITY_METHODS["sleep"]

    def served(core, level, mode): ...
    def wrapper(self, level: int = 1, mode: str = "abort"): ...
    sleep.check_signature(served, skip=1, own_defaults=False)
    sleep.check_signature(wrapper, skip=1)

    def renamed(self, reset_running_requests=False, reset_external=False): ...
    with pytest.raises(LocalProtocolError, match="reset_prefix_cache: parameters") as bad:
        UTILITY_METHODS["reset_prefix_cache"].check_signature(renamed, skip=1)
    assert bad.value.clause == "ECP-UTIL-1"

    def swapped(core, mode, level): ...
    def wrong_default(self, level: int = True, mode: str = "abort"): ...   # True == 1, but not an int
    def own_default(core, level, mode="abort"): ...
    with pytest.raises(LocalProtocolError, match="parameters"):
        sleep.check_signature(swapped, skip=1, own_defaults=False)
    with pytest.raises(LocalProtocolError, match=r"defaults level=True \(table: 1\)"):
        sleep.check_signature(wrong_default, skip=1)
    with pytest.raises(LocalProtocolError, match="own defaults for \\['mode'\\]"):
        sleep.check_signature(own_default, skip=1, own_defaults=False)
