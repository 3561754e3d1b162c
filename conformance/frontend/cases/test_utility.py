"""Frontend-role DP aggregation cases: utilities fan out and aggregate per method."""

from ecp.conformance.frontend import scenarios as s
from ecp.conformance.registry import case


@case("FE-UTIL-1")
def test_is_sleeping_disagreement_is_error(frontends):
    frontends.run(s.is_sleeping_disagreement_is_error)


@case("FE-UTIL-2")
def test_is_sleeping_agreement(frontends):
    frontends.run(s.is_sleeping_agreement)


@case("FE-UTIL-3")
def test_reset_prefix_cache_and(frontends):
    frontends.run(s.reset_prefix_cache_and)


@case("FE-UTIL-4")
def test_utility_reaches_every_engine(frontends):
    frontends.run(s.utility_reaches_every_engine)
