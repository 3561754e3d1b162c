"""The protocol machines: each rule of the tables, from both sides, and recording mode."""

from __future__ import annotations

import msgspec
import pytest

from ecp.spec import (
    EngineCoreOutputs, FinishReason, Hello, LocalProtocolError, Ready, RemoteProtocolError, encode_add,
    encode_outputs,
)
from ecp.spec.control import StartDPWave, UtilityRequest
from ecp.spec.machine import (
    Abort, Add, CoordinatorReady, EngineConnection, EngineDead, EngineHello, EngineReady, FrontendConnection, Init,
    Outputs, Registration, StartWave, UtilityCall, render_table,
)
from ecp.spec.recover import recover_add, recover_add_frames

from machine_pair import Pair, out, ready_response, reply, request


def raises(cls, clause):
    class _Ctx:
        def __enter__(self):
            self.cm = pytest.raises(cls)
            self.info = self.cm.__enter__()
            return self.info

        def __exit__(self, *exc):
            ok = self.cm.__exit__(*exc)
            assert self.info.value.clause == clause, str(self.info.value)
            return ok
    return _Ctx()


# ------------------------------------------------------------------ handshake
def test_a_full_handshake_reaches_ready_on_both_sides():
    p = Pair(ranks=(0, 1), clients=2)
    p.handshake()
    assert p.fe.handshake_done and all(e.ready for e in p.engines.values())
    assert p.fe.missing("READY") == [] and p.fe.engine(1).registered == {0, 1}


def test_handshake_with_a_coordinator_gate():
    p = Pair(ranks=(0, 1), coordinator=True)
    p.handshake()
    assert p.fe.handshake_done and p.fe.gate_open


def test_engine_may_not_send_ready_before_registering_every_input():
    p = Pair(clients=2)
    p.e(EngineHello(0, Hello(local=True, headless=False)))
    p.f(Init(0, p.init()))
    p.e(Registration(0, 0, ready_response(0)))
    with raises(LocalProtocolError, "ECP-HS-5"):
        p.engines[0].send(EngineReady(0, Ready(local=True, headless=False)))


def test_engine_with_a_coordinator_waits_for_the_gate():
    p = Pair(coordinator=True)
    p.e(EngineHello(0, Hello(local=True, headless=False)))
    p.f(Init(0, p.init()))
    p.e(Registration(0, 0, ready_response(0)))
    with raises(LocalProtocolError, "ECP-HS-6"):
        p.engines[0].send(EngineReady(0, Ready(local=True, headless=False)))
    with raises(LocalProtocolError, "ECP-HS-6"):  # the gate opens only after every subscription
        p.fe.send(CoordinatorReady())


def test_frontend_rejects_duplicate_hello_and_ready_and_unknown_identity():
    p = Pair()
    p.handshake()
    hello = p.engines[0]
    with raises(LocalProtocolError, "ECP-HS-7"):
        hello.send(EngineHello(0, Hello(local=True, headless=False)))
    from ecp.spec import encode_handshake
    frame = encode_handshake(Ready(local=True, headless=False))
    with raises(RemoteProtocolError, "ECP-HS-7"):
        p.fe.receive("handshake", [b"\x00\x00", frame])
    with raises(RemoteProtocolError, "ECP-HS-11"):
        p.fe.receive("handshake", [b"\x05\x00", frame])
    with raises(RemoteProtocolError, "ECP-HS-11"):
        p.fe.receive("handshake", [b"\x00\x00\x00", frame])


def test_an_output_sent_on_an_input_socket_names_the_input_rule_and_where_it_belongs():
    """An ERROR answering an undecodable ADD belongs on outputs[i] (ECP-ROB-2.2); sent on input[i]
    instead it breaks ECP-HS-3.2, and the error says so rather than calling it a bad registration."""
    from ecp.spec import encode_handshake
    p = Pair()
    p.handshake()
    error = encode_outputs(out(0, "bad-add", FinishReason.ERROR, error=True))
    with raises(RemoteProtocolError, "ECP-HS-3") as info:
        p.fe.receive("input[0]", [b"\x00\x00", *error])
    assert "outputs[0]" in str(info.value) and "ECP-ROB-2.2" in str(info.value)
    # a second ready payload is still a duplicate registration (ECP-HS-11)
    with raises(RemoteProtocolError, "ECP-HS-11"):
        p.fe.receive("input[0]", [b"\x00\x00", encode_handshake(ready_response(0))])
    # recording mode keeps the violation and carries on
    r = Pair(frontend_mode="record")
    r.handshake()
    assert r.fe.receive("input[0]", [b"\x00\x00", *error]) == []
    assert [v.clause for v in r.fe.violations] == ["ECP-HS-3"]


def test_frontend_accepts_ready_read_before_a_registration():
    p = Pair()
    p.e(EngineHello(0, Hello(local=True, headless=False)))
    p.f(Init(0, p.init()))
    sends = p.engines[0].send(Registration(0, 0, ready_response(0)))
    p.e(EngineReady(0, Ready(local=True, headless=False)))  # READY read first
    p.deliver_to_frontend(0, sends)
    assert p.fe.handshake_done


def test_nothing_goes_to_an_engine_before_it_registered_on_that_input():
    p = Pair()
    p.e(EngineHello(0, Hello(local=True, headless=False)))
    p.f(Init(0, p.init()))
    with raises(LocalProtocolError, "ECP-HS-3"):
        p.fe.send(Add(0, request("a")))


# ------------------------------------------------------------------ requests
def test_request_lifecycle_and_one_terminal_output():
    p = Pair()
    p.handshake()
    p.add(0, "a")
    p.output(0, out(0, "a"))
    p.output(0, out(0, "a", FinishReason.LENGTH))
    assert p.fe.engine(0).request_state("a") == "FINISHED"
    # the engine's own machine refuses a second terminal output ...
    with raises(LocalProtocolError, "ECP-OUT-1"):
        p.engines[0].send(Outputs(0, 0, out(0, "a", FinishReason.STOP)))
    # ... and a frontend receiving one rejects it
    from ecp.spec import encode_outputs
    with raises(RemoteProtocolError, "ECP-OUT-1"):
        p.fe.receive("output[0]", encode_outputs(out(0, "a", FinishReason.STOP)))
    with raises(RemoteProtocolError, "ECP-OUT-1"):
        p.fe.receive("output[0]", encode_outputs(out(0, "never-added")))


def test_two_terminal_outputs_in_one_message():
    from ecp.spec import EngineCoreOutput
    p = Pair()
    p.handshake()
    p.add(0, "a")
    twice = EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput("a", [5], finish_reason=FinishReason.STOP),
                                                       EngineCoreOutput("a", [], finish_reason=FinishReason.STOP)])
    with raises(LocalProtocolError, "ECP-OUT-1"):
        p.engines[0].send(Outputs(0, 0, twice))
    assert p.engines[0].view.request_state("a") == "ADDED"  # nothing applied


def test_outputs_after_a_client_abort_are_tolerated():
    p = Pair()
    p.handshake()
    p.add(0, "a")
    p.f(Abort(0, ["a"]))
    p.output(0, out(0, "a"))
    p.output(0, out(0, "a", FinishReason.ABORT))
    assert p.fe.engine(0).request_state("a") == "ABORTED"
    with raises(LocalProtocolError, "ECP-ABORT-6"):  # a frontend never aborts what it no longer tracks
        p.fe.send(Abort(0, ["a"]))
    p.engines[0].receive("input[0]", [b"\x01", msgspec.msgpack.encode(["zzz"])])  # the engine ignores it


def test_duplicate_add_owes_one_error_and_leaves_the_running_request():
    p = Pair()
    p.handshake()
    p.add(0, "a")
    with raises(LocalProtocolError, "ECP-REQ-8"):
        p.fe.send(Add(0, request("a")))
    p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", *encode_add(request("a"))])])
    p.output(0, out(0, "a", FinishReason.ERROR, error=True))  # the owed ERROR
    p.output(0, out(0, "a"))
    p.output(0, out(0, "a", FinishReason.LENGTH))
    assert p.fe.engine(0).request_state("a") == "FINISHED"


@pytest.mark.parametrize("one_message", [False, True])
def test_a_duplicate_that_reaches_the_engine_after_the_original_ended_runs_as_a_new_request(one_message):
    """The frontend sent the duplicate before it read the original's terminal output; the engine had
    ended the original, so the duplicate is a new request there (ECP-REQ-2 binds only an id in flight
    at the engine). Its outputs take the place of the owed ERROR; one more output after its
    terminal is a violation again."""
    p = Pair(frontend_mode="record")
    p.handshake()
    p.add(0, "a")
    terminal = p.engines[0].send(Outputs(0, 0, out(0, "a", FinishReason.LENGTH)))  # on the wire, not read
    p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", *encode_add(request("a"))])])
    assert p.engines[0].view.request_state("a") == "ADDED"  # a new request at the engine
    p.deliver_to_frontend(0, terminal)
    assert p.fe.engine(0).request("a").owed_errors == 1
    if one_message:
        from ecp.spec import EngineCoreOutput

        both = EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput("a", [5]),
                                                          EngineCoreOutput("a", [6], finish_reason=FinishReason.LENGTH)])
        p.output(0, both)
    else:
        p.output(0, out(0, "a"))
        assert p.fe.engine(0).request_state("a") == "RUNNING"
        p.output(0, out(0, "a", FinishReason.LENGTH))
    assert p.fe.violations == []
    r = p.fe.engine(0).request("a")
    assert (r.state, r.owed_errors) == ("FINISHED", 0)
    p.fe.receive("output[0]", list(encode_outputs(out(0, "a"))))
    assert [v.clause for v in p.fe.violations] == ["ECP-OUT-1"]


def test_abort_immediately_never_produces_output():
    p = Pair()
    p.handshake()
    p.add(0, "r", abort_immediately=True)
    with raises(LocalProtocolError, "ECP-REJECT-1"):
        p.engines[0].send(Outputs(0, 0, out(0, "r")))


def test_add_while_generation_is_paused_is_answered_with_engine_paused():
    p = Pair()
    p.handshake()
    p.call(0, 11, "pause_generation", ["abort", False])
    p.output(0, reply(0, 11, None))
    assert p.fe.engine(0).scheduler == "REJECTING"
    p.add(0, "late")
    with raises(LocalProtocolError, "ECP-REQ-7"):
        p.engines[0].send(Outputs(0, 0, out(0, "late")))
    p.output(0, out(0, "late", FinishReason.ERROR, error=True))
    p.add(0, "notice", abort_immediately=True)  # passes a pause (ECP-REJECT-5)
    p.call(0, 12, "resume_scheduler")
    p.output(0, reply(0, 12, None))
    assert p.fe.engine(0).scheduler == "AWAKE"


def test_output_on_another_clients_socket():
    p = Pair(clients=2)
    p.handshake()
    p.add(0, "a", client=1)
    with raises(LocalProtocolError, "ECP-SOCK-4"):
        p.engines[0].send(Outputs(0, 0, out(0, "a")))
    with raises(LocalProtocolError, "ECP-ROB-4"):
        p.engines[0].send(Outputs(0, 5, out(0, "a")))


# ------------------------------------------------------------------ utility calls
def test_utility_calls_are_matched_by_call_id():
    p = Pair()
    p.handshake()
    p.call(0, 7, "is_sleeping")
    p.output(0, reply(0, 7, False))
    with raises(LocalProtocolError, "ECP-UTIL-1"):
        p.engines[0].send(Outputs(0, 0, reply(0, 7, False)))
    p.output(0, reply(0, -1, None))  # an engine-initiated notice (reserved id) is tolerated
    with raises(LocalProtocolError, "ECP-UTIL-12"):
        p.fe.send(UtilityCall(0, UtilityRequest(0, -2, "is_sleeping", [])))
    p.call(0, 8, "is_sleeping")
    bare = EngineCoreOutputs(engine_index=0, utility_output=msgspec.convert([8, None, None], type=type(
        reply(0, 8).utility_output)))
    with raises(LocalProtocolError, "ECP-UTIL-2"):
        p.engines[0].send(Outputs(0, 0, bare))


def test_a_refused_utility_may_be_answered_with_its_failure_never_a_result():
    from ecp.spec import encode_outputs
    from ecp.spec.recover import recover_utility, recover_utility_frames

    p = Pair()
    p.handshake()
    bad = msgspec.msgpack.encode([0, 11, "is_sleeping", "args"])  # args must be an array
    with pytest.raises(RemoteProtocolError) as info:
        p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", b"\x03", bad])])
    assert (info.value.call_id, info.value.client_index) == (11, 0)
    p.output(0, reply(0, 11, failure="refused"))  # one choice: answered with its failure
    with raises(LocalProtocolError, "ECP-UTIL-1"):  # answered once: no second reply
        p.engines[0].send(Outputs(0, 0, reply(0, 11, failure="refused")))
    with pytest.raises(RemoteProtocolError):
        p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", b"\x03", bad])])
    with raises(LocalProtocolError, "ECP-ROB-1"):  # never with a result
        p.engines[0].send(Outputs(0, 0, reply(0, 11, None)))
    with raises(RemoteProtocolError, "ECP-ROB-1"):
        p.fe.receive("output[0]", encode_outputs(reply(0, 11, None)))
    p.call(0, 11, "is_sleeping")  # the id reused by a call that decodes while the refused one is unanswered
    p.output(0, reply(0, 11, failure="refused"))  # the refused one answered first (an engine inputs in order)
    p.output(0, reply(0, 11, False))
    for _ in range(2):  # two refused messages of one id, a third while a call of that id is pending: each answered
        with pytest.raises(RemoteProtocolError):
            p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", b"\x03", bad])])
    p.call(0, 11, "is_sleeping")
    with pytest.raises(RemoteProtocolError):
        p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", b"\x03", bad])])
    for _ in range(3):
        p.output(0, reply(0, 11, failure="refused"))
    p.output(0, reply(0, 11, False))
    assert recover_utility(msgspec.msgpack.encode([1, 2**64 - 1, 5])).call_id == 2**64 - 1
    for unrecoverable in ([0, -5, "x", []], ["zero", 1, "x", []], [0, True, "x", []], [0], {"a": 1}):
        assert recover_utility(msgspec.msgpack.encode(unrecoverable)) is None
    assert recover_utility(b"\x94\x00\x0b") is None  # cut short: the outer array is not whole
    assert recover_utility_frames([b"\x00", bad]) is None


def test_sleep_state_is_checked_through_is_sleeping():
    p = Pair()
    p.handshake()
    p.call(0, 1, "sleep", [1, "abort"])
    p.output(0, reply(0, 1, None))
    p.call(0, 2, "is_sleeping")
    from ecp.spec import encode_outputs
    with raises(RemoteProtocolError, "ECP-UTIL-8"):
        p.fe.receive("output[0]", encode_outputs(reply(0, 2, False)))
    p.output(0, reply(0, 2, True))
    p.call(0, 3, "wake_up", [None])
    p.output(0, reply(0, 3, True))
    p.call(0, 4, "is_sleeping")
    p.output(0, reply(0, 4, False))
    assert p.fe.engine(0).scheduler == "AWAKE"


# ------------------------------------------------------------------ waves, death
def test_dp_control_goes_only_to_the_coordinator():
    p = Pair(coordinator=True)
    p.handshake()
    p.f(StartWave(0, StartDPWave(3, None)))
    assert p.fe.engine(0).wave == 3 and p.engines[0].view.wave_state == "RUNNING"
    with raises(LocalProtocolError, "ECP-OUT-6"):
        p.engines[0].send(Outputs(0, 0, EngineCoreOutputs(engine_index=0, wave_complete=3)))
    p.e(Outputs(0, -1, EngineCoreOutputs(engine_index=0, wave_complete=3)))
    assert p.fe.engine(0).wave == 4


def test_engine_core_dead_ends_everything():
    p = Pair(clients=2)
    p.handshake()
    p.add(0, "a")
    sends = p.engines[0].send(EngineDead(0))
    assert [s.socket for s in sends] == ["output[0]", "output[1]"]
    p.deliver_to_frontend(0, sends)
    with raises(LocalProtocolError, "ECP-ROB-3"):
        p.fe.send(Add(0, request("b")))
    with raises(LocalProtocolError, "ECP-OUT-8"):
        p.engines[0].send(Outputs(0, 0, out(0, "a")))


# ------------------------------------------------------------------ recording mode, recovery
def test_recording_mode_records_every_violation_and_keeps_going():
    p = Pair(frontend_mode="record")
    p.handshake()
    p.add(0, "a")
    from ecp.spec import encode_outputs
    term = encode_outputs(out(0, "a", FinishReason.LENGTH))
    p.fe.receive("output[0]", term)
    p.fe.receive("output[0]", term)  # a second terminal output
    p.fe.receive("output[0]", encode_outputs(reply(0, 99, 1)))  # a reply nobody asked for
    p.fe.receive("output[0]", [b"\xc1"])  # undecodable
    assert [v.clause for v in p.fe.violations] == ["ECP-OUT-1", "ECP-UTIL-1", "ECP-FRAME-9"]
    assert p.fe.violations[0].frames == term and p.fe.violations[0].rank == 0


def test_an_undecodable_add_yields_its_id_and_allows_the_error_answer():
    eng = EngineConnection(0)
    eng.send(EngineHello(0, Hello(local=True, headless=False)))
    eng.receive("handshake", [msgspec.msgpack.encode({"addresses": {"inputs": ["a"], "outputs": ["b"]},
                                                      "parallel_config": {}})])
    payload = msgspec.msgpack.encode(["bad-1", "not a list"] + [None] * 9 + [0])
    with pytest.raises(RemoteProtocolError) as info:
        eng.receive("input[0]", [b"\x00", payload])
    assert info.value.request_id == "bad-1" and info.value.client_index == 0
    eng.send(Outputs(0, 0, out(0, "bad-1", FinishReason.ERROR, error=True)))
    with raises(LocalProtocolError, "ECP-OUT-1"):
        eng.send(Outputs(0, 0, out(0, "bad-1", FinishReason.ERROR, error=True)))


def test_recover_add_reads_only_what_it_needs():
    pickle_ext = msgspec.msgpack.Ext(1, b"cos\nsystem\n")
    assert recover_add(msgspec.msgpack.encode(["id-9", pickle_ext, 3])).request_id == "id-9"
    assert recover_add(msgspec.msgpack.encode(["id-9", pickle_ext])).client_index is None
    got = recover_add(msgspec.msgpack.encode(["x"] + [0] * 10 + [2]))
    assert (got.request_id, got.client_index) == ("x", 2)
    for bad in (b"", b"\xc1", msgspec.msgpack.encode({"a": 1}), msgspec.msgpack.encode([1, "x"]),
                msgspec.msgpack.encode([]), b"\x92\xa3ab"):
        assert recover_add(bad) is None
    assert recover_add_frames([b"\x01", msgspec.msgpack.encode(["x"])]) is None


def test_every_table_renders_and_cites_known_clauses():
    from ecp.spec.clauses import CLAUSES
    from ecp.spec.machine import TABLES
    for area, table in TABLES.items():
        assert "| state | event |" in render_table(area)
        for row in table.rows:
            assert row.clause in CLAUSES, (area, row)


def test_frontend_machine_is_one_per_deployment():
    fe = FrontendConnection((2, 3), bootstrapped=True, clients=1)
    assert fe.missing("registration") == [2, 3] and fe.missing("HELLO") == []
    with raises(LocalProtocolError, "ECP-HS-11"):
        fe.engine(0)


def test_a_bootstrapped_engine_registers_without_a_handshake_socket():
    eng = EngineConnection(3, bootstrapped=True, clients=2)
    fe = FrontendConnection([3], bootstrapped=True, clients=2)
    with raises(LocalProtocolError, "ECP-HS-7"):  # no handshake socket: no HELLO
        eng.send(EngineHello(3, Hello(local=False, headless=True)))
    for c in (0, 1):
        [send] = eng.send(Registration(3, c, ready_response(3)))
        fe.receive(send.socket, [b"\x03\x00", *send.frames])
    assert eng.ready and fe.handshake_done


# ------------------------------------------------------------------ what the peers rely on
def test_an_engine_machine_flags_a_duplicate_add_for_the_core():
    p = Pair()
    p.handshake()
    [first] = p.f(Add(0, request("a")))
    assert isinstance(first, Add) and not first.duplicate
    [dup] = p.deliver_to_engine(0, [p.fe.send_raw("input[0]", [b"\x00\x00", *encode_add(request("a"))])])
    assert dup.duplicate  # the core answers it with one ERROR (ECP-REQ-2), the running request is left alone
    p.output(0, out(0, "a", FinishReason.LENGTH))
    [again] = p.f(Add(0, request("a")))  # no longer in flight: a reuse, not a duplicate
    assert not again.duplicate


def test_abortable_names_only_ids_the_engine_may_still_answer():
    p = Pair()
    p.handshake()
    for rid in ("running", "finished", "rejected"):
        p.add(0, rid, abort_immediately=rid == "rejected")
    p.output(0, out(0, "running"))
    p.output(0, out(0, "finished", FinishReason.STOP))
    ids = ["running", "finished", "never", "running", "rejected"]
    assert p.fe.abortable(0, ids) == ["running", "rejected"]
    p.f(Abort(0, p.fe.abortable(0, ids)))
    assert p.fe.engine(0).request_state("running") == "ABORTED" and p.fe.abortable(0, ids) == []


def test_a_batch_of_tokens_is_judged_whole_and_a_terminal_inside_it_still_counts():
    from ecp.spec import EngineCoreOutput
    p = Pair(clients=2)
    p.handshake()
    for rid in ("a", "b"):
        p.add(0, rid)
    p.add(0, "c", client=1)
    p.output(0, EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput("a", [1]), EngineCoreOutput("b", [1])]))
    view = p.fe.engine(0)
    assert view.running[0] == {"a", "b"}
    # tokens after a terminal output of the same message: judged in order, not as a batch
    late = EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput("a", [2], finish_reason=FinishReason.STOP),
                                                      EngineCoreOutput("a", [3])])
    with raises(LocalProtocolError, "ECP-OUT-1"):
        p.engines[0].send(Outputs(0, 0, late))
    assert view.request_state("a") == "RUNNING" and view.running[0] == {"a", "b"}  # nothing applied
    # another client's running request in a batch of this client's: not let through by the batch check
    p.output(0, out(0, "c"), client=1)
    mixed = EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput("a", [2]), EngineCoreOutput("c", [2])])
    with raises(LocalProtocolError, "ECP-SOCK-4"):
        p.engines[0].send(Outputs(0, 0, mixed))
    p.output(0, out(0, "a", FinishReason.STOP))
    assert view.running[0] == {"b"} and view.request_state("a") == "FINISHED"


# ------------------------------------------------------------------ send_raw follows the rows
def test_raw_handshake_frames_move_an_engine_machine_only_as_its_rows_say():
    from ecp.spec import encode_handshake
    from ecp.spec.handshake import XSUB_SUBSCRIBE
    p = Pair(clients=2, coordinator=True)
    eng = p.engines[0]
    eng.send_raw("input[0]", [b""])                         # a registration before HELLO: illegal, no move
    assert (eng.view.handshake, eng.view.registered) == ("START", set())
    eng.send_raw("handshake", [b"\xc1"])                    # unreadable: stands for HELLO
    assert eng.view.handshake == "HELLO" and eng.view.hello is None
    eng.receive("handshake", [encode_handshake(p.init())])  # so INIT is legal
    eng.send_raw("input[0]", [b""])                         # a legal registration
    eng.send_raw("input[0]", [b""])                         # a duplicate: illegal, changes nothing
    assert eng.view.registered == {0} and eng.view.handshake == "REGISTERING"
    eng.send_raw("coordinator_input", [XSUB_SUBSCRIBE])    # inputs missing: illegal, followed to SUBSCRIBED
    assert eng.view.handshake == "SUBSCRIBED"
    eng.send_raw("handshake", [encode_handshake(Ready(local=True, headless=False))])  # gate closed: followed
    assert eng.ready and eng.view.ready == Ready(local=True, headless=False)
    [reg] = eng.send(Registration(0, 1, ready_response(0)))  # READY × a new input is legal
    assert reg.socket == "input[1]" and eng.view.registered == {0, 1}
    eng.send_raw("output[0]", [b"ENGINE_CORE_DEAD"])
    assert eng.view.liveness == "DEAD" and eng.violations == []


def test_a_recording_frontend_follows_a_raw_init_after_a_first_message_that_was_not_hello():
    from ecp.spec import encode_handshake
    p = Pair(frontend_mode="record")
    [ready] = p.engines[0].send_raw("handshake", [encode_handshake(Ready(local=True, headless=False))]),
    p.fe.receive("handshake", [b"\x00\x00", *ready.frames])  # READY first: recorded, the view stays in START
    assert [v.clause for v in p.fe.violations] == ["ECP-HS-7"] and p.fe.engine(0).handshake == "START"
    init = p.init()
    p.fe.send_raw("handshake", [b"\x00\x00", encode_handshake(init)])  # illegal, followed to REGISTERING
    assert p.fe.engine(0).handshake == "REGISTERING" and p.fe.engine(0).clients == 1
    p.fe.receive("input[0]", [b"\x00\x00", b""])             # so the registration is judged as legal
    assert p.fe.engine(0).registered == {0} and len(p.fe.violations) == 1
    q = Pair(frontend_mode="record")
    q.fe.receive("handshake", [b"\x00\x00", b"\xc1"])        # unreadable first message: recorded, stands for HELLO
    assert q.fe.engine(0).handshake == "HELLO"
    q.fe.send(Init(0, q.init()))                             # INIT is then legal
    assert q.fe.engine(0).handshake == "REGISTERING"


def test_a_cut_short_add_whose_leading_id_is_readable_may_be_answered():
    """ECP-ROB-2: the id of a truncated ADD is readable, not recoverable; an ERROR answer is legal
    at both machines, and so is no answer."""
    full = msgspec.msgpack.encode(["cut-1", [1, 2, 3], None, {"max_tokens": 4}] + [0] * 10)
    got = recover_add(full[: len(full) // 2])
    assert (got.request_id, got.client_index, got.complete) == ("cut-1", None, False)
    assert recover_add(full).complete
    for bad in (b"\x9e\xa5cut", b"\x9e\xc0", b"\xdc\x00", b"\x90"):
        assert recover_add(bad) is None
    p = Pair(frontend_mode="record")
    p.handshake()
    frames = [b"\x00", full[: len(full) // 2]]
    p.fe.send_raw("input[0]", [b"\x00\x00", *frames])
    with pytest.raises(RemoteProtocolError) as info:
        p.engines[0].receive("input[0]", frames)
    assert info.value.request_id == "cut-1"
    answer = p.engines[0].send(Outputs(0, 0, out(0, "cut-1", FinishReason.ERROR, error=True)))
    p.deliver_to_frontend(0, answer)
    assert not p.fe.violations


def test_two_undecodable_adds_of_one_id_may_each_be_answered():
    """ECP-ROB-2: an engine that answers every undecodable ADD sends two ERRORs for two of them
    (they can arrive before the first answer); one answer conforms as well."""
    for answers in (2, 1):
        p = Pair(frontend_mode="record")
        p.handshake()
        frames = [b"\x00", msgspec.msgpack.encode(["twice", [1], None, {"temperature": "hot"}] + [0] * 10)]
        for _ in range(2):
            p.fe.send_raw("input[0]", [b"\x00\x00", *frames])
            with pytest.raises(RemoteProtocolError):
                p.engines[0].receive("input[0]", frames)
        for _ in range(answers):
            p.deliver_to_frontend(0, p.engines[0].send(Outputs(0, 0, out(0, "twice", FinishReason.ERROR, error=True))))
        assert not p.fe.violations
        with pytest.raises(LocalProtocolError):  # a third answer is one too many
            for _ in range(3 - answers):
                p.engines[0].send(Outputs(0, 0, out(0, "twice", FinishReason.ERROR, error=True)))
