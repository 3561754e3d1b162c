"""The peer skeletons (ecp.spec.peer), sans-IO: an EnginePeer and a FrontendPeer run the whole
handshake against each other with no socket; deviations break exactly one step."""

from __future__ import annotations

import pytest

from ecp.spec import (
    EngineCoreReadyResponse, EngineHandshakeMetadata, EngineZmqAddresses, HandshakeError, Hello, LocalProtocolError,
    Ready, encode_handshake,
)
from ecp.spec.machine import Add, Send, parse_socket
from ecp.spec.peer import FORCE, TWICE, WITHHOLD, Connect, Deviation, EnginePeer, FrontendPeer, Stage, Step, Wait


def payload(rank: int, max_model_len: int = 256) -> EngineCoreReadyResponse:
    return EngineCoreReadyResponse(
        max_model_len=max_model_len, num_gpu_blocks=8, block_size=16, dp_stats_address=None, dtype="float32",
        vllm_version="0.33.0", world_size=1, data_parallel_size=2, tensor_parallel_size=1,
        pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=rank, max_num_seqs=8,
        max_num_batched_tokens=64, instance_id=f"t{rank}", supports_lora=False, max_loras=0)


def init(clients: int = 1, coordinator: bool = False) -> EngineHandshakeMetadata:
    return EngineHandshakeMetadata(EngineZmqAddresses(
        [f"ipc://in{i}" for i in range(clients)], [f"ipc://out{i}" for i in range(clients)],
        "ipc://cin" if coordinator else None, "ipc://cout" if coordinator else None), {})


def engine(rank: int, **kw) -> EnginePeer:
    kw.setdefault("payload", payload(rank))
    return EnginePeer(rank, hello=Hello(local=False, headless=True), ready=Ready(local=False, headless=True), **kw)


def deliver(fe: FrontendPeer, eng: EnginePeer, actions) -> list[Send]:
    """Carry the engine's sends to the frontend as its ROUTERs would (identity first); return the
    frontend's answers. Connect actions are checked for the socket kinds the protocol names."""
    answers: list[Send] = []
    for action in actions:
        if isinstance(action, Connect):
            kind = parse_socket(action.socket)[0]
            assert action.kind == {"handshake": "DEALER", "input": "DEALER", "output": "PUSH",
                                   "coordinator_input": "XSUB", "coordinator_output": "PUSH"}[kind]
            continue
        frames = action.frames if action.socket == "coordinator_input" else [eng.identity, *action.frames]
        fe.receive(action.socket, frames)
        answers += fe.actions()
    return answers


def to_engine(eng: EnginePeer, sends: list[Send]) -> None:
    for send in sends:
        assert send.socket == "handshake" and send.frames[0] == eng.identity
        eng.receive("handshake", send.frames[1:])


def test_two_engines_and_a_coordinator_handshake_with_no_socket():
    fe = FrontendPeer([0, 1], init(clients=2, coordinator=True))
    engines = [engine(0), engine(1, payload=lambda got: payload(1, max_model_len=128))]
    for eng in engines:
        # the gate waits for every configured engine, not only those that said HELLO so far: the
        # coordinator's READY reaches only subscribers
        assert not fe.gate_due
        answers = deliver(fe, eng, eng.start("ipc://hs"))
        assert eng.waiting == Wait("handshake", Stage.INIT)
        to_engine(eng, answers)
        assert eng.clients == 2 and eng.waiting.stage is Stage.GATE
        deliver(fe, eng, eng.actions())   # connects, two registrations, the subscription
    assert fe.stage is Stage.READY and fe.missing(Stage.READY) == [0, 1]
    assert fe.gate_due
    [gate] = fe.open_gate()
    for eng in engines:
        eng.receive("coordinator_input", gate.frames)
        assert eng.serving and eng.waiting is None
        deliver(fe, eng, eng.actions())   # READY
    assert fe.done and not fe.machine.violations
    result = fe.result()
    assert result.max_model_len == 128 and set(result.ready_responses) == {0, 1}
    # serving: what the frontend sends reaches the engine's machine as typed events
    [add] = engines[0].receive("input[1]", [b"\x00", *encode_add_frames()])
    assert isinstance(add, Add) and add.request.request_id == "r"


def encode_add_frames() -> list[bytes]:
    from ecp.spec import EngineCoreRequest, SamplingParams, encode_add
    return encode_add(EngineCoreRequest("r", [1], None, SamplingParams(max_tokens=1), None, 0.0, None, None, None,
                                        client_index=1))[1:]


def test_ready_is_withheld_until_said():
    fe = FrontendPeer([0], init())
    eng = engine(0, hold_ready=True)
    to_engine(eng, deliver(fe, eng, eng.start("ipc://hs")))
    deliver(fe, eng, eng.actions())
    assert eng.serving and not eng.ready_sent and fe.stage is Stage.READY
    deliver(fe, eng, eng.say_ready())
    assert fe.done


@pytest.mark.parametrize("deviate, clause", [
    (lambda step, i: TWICE if step is Step.REGISTRATION else None, "ECP-HS-11"),   # a second registration
    (lambda step, i: Deviation(raw=(b"\xc1",)) if step is Step.HELLO else None, "ECP-FRAME-9"),  # not msgpack
])
def test_each_deviation_breaks_its_step_and_the_frontend_records_the_rule(deviate, clause):
    fe = FrontendPeer([0], init(), mode="record", answer_any_hello=True)
    eng = engine(0, deviate=deviate)
    to_engine(eng, deliver(fe, eng, eng.start("ipc://hs")))  # a malformed HELLO is answered all the same
    deliver(fe, eng, eng.actions())
    assert {v.clause for v in fe.machine.violations} == {clause}


def test_a_forced_step_goes_out_where_the_rules_forbid_it():
    eng = engine(0, deviate=lambda step, i: FORCE if step is Step.READY else WITHHOLD if step is Step.REGISTRATION
                 else None)
    fe = FrontendPeer([0], init(), mode="record")
    to_engine(eng, deliver(fe, eng, eng.start("ipc://hs")))
    sends = [a for a in eng.actions() if isinstance(a, Send)]
    assert [s.socket for s in sends] == ["handshake"] and eng.machine.view.handshake == "READY"
    unforced = engine(0, deviate=lambda step, i: WITHHOLD if step is Step.REGISTRATION else None)
    unforced.start("ipc://hs")
    with pytest.raises(LocalProtocolError):   # without FORCE the same READY is refused
        unforced.receive("handshake", [encode_handshake(init())])
    # the frontend cannot tell READY from a registration still on its way: it waits for the payload
    deliver(fe, eng, sends)
    assert fe.stage is Stage.REGISTRATION and not fe.machine.violations


def test_a_withheld_step_sends_nothing_and_a_correct_peer_records_nothing():
    fe = FrontendPeer([0], init(), mode="record")
    eng = engine(0, deviate=lambda step, i: WITHHOLD if step is Step.READY else None)
    to_engine(eng, deliver(fe, eng, eng.start("ipc://hs")))
    sends = [a for a in eng.actions() if isinstance(a, Send)]
    assert [s.socket for s in sends] == ["input[0]"]
    deliver(fe, eng, sends)
    assert fe.stage is Stage.READY and not fe.machine.violations


def test_hidden_frames_go_out_before_their_step_without_moving_the_machine():
    hello_again = encode_handshake(Hello(local=False, headless=True))
    eng = engine(0, deviate=lambda step, i: Deviation(before=(Send("handshake", [hello_again]),))
                 if step is Step.REGISTRATION else None)
    fe = FrontendPeer([0], init(), mode="record")
    to_engine(eng, deliver(fe, eng, eng.start("ipc://hs")))
    sends = [a for a in eng.actions() if isinstance(a, Send)]
    assert [s.socket for s in sends] == ["handshake", "input[0]", "handshake"]
    assert eng.machine.view.handshake == "READY"
    deliver(fe, eng, sends)
    assert {v.clause for v in fe.machine.violations} == {"ECP-HS-7"}   # the duplicate HELLO


def test_an_unreadable_init_raises_in_either_mode():
    for mode in ("strict", "record"):
        eng = engine(0, mode=mode)
        eng.start("ipc://hs")
        with pytest.raises(HandshakeError):
            eng.receive("handshake", [b"\x93garbage"])


def test_misuse_is_a_local_error():
    eng = engine(0)
    eng.start("ipc://hs")
    with pytest.raises(LocalProtocolError):
        eng.start("ipc://hs")
    with pytest.raises(LocalProtocolError):
        engine(1, payload=lambda got: payload(1)).start_bootstrapped(["ipc://in"], ["ipc://out"])
    with pytest.raises(LocalProtocolError):
        FrontendPeer([0], None)
    with pytest.raises(LocalProtocolError):
        FrontendPeer([0], init()).result()


def test_a_strict_frontend_refuses_what_a_lenient_one_answers():
    bad = [b"\x00\x00", b"\x81\xa6status\xa5HELLO"]   # a HELLO without local/headless
    with pytest.raises(HandshakeError):
        FrontendPeer([0], init()).receive("handshake", bad)
    lenient = FrontendPeer([0], init(), mode="record", answer_any_hello=True)
    assert lenient.receive("handshake", bad) == []
    [answer] = lenient.actions()
    assert answer.frames[0] == b"\x00\x00" and lenient.machine.violations
    stranger = [b"\x07\x00", encode_handshake(Hello(local=False, headless=True))]
    assert lenient.receive("handshake", stranger) == [] and lenient.progress[b"\x07\x00"].hello is not None
    assert len(lenient.actions()) == 1 and lenient.machine.violations[-1].clause == "ECP-HS-11"


def test_bootstrapped_engines_register_without_a_handshake_socket():
    fe = FrontendPeer([3], None, bootstrapped=True)
    eng = engine(3)
    actions = eng.start_bootstrapped(["ipc://in"], ["ipc://out"])
    assert eng.serving and not any(a.socket == "handshake" for a in actions)
    deliver(fe, eng, actions)
    assert fe.done and fe.result().ready_responses[3].data_parallel_rank == 3
