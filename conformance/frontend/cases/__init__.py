"""The frontend-role cases as pytest tests (run by ``ecp conformance frontend``).

Each test is one catalogue entry; its body lives in
:mod:`ecp.conformance.frontend.scenarios` and runs on the role's event loop
through the ``frontends`` fixture (a :class:`~ecp.conformance.frontend.session.FrontendManager`).
"""
