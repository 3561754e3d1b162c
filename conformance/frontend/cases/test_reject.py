"""Frontend-role rejection-notification cases (``abort_immediately``, spec/PROTOCOL.md §7)."""

from ecp.conformance.frontend import scenarios as s
from ecp.conformance.registry import case


@case("FE-REJECT-1")
def test_rejection_notice_shape(frontends):
    frontends.run(s.rejection_notice_shape)


@case("FE-REJECT-2")
def test_no_notice_without_remote_prefill(frontends):
    frontends.run(s.no_notice_without_remote_prefill)


@case("FE-REJECT-3")
def test_rejected_client_gets_error(frontends):
    frontends.run(s.rejected_client_gets_error)


@case("FE-REJECT-4")
def test_no_notice_without_connector(frontends):
    frontends.run(s.no_notice_without_connector)
