"""What `ecp monitor` adds: latency per message and messages/s, monitor vs direct, one run.

A frontend (this process: raw ZeroMQ, handshake ROUTER, input ROUTER, output PULL)
and an echo engine (its own process: answers each ADD at once with one terminal
output of one token) run the same traffic three ways, one after the other:

* ``direct``: the engine connects to the frontend;
* ``monitor-codec``: through ``ecp monitor --validator codec`` (its own process);
* ``monitor-machines``: through ``ecp monitor`` (the protocol machines, the default).

Each way measures request round trips (ADD out, terminal output back: two
messages, both relayed by the monitor) with one request in flight (``idle``) and
with ``--window`` in flight (``loaded``), reports p50/p99 of the round trip, the
added latency per relayed message (the round-trip difference to ``direct``,
halved), and messages/s (ADDs + outputs per second under load). Every way must end
with zero violations (the traffic is conforming).

Usage: python -m benchmarks.monitor_latency [--requests 20000] [--idle-requests 2000]
                                            [--window 64] [--transport ipc|tcp] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time


#: an ABORT of this (never added) id ends the echo engine: a legal message, so the run stays conforming
STOP = "bench-stop"


# ------------------------------------------------------------------ echo engine (own process: this script with --engine-role)
def _engine_main(handshake_address: str) -> None:
    import zmq

    from ecp.spec import (
        EngineCoreOutput, EngineCoreOutputs, EngineCoreReadyResponse, EngineCoreRequest, FinishReason, Hello, Ready,
        decode_input, encode_outputs,
    )
    from ecp.spec.peer import EnginePeer
    from ecp.spec.peer.zmq_io import EngineSockets

    ctx = zmq.Context()
    peer = EnginePeer(0, hello=Hello(local=False, headless=True), ready=Ready(local=False, headless=True),
                      payload=EngineCoreReadyResponse(
                          max_model_len=4096, num_gpu_blocks=1024, block_size=16, dp_stats_address=None,
                          dtype="float32", vllm_version="0.33.0", world_size=1, data_parallel_size=1,
                          tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
                          data_parallel_rank=0, max_num_seqs=1024, max_num_batched_tokens=8192, instance_id="bench",
                          supports_lora=False, max_loras=0))
    io = EngineSockets(ctx, peer)
    io.handshake(handshake_address, 60.0)
    dealer, push = io.sockets["input[0]"], io.sockets["output[0]"]
    while True:
        msg = decode_input(dealer.recv_multipart())
        if msg == [STOP]:  # an ABORT of the stop id
            break
        if isinstance(msg, EngineCoreRequest):
            out = EngineCoreOutputs(engine_index=0, outputs=[EngineCoreOutput(
                msg.request_id, [7], finish_reason=FinishReason.LENGTH)], timestamp=time.time())
            push.send_multipart(encode_outputs(out))
    io.close()
    ctx.destroy(linger=1000)


# ------------------------------------------------------------------ frontend (this process)
class Frontend:
    def __init__(self, ctx, transport: str, tmp: str) -> None:
        import zmq

        def sock(kind, name):
            s = ctx.socket(kind)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.bind(f"ipc://{tmp}/{name}" if transport == "ipc" else "tcp://127.0.0.1:*")
            return s, s.getsockopt_string(zmq.LAST_ENDPOINT)

        self.hs, self.hs_address = sock(zmq.ROUTER, "hs")
        self.inp, self.in_address = sock(zmq.ROUTER, "in")
        self.out, self.out_address = sock(zmq.PULL, "out")

    def handshake(self, timeout_s: float = 30.0) -> None:
        from ecp.spec import EngineHandshakeMetadata, EngineZmqAddresses, engine_identity
        from ecp.spec.peer import FrontendPeer
        from ecp.spec.peer.zmq_io import FrontendSockets

        peer = FrontendPeer([0], EngineHandshakeMetadata(EngineZmqAddresses([self.in_address], [self.out_address]), {}))
        FrontendSockets(peer, {"handshake": self.hs, "input[0]": self.inp}).handshake(timeout_s)
        self.identity = engine_identity(0)

    def run(self, n: int, window: int, rng: random.Random, tag: str) -> tuple[list[float], float]:
        """``n`` requests, ``window`` in flight; returns (round trips in s, elapsed s)."""
        from ecp.spec import EngineCoreRequest, SamplingParams, decode_outputs, encode_add

        sent: dict[str, float] = {}
        rtts: list[float] = []
        prompt = [rng.randrange(3, 30000) for _ in range(32)]
        params = SamplingParams(max_tokens=1, temperature=0.0)

        def send(i: int) -> None:
            rid = f"{tag}-{i}"
            frames = encode_add(EngineCoreRequest(rid, prompt, None, params, None, time.time(), None, None, None))
            sent[rid] = time.perf_counter()
            self.inp.send_multipart([self.identity, *frames])

        t0 = time.perf_counter()
        nxt = 0
        while nxt < min(window, n):
            send(nxt)
            nxt += 1
        while len(rtts) < n:
            if not self.out.poll(30000):
                raise RuntimeError(f"{len(rtts)} of {n} requests answered, then nothing for 30 s")
            msg = decode_outputs(self.out.recv_multipart())
            now = time.perf_counter()
            for o in msg.outputs:
                rtts.append(now - sent.pop(o.request_id))
                if nxt < n:
                    send(nxt)
                    nxt += 1
        return rtts, time.perf_counter() - t0

    def stop_engine(self) -> None:
        from ecp.spec import encode_abort

        self.inp.send_multipart([self.identity, *encode_abort([STOP])])


def _start_monitor(frontend_address: str, listen: str, validator: str, report: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "monitor", "--listen", listen, "--frontend",
                             frontend_address, "--validator", validator, "--console-interval", "0", "--quiet",
                             "--report-json", report], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    m = re.search(r"listening on (\S+)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"ecp monitor did not start: {line!r}")
    return proc, m.group(1)


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def measure(way: str, args: argparse.Namespace) -> dict:
    import zmq

    tmp = tempfile.mkdtemp(prefix="ecp-bench-mon-")
    ctx = zmq.Context()
    fe = Frontend(ctx, args.transport, tmp)
    monitor = engine = None
    report = os.path.join(tmp, "report.json")
    try:
        address = fe.hs_address
        if way != "direct":
            listen = f"ipc://{tmp}/mon-hs" if args.transport == "ipc" else "tcp://127.0.0.1:*"
            monitor, address = _start_monitor(fe.hs_address, listen, way.split("-", 1)[1], report)
        engine = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--engine-role", address])
        fe.handshake()
        rng = random.Random(args.seed)
        fe.run(min(500, args.requests), args.window, rng, "warm")
        idle, _ = fe.run(args.idle_requests, 1, rng, "idle")
        loaded, elapsed = fe.run(args.requests, args.window, rng, "load")
        fe.stop_engine()
        engine.wait(10)
        out = {"way": way, "idle_p50_us": _pct(idle, 50) * 1e6, "idle_p99_us": _pct(idle, 99) * 1e6,
               "loaded_p50_us": _pct(loaded, 50) * 1e6, "loaded_p99_us": _pct(loaded, 99) * 1e6,
               "messages_per_s": 2 * args.requests / elapsed}
        if monitor is not None:
            monitor.terminate()
            monitor.wait(30)
            rep = json.load(open(report))
            out["violations"] = rep["violations_total"]
            out["relayed"] = rep["traffic"]["messages_total"]
        return out
    finally:
        for proc in (monitor, engine):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(5)
        ctx.destroy(linger=0)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20000, help="requests in the loaded run (20000)")
    p.add_argument("--idle-requests", type=int, default=2000, help="requests with one in flight (2000)")
    p.add_argument("--window", type=int, default=64, help="requests in flight under load (64)")
    p.add_argument("--transport", choices=("ipc", "tcp"), default="ipc")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON only")
    p.add_argument("--engine-role", metavar="ADDRESS", help=argparse.SUPPRESS)  # the echo engine's process
    args = p.parse_args(argv)
    if args.engine_role:
        _engine_main(args.engine_role)
        return {}
    rows = [measure(way, args) for way in ("direct", "monitor-codec", "monitor-machines")]
    base = rows[0]
    for r in rows[1:]:
        r["added_per_message_idle_p50_us"] = (r["idle_p50_us"] - base["idle_p50_us"]) / 2
        r["added_per_message_loaded_p50_us"] = (r["loaded_p50_us"] - base["loaded_p50_us"]) / 2
        r["added_per_message_loaded_p99_us"] = (r["loaded_p99_us"] - base["loaded_p99_us"]) / 2
        r["throughput_vs_direct"] = r["messages_per_s"] / base["messages_per_s"]
    summary = {"transport": args.transport, "window": args.window, "requests": args.requests, "rows": rows}
    if args.json:
        print(json.dumps(summary, indent=1))
        return summary
    print(f"transport {args.transport}, {args.requests} requests with {args.window} in flight, "
          f"{args.idle_requests} one at a time; round trip = ADD + terminal output (2 messages)")
    print(f"{'way':<18}{'idle p50':>10}{'idle p99':>10}{'load p50':>10}{'load p99':>10}{'msg/s':>10}"
          f"{'added/msg p50 idle|load':>26}{'vs direct':>10}")
    for r in rows:
        added = (f"{r['added_per_message_idle_p50_us']:.0f} | {r['added_per_message_loaded_p50_us']:.0f} us"
                 if "throughput_vs_direct" in r else "")
        ratio = f"{r['throughput_vs_direct']:.2f}x" if "throughput_vs_direct" in r else ""
        print(f"{r['way']:<18}{r['idle_p50_us']:>8.0f}us{r['idle_p99_us']:>8.0f}us{r['loaded_p50_us']:>8.0f}us"
              f"{r['loaded_p99_us']:>8.0f}us{r['messages_per_s']:>10.0f}{added:>26}{ratio:>10}")
    for r in rows[1:]:
        if r.get("violations"):
            print(f"{r['way']}: {r['violations']} violation(s) in conforming traffic")
    return summary


if __name__ == "__main__":
    main()
