"""Fixtures of the engine-role cases (registered by the plugin when the engine role runs)."""

from __future__ import annotations

import pytest

from ..plugin import state_of


@pytest.fixture
def engines(request: pytest.FixtureRequest):
    """The :class:`~ecp.conformance.engine.session.EngineManager` of this run."""
    state = state_of(request.config)
    if state is None or state.role != "engine":
        pytest.fail("engine-role cases need --ecp-config with role engine")
    return state.peer_manager()


@pytest.fixture
def engine(engines):
    """The shared engine's :class:`~ecp.conformance.engine.harness_frontend.HarnessFrontend`."""
    return engines.shared().fe
