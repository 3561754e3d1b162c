"""Seeded garbage in both directions through the monitor: every message arrives unchanged, every
bad one is a finding, and the monitor itself never fails (no monitor error, no lost message)."""

from __future__ import annotations

import random
import threading
import time

import msgspec
import zmq

from ecp.conformance.monitor.machines import MachineValidator
from ecp.conformance.monitor.relay import Relay, RelayThread
from ecp.conformance.monitor.session import Session
from ecp.spec import EngineCoreReadyResponse, EngineHandshakeMetadata, EngineZmqAddresses, Hello, Ready
from ecp.spec.peer import EnginePeer, FrontendPeer
from ecp.spec.peer.zmq_io import EngineSockets, FrontendSockets

N = 300


def _garbage(rng: random.Random) -> list[bytes]:
    kind = rng.randrange(5)
    if kind == 0:  # random bytes, 1..3 frames
        return [rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.randrange(1, 4))]
    if kind == 1:  # a type byte and a random msgpack document
        doc = rng.choice([[1, "x"], {"a": 1}, "s", 1.5, None, [[], {}], list(range(rng.randrange(30)))])
        return [bytes([rng.randrange(0, 8)]), msgspec.msgpack.encode(doc)]
    if kind == 2:  # pickle and unknown ext types, never decoded
        ext = msgspec.msgpack.Ext(rng.choice([1, 2, 9]), b"cos\nsystem\n")
        return [b"\x01", msgspec.msgpack.encode([ext])] if rng.random() < 0.5 else [msgspec.msgpack.encode(ext)]
    if kind == 3:  # truncated msgpack
        return [msgspec.msgpack.encode({"request_id": "r", "x": list(range(20))})[:rng.randrange(1, 10)]]
    return [b"ENGINE_CORE_DEAD"] if rng.random() < 0.5 else [b"\x01"]


def _socket(ctx, kind, identity=None):
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    if identity:
        s.setsockopt(zmq.IDENTITY, identity)
    return s


def _recv_all(sock, n, timeout_s=10.0):
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        if sock.poll(100):
            got.append(sock.recv_multipart())
    return got


def test_seeded_garbage_both_ways_is_relayed_unchanged_and_reported(tmp_path):
    rng = random.Random(18)
    session = Session(MachineValidator(), context_after=2)
    ctx = zmq.Context()
    fe_hs, fe_in, fe_out = _socket(ctx, zmq.ROUTER), _socket(ctx, zmq.ROUTER), _socket(ctx, zmq.PULL)
    for s, name in ((fe_hs, "hs"), (fe_in, "in"), (fe_out, "out")):
        s.bind(f"ipc://{tmp_path}/fe-{name}")
    relay = RelayThread(Relay(f"ipc://{tmp_path}/mon-hs", f"ipc://{tmp_path}/fe-hs", session))
    ident = b"\x00\x00"
    engine = EnginePeer(0, hello=Hello(local=False, headless=True), ready=Ready(local=False, headless=True),
                        payload=EngineCoreReadyResponse(
                            max_model_len=64, num_gpu_blocks=8, block_size=16, dp_stats_address=None,
                            dtype="float32", vllm_version="0.33.0", world_size=1, data_parallel_size=1,
                            tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
                            data_parallel_rank=0, max_num_seqs=8, max_num_batched_tokens=64, instance_id="g",
                            supports_lora=False, max_loras=0))
    io = EngineSockets(ctx, engine, linger_ms={"output": 0})
    frontend = FrontendPeer([0], EngineHandshakeMetadata(
        EngineZmqAddresses([f"ipc://{tmp_path}/fe-in"], [f"ipc://{tmp_path}/fe-out"]), {}))
    try:
        # a conforming handshake through the monitor: the engine's side on a thread, the frontend's here
        joined = threading.Thread(target=io.handshake, args=(relay.address, 10.0))
        joined.start()
        FrontendSockets(frontend, {"handshake": fe_hs, "input[0]": fe_in}).handshake(10.0)
        joined.join(10)
        assert engine.serving and engine.ready_sent
        assert engine.init.addresses.inputs[0] != f"ipc://{tmp_path}/fe-in"  # rewritten to the relay
        inp, out = io.sockets["input[0]"], io.sockets["output[0]"]
        # garbage both ways
        to_engine = [_garbage(rng) for _ in range(N)]
        to_frontend = [_garbage(rng) for _ in range(N)]
        for frames in to_engine:
            fe_in.send_multipart([ident, *frames])
        for frames in to_frontend:
            out.send_multipart(frames)
        assert _recv_all(inp, N) == to_engine
        assert _recv_all(fe_out, N) == to_frontend
        deadline = time.monotonic() + 10
        while session.seq < 4 + 2 * N and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        relay.close()
        io.close(0)
        for s in (fe_hs, fe_in, fe_out):
            s.close()
        ctx.term()
    session.close()
    assert session.errors == []
    assert session.seq == 4 + 2 * N
    assert session.violation_count >= N  # nearly every message breaks some rule
    clauses = set(session.metrics.snapshot(0).violations)
    assert {"ECP-SEC-1", "ECP-FRAME-1"} <= clauses, clauses
