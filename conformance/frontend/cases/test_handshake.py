"""Frontend-role handshake cases: the frontend owns the handshake, the scripted engines join it."""

from ecp.conformance.frontend import scenarios as s
from ecp.conformance.registry import case


@case("FE-HS-1")
def test_init_addresses_reachable(frontends):
    frontends.run(s.init_addresses_reachable)


@case("FE-HS-2")
def test_minimal_ready_payload(frontends):
    frontends.run(s.minimal_ready_payload_accepted)


@case("FE-HS-3")
def test_ready_payload_extra_keys(frontends):
    frontends.run(s.ready_payload_extra_keys)


@case("FE-HS-4")
def test_no_ready_fails_clearly(frontends):
    frontends.run(s.no_ready_fails_clearly)
