"""Frontend-role request cases: what the ADDs look like and where they go."""

from ecp.conformance.frontend import scenarios as s
from ecp.conformance.registry import case


@case("FE-REQ-1")
def test_add_payload_decodes(frontends):
    frontends.run(s.add_payload_decodes)


@case("FE-REQ-2")
def test_client_index_and_wave(frontends):
    frontends.run(s.client_index_and_wave)


@case("FE-REQ-3")
def test_pinned_rank_reaches_engine(frontends):
    frontends.run(s.pinned_rank_reaches_engine)


@case("FE-REQ-4")
def test_load_spreads(frontends):
    frontends.run(s.load_spreads)
