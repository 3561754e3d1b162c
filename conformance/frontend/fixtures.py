"""Fixtures of the frontend-role cases (registered by the plugin when the frontend role runs)."""

from __future__ import annotations

import pytest

from ..plugin import state_of


@pytest.fixture
def frontends(request: pytest.FixtureRequest):
    """The :class:`~ecp.conformance.frontend.session.FrontendManager` of this run."""
    state = state_of(request.config)
    if state is None or state.role != "frontend":
        pytest.fail("frontend-role cases need --ecp-config with role frontend")
    return state.peer_manager()
