"""The relay in-process: the reference client (with its DP coordinator, ipc) and two reference
engines talk through the monitor; then a peer that sends garbage."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest
import zmq

from ecp.conformance.monitor.eventlog import EventLog
from ecp.conformance.monitor.machines import MachineValidator
from ecp.conformance.monitor.relay import Relay, RelayThread
from ecp.conformance.monitor.session import Session
from ecp.conformance.monitor.validator import CodecValidator
from ecp.reference.client import ClientConfig, EngineCoreClient
from ecp.reference.engine import launch
from ecp.spec import EngineCoreRequest, FinishReason, Hello, SamplingParams, encode_handshake


def req(rid: str, max_tokens: int, rank=None) -> EngineCoreRequest:
    return EngineCoreRequest(rid, [1, 2, 3, 4], None, SamplingParams(max_tokens=max_tokens, temperature=0.0),
                             None, time.time(), None, None, rank)


async def drain(stream):
    outs = [o async for o in stream]
    return outs


def test_client_and_two_engines_with_coordinator_through_the_monitor(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    session = Session(MachineValidator(), events=events)
    gone: list[dict] = []

    async def main():
        client = EngineCoreClient(ClientConfig(engine_count=2, coordinator=True, handshake_timeout_s=20,
                                               ready_timeout_s=20, utility_timeout_s=20))
        await client.bind()
        relay = RelayThread(Relay(f"ipc://{tmp_path}/monitor-hs", client.handshake_address, session))
        handle = launch(relay.address, 2, mode="thread", max_model_len=300, num_gpu_blocks=256,
                        step_time_ms=1, handshake_timeout_s=20, coordinator_timeout_s=20)
        try:
            await asyncio.wait_for(client.wait_ready(), 20)
            streams = [await client.add(req(f"r{i}", 5)) for i in range(4)]
            for s in streams:
                outs = await asyncio.wait_for(drain(s), 10)
                assert sum(len(o.new_token_ids) for o in outs) == 5
                assert outs[-1].finish_reason == FinishReason.LENGTH
            long = await client.add(req("long", 250, rank=0))
            await asyncio.wait_for(long.__anext__(), 10)
            assert await client.abort(["long"]) == ["long"]
            rest = await asyncio.wait_for(drain(long), 10)
            assert rest[-1].finish_reason == FinishReason.ABORT
            assert await client.is_sleeping() is False
            await client.shutdown()
            # the frontend went away: reported for each engine (its relay sockets stay up)
            deadline = time.monotonic() + 10
            while len(gone) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                events.flush()
                gone[:] = [e for e in map(json.loads, (tmp_path / "events.jsonl").read_text().splitlines())
                           if e["event"] == "frontend_gone"]
        finally:
            await client.shutdown()
            handle.stop()
            relay.close()

    asyncio.run(main())
    assert sorted(e["rank"] for e in gone) == [0, 1]
    snap = session.metrics.snapshot(0)
    assert session.violation_count == 0, [v.summary() for v in session.violations]
    m = snap.messages
    assert m[("to_frontend", "hello")] == 2 and m[("to_frontend", "ready")] == 2
    assert m[("to_engine", "init")] == 2 and m[("to_frontend", "ready_response")] == 2
    # the coordinator traffic passed through the monitor too: both subscriptions and the gate
    assert m[("to_frontend", "subscription")] >= 2 and m[("to_engine", "coordinator_ready")] == 2
    assert m[("to_engine", "add")] == 5 and m[("to_engine", "abort")] == 1
    assert m[("to_engine", "utility")] == 2 and m[("to_frontend", "utility_output")] == 2  # is_sleeping x2
    assert ("to_frontend", "control_outputs") in m or ("to_frontend", "outputs") in m
    assert snap.open_requests == 0 and snap.engines == [0, 1]


@pytest.mark.parametrize("validator, clauses", [
    (CodecValidator, ["ECP-FRAME-9", "ECP-SEC-1"]),
    # the machine takes the malformed first message for a HELLO: the good one is then a duplicate
    (MachineValidator, ["ECP-FRAME-9", "ECP-SEC-1", "ECP-HS-7"]),
])
def test_garbage_from_a_peer_is_reported_and_relayed_and_the_monitor_keeps_going(tmp_path, validator, clauses):
    """A fake engine sends a malformed HELLO, a pickle-carrying HELLO and then a good one; the
    frontend side (a raw ROUTER) receives all three unchanged, and the monitor reports each
    violation with its clause and keeps relaying."""
    session = Session(validator(), context_after=0)
    ctx = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    front.setsockopt(zmq.LINGER, 0)
    front.bind(f"ipc://{tmp_path}/front-hs")
    relay = RelayThread(Relay(f"ipc://{tmp_path}/mon-hs", f"ipc://{tmp_path}/front-hs", session))
    engine = ctx.socket(zmq.DEALER)
    engine.setsockopt(zmq.LINGER, 0)
    engine.setsockopt(zmq.IDENTITY, b"\x00\x00")
    engine.connect(relay.address)
    try:
        bad = b"\xc1\xc1"                                        # never-used msgpack bytes
        pickled = msgspec.msgpack.encode({"status": "HELLO", "local": msgspec.msgpack.Ext(1, b"cos\nsystem\n"),
                                          "headless": True})
        good = encode_handshake(Hello(local=False, headless=True))
        for payload in (bad, pickled, good):
            engine.send(payload)
        got = []
        for _ in range(3):
            assert front.poll(5000), f"the frontend received only {got}"
            got.append(front.recv_multipart())
        assert got == [[b"\x00\x00", bad], [b"\x00\x00", pickled], [b"\x00\x00", good]]
        deadline = time.monotonic() + 5
        while session.seq < 3 and time.monotonic() < deadline:  # observed just after relaying
            time.sleep(0.01)
    finally:
        relay.close()
        engine.close()
        front.close()
        ctx.term()
    assert [v.finding.clause for v in session.violations] == clauses
    assert session.violations[1].msg.seq == 2 and session.violations[1].msg.rank == 0


def test_an_engine_that_leaves_is_seen_leaving_by_the_frontend_and_the_monitor_goes_on(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    session = Session(MachineValidator(), events=events)

    async def main():
        client = EngineCoreClient(ClientConfig(engine_count=2, handshake_timeout_s=20, ready_timeout_s=20))
        await client.bind()
        relay = RelayThread(Relay(f"ipc://{tmp_path}/monitor-hs", client.handshake_address, session))
        first = launch(relay.address, 1, 0, mode="thread", data_parallel_size=2, handshake_timeout_s=20)
        second = launch(relay.address, 1, 1, mode="thread", data_parallel_size=2, handshake_timeout_s=20)
        try:
            await asyncio.wait_for(client.wait_ready(), 20)
            s = await client.add(req("before", 3, rank=1))
            assert (await asyncio.wait_for(drain(s), 10))[-1].finish_reason == FinishReason.LENGTH
            first.stop()  # rank 0 leaves: the monitor closes its side, so the client sees it go
            deadline = time.monotonic() + 10
            while client.healthy and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not client.healthy and "disappeared" in str(client.error)
        finally:
            await client.shutdown()
            second.stop()
            relay.close()

    asyncio.run(main())
    events.close()
    log = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["rank"] for e in log if e["event"] == "engine_gone"][:1] == [0]
    assert session.violation_count == 0 and session.errors == []


def test_fail_closed_stops_relaying_at_the_first_must_violation(tmp_path):
    session = Session(MachineValidator(), context_after=0)
    ctx = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    front.setsockopt(zmq.LINGER, 0)
    front.bind(f"ipc://{tmp_path}/front-hs")
    relay = RelayThread(Relay(f"ipc://{tmp_path}/mon-hs", f"ipc://{tmp_path}/front-hs", session,
                              fail_closed=True))
    engine = ctx.socket(zmq.DEALER)
    engine.setsockopt(zmq.LINGER, 0)
    engine.setsockopt(zmq.IDENTITY, b"\x00\x00")
    engine.connect(relay.address)
    try:
        engine.send(encode_handshake(Hello(local=False, headless=True)))
        assert front.poll(5000) and front.recv_multipart()[1][:1] == b"\x83"  # a good HELLO passes
        engine.send(b"\xc1")  # then a malformed message: checked first, not relayed, relay stops
        relay.thread.join(5)
        assert not relay.thread.is_alive() and relay.relay.tripped
        assert not front.poll(200)
    finally:
        relay.close()
        engine.close()
        front.close()
        ctx.term()
    assert [v.finding.clause for v in session.violations] == ["ECP-FRAME-9"]


def test_prometheus_metrics_and_console_summary(tmp_path):
    from urllib.request import urlopen

    from ecp.conformance.monitor.console import render
    from ecp.conformance.monitor.metrics import start_prometheus

    session = Session(MachineValidator())
    session.observe("to_frontend", 0, "handshake", None, [encode_handshake(Hello(local=False, headless=True))])
    session.observe("to_frontend", 0, "handshake", None, [b"\xc1"])
    server, _ = start_prometheus(session.metrics, session.clock, "127.0.0.1", 0)
    try:
        text = urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'ecp_monitor_messages_total{direction="to_frontend",kind="hello"} 1.0' in text
    assert 'ecp_monitor_violations_total{clause="ECP-FRAME-9"} 1.0' in text
    snap = session.metrics.snapshot(2.0)
    out = render(snap, None)
    assert "hello 0.5/s (1)" in out and "ECP-FRAME-9 x1" in out and "engines 0" in out


def test_the_cli_stops_after_duration_and_reports_an_idle_session(tmp_path):
    from ecp.spec.cli import main as ecp_main

    report = tmp_path / "r.json"
    t0 = time.monotonic()
    assert ecp_main(["monitor", "--listen", f"ipc://{tmp_path}/hs", "--frontend", f"ipc://{tmp_path}/fe",
                     "--duration", "0.3", "--quiet", "--report-json", str(report)]) == 0
    assert time.monotonic() - t0 < 10
    doc = json.loads(report.read_text())
    assert doc["traffic"]["messages_total"] == 0 and doc["exit_code"] == 0 and doc["validator"] == "machines"
    # a listen address that cannot be bound is a usage-level error, not a traceback
    assert ecp_main(["monitor", "--listen", "tcp://256.0.0.1:1", "--frontend", f"ipc://{tmp_path}/fe",
                     "--quiet"]) == 2


def test_a_metrics_port_in_use_is_a_usage_error(tmp_path):
    import socket

    from ecp.spec.cli import main as ecp_main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ecp_main(["monitor", "--listen", f"ipc://{tmp_path}/hs", "--frontend", f"ipc://{tmp_path}/fe",
                         "--metrics-port", str(port), "--quiet"]) == 2


def test_the_relay_is_bounded_per_side_and_says_so_once(tmp_path):
    """Engine side: HELLOs under more identities than --max-engines open no upstream socket; the
    first refusal is one log line, the rest are counted. Frontend side: an INIT naming more clients
    than --max-clients builds no relay sockets and is forwarded as it came, with one line."""
    from ecp.spec import EngineHandshakeMetadata, EngineZmqAddresses

    warned: list[str] = []
    session = Session(CodecValidator(), context_after=0)
    ctx = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    front.setsockopt(zmq.LINGER, 0)
    front.bind(f"ipc://{tmp_path}/front-hs")
    relay = Relay(f"ipc://{tmp_path}/mon-hs", f"ipc://{tmp_path}/front-hs", session, max_engines=3,
                  max_clients=2, warn=warned.append)
    thread = RelayThread(relay)
    engines = []
    hello = encode_handshake(Hello(local=False, headless=True))
    try:
        for rank in range(8):
            engine = ctx.socket(zmq.DEALER)
            engine.setsockopt(zmq.LINGER, 0)
            engine.setsockopt(zmq.IDENTITY, rank.to_bytes(2, "little"))
            engine.connect(thread.address)
            engines.append(engine)
            engine.send(hello)
            if rank < 3:  # admitted one by one, so which three is certain
                assert front.poll(5000), f"HELLO of rank {rank} not relayed"
                assert front.recv_multipart() == [rank.to_bytes(2, "little"), hello]
        deadline = time.monotonic() + 5
        while relay.refused_identities < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert relay.refused_identities == 5 and len(relay.links) == 3
        assert not front.poll(100)  # nothing of the refused identities reached the frontend
        # the five refused HELLOs came on five connections, which a ROUTER reads in no set order: the
        # one line names whichever came first
        first = [rank.to_bytes(2, "little").hex() for rank in range(3, 8)]
        assert len(warned) == 1 and "--max-engines 3" in warned[0], warned
        assert any(f"refused engine identity {identity}:" in warned[0] for identity in first), warned
        # the frontend side: INIT for rank 0 with 3 clients, over the bound of 2
        init = EngineHandshakeMetadata(EngineZmqAddresses([f"ipc://{tmp_path}/in{i}" for i in range(3)],
                                                          [f"ipc://{tmp_path}/out{i}" for i in range(3)]), {})
        raw = encode_handshake(init)
        front.send_multipart([b"\x00\x00", raw])
        assert engines[0].poll(5000), "INIT not forwarded"
        assert engines[0].recv_multipart() == [raw]  # unrewritten: no relay sockets were built
        assert relay.links[b"\x00\x00"].sockets == []
        assert len(warned) == 2 and "names 3 clients" in warned[1] and "--max-clients" in warned[1]
    finally:
        thread.close()
        for engine in engines:
            engine.close()
        front.close()
        ctx.term()
