"""Stateful property tests of the protocol machines.

A frontend machine and an engine machine talk back to back. Random *legal* steps never raise,
and both machines keep the same view of every request and call. Random *illegal* steps always
raise, with the clause the tables name: ``LocalProtocolError`` from the sender's machine, and
-- sent around it -- ``RemoteProtocolError`` from the receiver's, which then has not moved.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ecp.spec import (
    EngineCoreOutputs, FinishReason, LocalProtocolError, RemoteProtocolError, encode_outputs,
)
from ecp.spec.control import StartDPWave, UtilityRequest
from ecp.spec.machine import Abort, Add, Outputs, StartWave, UtilityCall
from ecp.spec.outputs import UtilityOutput

from machine_pair import Pair, out, reply, request

IDS = st.sampled_from([f"r{i}" for i in range(6)])
CALL_IDS = st.integers(1, 3)
TERMINAL = st.sampled_from([FinishReason.STOP, FinishReason.LENGTH, FinishReason.ABORT, FinishReason.ERROR])


def snapshot(view):
    return (view.handshake, view.liveness, view.scheduler, view.wave_state, view.wave,
            {k: (r.state, r.owed_errors) for k, r in view.requests.items()},
            {k: (r.state, r.owed_errors) for k, r in view.closed.items()},
            {k: c.count for k, c in view.calls.items()})


class Machines(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.p = Pair(clients=2, coordinator=True)
        self.p.handshake()
        self.fe = self.p.fe.engine(0)
        self.en = self.p.engines[0].view

    # ------------------------------------------------------------ helpers
    def state(self, rid: str) -> str:
        return self.fe.request_state(rid)

    def illegal(self, clause: str, msg: EngineCoreOutputs, client: int = 0) -> None:
        """``msg`` breaks ``clause``: the engine's machine refuses it, the frontend's rejects it unmoved."""
        event(f"illegal {clause}")
        before_e, before_f = snapshot(self.en), snapshot(self.fe)
        with pytest.raises(LocalProtocolError) as local:
            self.p.engines[0].send(Outputs(0, client, msg))
        assert local.value.clause == clause, str(local.value)
        with pytest.raises(RemoteProtocolError) as remote:
            self.p.fe.receive(f"output[{client}]", encode_outputs(msg))
        assert remote.value.clause == clause, str(remote.value)
        assert snapshot(self.en) == before_e and snapshot(self.fe) == before_f

    def local_error(self, clause: str, ev) -> None:
        event(f"local {clause}")
        before = snapshot(self.fe)
        with pytest.raises(LocalProtocolError) as info:
            self.p.fe.send(ev)
        assert info.value.clause == clause, str(info.value)
        assert snapshot(self.fe) == before

    # ------------------------------------------------------------ legal: frontend
    @rule(rid=IDS, client=st.integers(0, 1), notice=st.booleans())
    def add(self, rid, client, notice):
        if self.state(rid) in ("ADDED", "RUNNING", "PAUSED_ADD"):
            return self.local_error("ECP-REQ-8", Add(0, request(rid, client=client)))
        self.p.add(0, rid, client=client, abort_immediately=notice)

    @rule(rid=IDS)
    def abort(self, rid):
        if self.state(rid) in ("NONE", "FINISHED", "ABORTED"):
            return self.local_error("ECP-ABORT-6", Abort(0, [rid]))
        self.p.f(Abort(0, [rid]))

    @rule(cid=CALL_IDS, method=st.sampled_from(["is_sleeping", "sleep", "wake_up", "pause_generation",
                                                "resume_scheduler", "get_supported_tasks"]))
    def call(self, cid, method):
        if cid in self.fe.calls:
            return self.local_error("ECP-UTIL-1", UtilityCall(0, UtilityRequest(0, cid, method, [])))
        args = {"sleep": [1, "abort"], "wake_up": [None], "pause_generation": ["abort", False]}.get(method, [])
        self.p.call(0, cid, method, args)

    @rule(method=st.sampled_from(["sleep", "wake_up", "pause_generation", "resume_scheduler", "is_sleeping"]))
    def call_and_reply(self, method):
        cid = 100 + len(method)
        if cid not in self.fe.calls:
            self.call(cid, method)
            self.engine_reply(cid, False)

    @rule(wave=st.integers(0, 5))
    def start_wave(self, wave):
        self.p.f(StartWave(0, StartDPWave(wave, None)))

    # ------------------------------------------------------------ legal: engine
    @rule(rid=IDS, terminal=st.booleans(), reason=TERMINAL)
    def engine_output(self, rid, terminal, reason):
        st_ = self.state(rid)
        r = self.en.request(rid)
        if st_ in ("ADDED", "RUNNING", "ABORTED") or (st_ == "PAUSED_ADD" and terminal and reason == FinishReason.ERROR):
            msg = out(0, rid, reason if terminal else None, error=reason == FinishReason.ERROR)
            self.p.output(0, msg, client=r.client)
        elif st_ == "PAUSED_ADD":
            self.illegal("ECP-REQ-7", out(0, rid, reason if terminal else None), client=r.client)
        elif st_ == "REJECTED" and not (terminal and reason == FinishReason.ERROR):
            self.illegal("ECP-REJECT-1", out(0, rid, reason if terminal else None), client=r.client)
        elif st_ in ("NONE", "FINISHED") and not (r is not None and r.owed_errors):
            self.illegal("ECP-OUT-1", out(0, rid, reason if terminal else None))

    @rule(rid=IDS)
    def owed_error(self, rid):
        r = self.en.request(rid)
        if r is not None and r.owed_errors:
            self.p.output(0, out(0, rid, FinishReason.ERROR, error=True), client=r.client)

    @rule(cid=CALL_IDS, fail=st.booleans())
    def engine_reply(self, cid, fail):
        call = self.en.calls.get(cid)
        if call is None:
            return self.illegal("ECP-UTIL-1", reply(0, cid, True))
        value = {"is_sleeping": self.en.scheduler != "AWAKE", "wake_up": True,
                 "get_supported_tasks": ["generate"]}.get(call.method)
        if call.method == "is_sleeping" and self.en.scheduler in ("AWAKE", "SLEEPING", "SLEEPING_REJECTING") \
                and self.en.scheduler_calls_pending == 0 and not fail:
            wrong = reply(0, cid, self.en.scheduler == "AWAKE")
            self.illegal("ECP-UTIL-8", wrong, client=call.client)
        self.p.output(0, reply(0, cid, value, failure="boom" if fail else None), client=call.client)

    @rule(cid=CALL_IDS)
    def reply_without_envelope(self, cid):
        call = self.en.calls.get(cid)
        if call is not None:
            bare = EngineCoreOutputs(engine_index=0, utility_output=UtilityOutput(cid, None, None))
            self.illegal("ECP-UTIL-2", bare, client=call.client)

    @rule(w=st.integers(0, 5), coordinator=st.booleans())
    def wave_complete(self, w, coordinator):
        msg = EngineCoreOutputs(engine_index=0, wave_complete=w)
        if coordinator:
            self.p.output(0, msg, client=-1)
        else:
            self.illegal("ECP-OUT-6", msg)

    @rule()
    def engine_notice(self):
        self.p.output(0, reply(0, -1, None))

    @rule(cid=st.sampled_from([-1, -2]))
    def reserved_call_id(self, cid):
        self.local_error("ECP-UTIL-12", UtilityCall(0, UtilityRequest(0, cid, "is_sleeping", [])))

    # ------------------------------------------------------------ invariants
    @invariant()
    def both_sides_agree(self):
        assert snapshot(self.fe)[2:] == snapshot(self.en)[2:]
        assert self.p.fe.violations == [] and self.p.engines[0].violations == []


Machines.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
TestMachines = Machines.TestCase


# ------------------------------------------------------------------ the handshake, against an oracle
from hypothesis import given  # noqa: E402

from ecp.spec import Hello, Ready  # noqa: E402
from ecp.spec.machine import (  # noqa: E402
    CoordinatorReady, CoordinatorSubscribe, EngineHello, EngineReady, Init, Registration,
)

from machine_pair import ready_response  # noqa: E402

STEPS = st.lists(st.sampled_from(["hello", "init", "reg0", "reg1", "subscribe", "gate", "ready"]), max_size=12)


def oracle(step: str, s: dict) -> str | None:
    """The clause a step breaks in handshake state ``s`` (None: legal), from spec/PROTOCOL.md section 2."""
    if step == "hello":
        return "ECP-HS-7" if s["hello"] else None
    if step == "init":
        return "ECP-HS-2" if not s["hello"] else "ECP-HS-7" if s["init"] else None
    if step.startswith("reg"):
        if not s["init"]:
            return "ECP-HS-7"
        return "ECP-HS-11" if int(step[3]) in s["reg"] else None
    if step == "subscribe":
        if not s["coordinator"] or not s["init"] or s["ready"] or s["subscribed"]:
            return "skip"  # no coordinator to subscribe to, or a state the table leaves unlisted
        return "ECP-HS-6" if len(s["reg"]) < 2 else None
    if step == "gate":
        return None if s["coordinator"] and s["subscribed"] else "skip"
    if step == "ready":
        if s["ready"] or not s["hello"] or not s["init"]:
            return "ECP-HS-7"
        if len(s["reg"]) < 2:
            return "ECP-HS-5"
        if s["coordinator"] and not s["gated"]:
            return "ECP-HS-6"
        return None
    raise AssertionError(step)


@settings(max_examples=100, deadline=None)
@given(coordinator=st.booleans(), steps=STEPS)
def test_handshake_steps_raise_exactly_when_the_oracle_says(coordinator, steps):
    p = Pair(clients=2, coordinator=coordinator)
    eng = p.engines[0]
    s = {"hello": False, "init": False, "reg": set(), "subscribed": False, "gated": False, "ready": False,
         "coordinator": coordinator}
    for step in steps:
        clause = oracle(step, s)
        if clause == "skip":
            continue
        if step == "init":
            act = lambda: p.f(Init(0, p.init()))  # noqa: E731
        elif step == "gate":
            act = lambda: p.f(CoordinatorReady())  # noqa: E731
        else:
            event = {"hello": EngineHello(0, Hello(local=True, headless=False)),
                     "reg0": Registration(0, 0, ready_response(0)), "reg1": Registration(0, 1, ready_response(0)),
                     "subscribe": CoordinatorSubscribe(0),
                     "ready": EngineReady(0, Ready(local=True, headless=False))}[step]
            act = lambda event=event: p.e(event)  # noqa: E731
        before = (eng.view.handshake, set(eng.view.registered), p.fe.engine(0).handshake)
        if clause is None:
            act()  # legal: neither machine raises
            s.update({"hello": s["hello"] or step == "hello", "init": s["init"] or step == "init",
                      "subscribed": s["subscribed"] or step == "subscribe", "gated": s["gated"] or step == "gate",
                      "ready": s["ready"] or step == "ready"})
            if step.startswith("reg"):
                s["reg"].add(int(step[3]))
        else:
            with pytest.raises(LocalProtocolError) as info:
                act()
            assert info.value.clause == clause, (step, s, str(info.value))
            assert (eng.view.handshake, set(eng.view.registered), p.fe.engine(0).handshake) == before
    assert p.fe.violations == [] and eng.violations == []
    assert p.fe.handshake_done == s["ready"]
