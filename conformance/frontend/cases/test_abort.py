"""Frontend-role abort cases: burst coalescing, prompt auto-abort, explicit aborts, stop strings.

The burst of each size runs once per shared launch; its exact-ids case and
its coalescing case judge the same burst.
"""

from ecp.conformance.frontend import scenarios as s
from ecp.conformance.registry import case


@case("FE-ABORT-1")
def test_burst_3_exact_ids(frontends):
    frontends.run(lambda m: s.burst_exact_ids(m, 3))


@case("FE-ABORT-4")
def test_burst_3_coalesced(frontends):
    frontends.run(lambda m: s.burst_coalesced(m, 3))


@case("FE-ABORT-2")
def test_burst_64_exact_ids(frontends):
    frontends.run(lambda m: s.burst_exact_ids(m, 64))


@case("FE-ABORT-5")
def test_burst_64_coalesced(frontends):
    frontends.run(lambda m: s.burst_coalesced(m, 64))


@case("FE-ABORT-3")
def test_burst_2000_exact_ids(frontends):
    frontends.run(lambda m: s.burst_exact_ids(m, 2000))


@case("FE-ABORT-6")
def test_burst_2000_coalesced(frontends):
    frontends.run(lambda m: s.burst_coalesced(m, 2000))


@case("FE-ABORT-7")
def test_single_drop_aborted_promptly(frontends):
    frontends.run(s.single_drop_aborted_promptly)


@case("FE-ABORT-8")
def test_explicit_abort_by_id(frontends):
    frontends.run(s.explicit_abort_by_id)


@case("FE-ABORT-9")
def test_explicit_abort_all(frontends):
    frontends.run(s.explicit_abort_all)


@case("FE-ABORT-10")
def test_stop_string_aborts_engine(frontends):
    frontends.run(s.stop_string_aborts_engine)
