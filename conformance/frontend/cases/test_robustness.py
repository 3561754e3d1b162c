"""Frontend-role robustness: a dead engine makes the frontend fail closed (runs last)."""

from ecp.conformance.frontend import scenarios as s
from ecp.conformance.registry import case


@case("FE-ROB-1")
def test_engine_dead_fails_closed(frontends):
    frontends.run(s.engine_dead_fails_closed)
