"""The harness chooses a role's peer manager by type: each manager class is a PeerManager in full."""

from __future__ import annotations

import inspect

import pytest

from ecp.conformance.engine.session import EngineManager, EngineRunConfig
from ecp.conformance.frontend.session import FrontendManager, FrontendRunConfig
from ecp.conformance.plugin import PeerManager

MEMBERS = sorted({n for n in vars(PeerManager) if not n.startswith("_")} | set(PeerManager.__annotations__))


def test_the_protocol_names_what_the_harness_asks():
    assert {"role", "Config", "run_phase", "case_crashed", "failed_closed", "after_failure", "violations",
            "uncited_routes", "release_facts"} <= set(MEMBERS)


@pytest.mark.parametrize("manager, role, config", [(EngineManager, "engine", EngineRunConfig),
                                                   (FrontendManager, "frontend", FrontendRunConfig)])
def test_each_role_s_manager_has_every_member(manager, role, config):
    assert manager.role == role and manager.Config is config
    missing = [n for n in MEMBERS if not hasattr(manager, n)]
    assert missing == []
    for name in MEMBERS:
        want = getattr(PeerManager, name, None)
        if callable(want) and name != "Config":
            have = inspect.signature(getattr(manager, name)).parameters
            assert list(have) == list(inspect.signature(want).parameters), name
