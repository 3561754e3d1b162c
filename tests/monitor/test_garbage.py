"""Seeded garbage in both directions through the monitor: every message arrives unchanged, every
bad one is a finding, and the monitor itself never fails (no monitor error, no lost message)."""

from __future__ import annotations

import random
import time

import msgspec
import zmq

from ecp.conformance.monitor.machines import MachineValidator
from ecp.conformance.monitor.relay import Relay, RelayThread
from ecp.conformance.monitor.session import Session
from ecp.spec import (
    EngineCoreReadyResponse, EngineHandshakeMetadata, EngineZmqAddresses, Hello, Ready, decode_init,
    encode_handshake,
)

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
    hs, inp, out = _socket(ctx, zmq.DEALER, ident), _socket(ctx, zmq.DEALER, ident), _socket(ctx, zmq.PUSH)
    try:
        # a conforming handshake through the monitor
        hs.connect(relay.address)
        hs.send(encode_handshake(Hello(local=False, headless=True)))
        assert fe_hs.poll(5000)
        fe_hs.recv_multipart()
        fe_hs.send_multipart([ident, encode_handshake(EngineHandshakeMetadata(
            EngineZmqAddresses([f"ipc://{tmp_path}/fe-in"], [f"ipc://{tmp_path}/fe-out"]), {}))])
        assert hs.poll(5000)
        init = decode_init(hs.recv())
        assert init.addresses.inputs[0] != f"ipc://{tmp_path}/fe-in"  # rewritten to the relay
        inp.connect(init.addresses.inputs[0])
        out.connect(init.addresses.outputs[0])
        inp.send(encode_handshake(EngineCoreReadyResponse(
            max_model_len=64, num_gpu_blocks=8, block_size=16, dp_stats_address=None, dtype="float32",
            vllm_version="0.33.0", world_size=1, data_parallel_size=1, tensor_parallel_size=1,
            pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=0, max_num_seqs=8,
            max_num_batched_tokens=64, instance_id="g", supports_lora=False, max_loras=0)))
        assert fe_in.poll(5000)
        fe_in.recv_multipart()
        hs.send(encode_handshake(Ready(local=False, headless=True)))
        assert fe_hs.poll(5000)
        fe_hs.recv_multipart()
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
        for s in (hs, inp, out, fe_hs, fe_in, fe_out):
            s.close()
        ctx.term()
    session.close()
    assert session.errors == []
    assert session.seq == 4 + 2 * N
    assert session.violation_count >= N  # nearly every message breaks some rule
    clauses = set(session.metrics.snapshot(0).violations)
    assert {"ECP-SEC-1", "ECP-FRAME-1"} <= clauses, clauses
