"""The reference engine's deliberate faults live in one table and one layer (reference/engine/faults.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ecp.reference.engine import BUGS
from ecp.reference.engine.core import Outbound
from ecp.reference.engine.faults import FAULTS, FaultLayer, InjectedCrash
from ecp.spec import (
    DecodeError, EngineCoreOutput, EngineCoreOutputs, FinishReason, UtilityOutput, UtilityRequest, UtilityResult,
)
from ecp.spec.clauses import CLAUSES
from ecp.spec.machine import COORDINATOR, Abort, UtilityCall

REFERENCE = Path(__file__).resolve().parents[2] / "reference"


def test_every_fault_cites_a_clause_and_is_a_bug_knob():
    assert sorted(FAULTS) == sorted(BUGS)
    for fault in FAULTS.values():
        assert fault.clause in CLAUSES and fault.does


def test_no_fault_branch_is_left_in_the_reference_code():
    hits = [str(p.relative_to(REFERENCE)) for p in REFERENCE.rglob("*.py") if "has_bug" in p.read_text()]
    assert hits == []
    # nor a check of a --bug name outside the roles' fault layers (engine, client, frontend)
    knob = re.compile(r"\bBUG_[A-Z_]+\b|\bif\b[^\n:]*\bin [\w.]*\bbugs\b")
    layers = {"faults.py", "engine/faults.py", "client/faults.py", "frontend/faults.py"}
    hits = [f"{p.relative_to(REFERENCE)}: {m.group()}" for p in REFERENCE.rglob("*.py")
            if str(p.relative_to(REFERENCE)) not in layers for m in knob.finditer(p.read_text())]
    assert hits == []


def test_an_inactive_layer_changes_nothing():
    layer = FaultLayer([], 0)
    ob = Outbound(0, EngineCoreOutputs(outputs=[EngineCoreOutput("a", [1], finish_reason=FinishReason.STOP)]))
    assert not layer and layer.on_output(ob) == [ob]
    assert layer.on_input(Abort(0, ("a",))) == Abort(0, ("a",))
    layer.on_bad_frame(DecodeError("x", clause="ECP-FRAME-9"))  # no crash
    with pytest.raises(ValueError, match="unknown fault"):
        FaultLayer(["nope"], 0)


def test_faults_rewrite_messages_on_their_way():
    layer = FaultLayer(["no-terminal-output", "duplicate-output", "wrong-call-id", "wave-complete-to-client",
                        "ignore-abort", "reset-prefix-cache-fails", "crash-on-bad-frame"], 1)
    term = EngineCoreOutput("a", [5], finish_reason=FinishReason.LENGTH)
    out = layer.on_output(Outbound(0, EngineCoreOutputs(engine_index=1, outputs=[term])))
    assert [o.payload.outputs[0].finish_reason for o in out] == [None, FinishReason.LENGTH]
    assert layer.on_output(Outbound(COORDINATOR, EngineCoreOutputs(wave_complete=3)))[0].client_index == 0
    assert layer.on_input(Abort(1, ("a",))) is None
    layer.on_input(UtilityCall(1, UtilityRequest(0, 7, "reset_prefix_cache", [False, False])))
    [reply] = layer.on_output(Outbound(0, EngineCoreOutputs(utility_output=UtilityOutput(
        7, None, UtilityResult(None, True)))))
    assert (reply.payload.utility_output.call_id, reply.payload.utility_output.result.value) == (8, False)
    with pytest.raises(InjectedCrash):
        layer.on_bad_frame(DecodeError("x", clause="ECP-FRAME-9"))


def test_waking_from_sleep_ends_the_refusal_a_pause_began_as_the_core_does():
    """A pause_generation (mode abort) refuses ADDs until the scheduler resumes; a wake_up from
    sleep resumes it (utilities.wake_up). The abort_immediately fault acts only while refusing."""
    from ecp.spec import EngineCoreRequest, SamplingParams
    from ecp.spec.machine import Add

    layer = FaultLayer(["abort-immediately-paused-error"], 0)
    add = Add(0, EngineCoreRequest("r", [1], None, SamplingParams(max_tokens=2), None, 0.0, None, None, None,
                                   abort_immediately=True))
    call = iter(range(100))
    for method, args in (("pause_generation", ["abort"]), ("sleep", [1])):
        layer.on_input(UtilityCall(0, UtilityRequest(0, next(call), method, args)))
    assert layer.on_input(add).request.abort_immediately is False  # refusing: the fault rewrites it
    layer.on_input(UtilityCall(0, UtilityRequest(0, next(call), "wake_up", [None])))
    assert layer.on_input(add) == add  # resumed: the ADD passes as it came
