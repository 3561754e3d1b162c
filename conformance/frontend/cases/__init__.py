"""The frontend-role cases as pytest tests (run by ``ecp conformance frontend``).

Each test is one catalogue entry; its body, an ``async def body(manager)`` next to
it in the same module, runs on the role's event loop through the ``frontends``
fixture (a :class:`~ecp.conformance.frontend.session.FrontendManager`). What the
bodies share lives in ``_common.py`` (budgets, engine programming, held streams)
and ``_burst.py`` (the burst-abort run and its judges).
"""
