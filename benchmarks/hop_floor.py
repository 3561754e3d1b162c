"""The frontend<->engine hop against its physical floor and against vLLM 0.33's own client.

One run, one machine, the same pre-encoded frames for every receiver:

* output steps of 1, 64 and 256 streams, shaped like a vLLM 0.33 engine's (every field,
  scheduler stats: ``bench_codec.py``'s frames), sent by a raw-frame engine (this process) on a
  PUSH socket;
* ADD bursts (the golden Python-frontend ADD, one id per request), sent by the frontend on its
  input ROUTER to a raw DEALER (this process).

Each is measured over ipc and tcp for:

* ``floor`` -- bare pyzmq with the protocol's socket types (PULL / ROUTER) and a bare
  ``msgspec`` decoder (outputs) or encoder (ADDs), in a plain blocking loop;
* ``floor+dispatch`` -- the floor plus the least a Python receiver does to hand outputs to
  their streams (a dict lookup and an append per output, one take per stream per message): what
  no Python client can go under;
* ``ecp`` -- ``ecp.reference.client.EngineCoreClient`` (handshake, its protocol machine judging
  every message, registry, dispatch) delivering each output to one consumer task per stream
  (``async for``); ``ecp-push`` -- the same delivering to push-mode listeners
  (``RequestStream.listen``, what ``ecp serve`` uses); for ADDs, ``await client.add(request)``;
* ``vllm`` -- vLLM 0.33's ``AsyncMPClient`` (its output socket task, ``MsgpackDecoder``,
  outputs queue, ``get_output_async``) run in a subprocess of the peer's venv
  (``--peer``, default ``$VLLM_PEER`` or ``~/.cache/vllm-peer-0.33``), the engines "managed
  externally" (``client_addresses``), so it runs without vLLM's engine: the raw engine
  registers on its input ROUTER as an engine would. Delivery to streams is a loop written here
  (``get_output_async()`` then one ``asyncio.Queue`` per request, one consumer task each):
  vLLM's ``OutputProcessor`` (detokenisation, ``RequestOutput``) is frontend work beyond the hop
  and is not included. ADDs: ``await add_request_async(request)`` on requests decoded by vLLM's
  own decoder from the same frames. Skipped, and said so, without a peer.

Figures per (case, transport, receiver): messages/s and tokens/s (output tokens; prompt
tokens for ADDs) over a flat-out run, per-message latency p50/p99 over a paced run (one message
in flight: send time in the engine to delivery to the consumer on the same monotonic clock),
and CPU per token (the measured process's CPU time, its ZeroMQ I/O threads included, over the
flat-out run), each the median of ``--rounds`` alternating measurements, then each as a ratio
to the floor of the same case and transport. Every receiver
freezes its startup heap (``gc.freeze()``) before the first measured message, as a serving process
does once it is up.

    python -m benchmarks.hop_floor                              # the table
    python -m benchmarks.hop_floor --messages 50 --paced 20 --cases 64 --transports ipc --rounds 1
    python -m benchmarks.hop_floor --profile ecp-push:256        # cProfile of that receiver
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

RECEIVERS = ("floor", "floor+dispatch", "ecp", "ecp-push", "vllm")
#: receivers that differ only in how outputs reach their streams: one ADD measurement each is enough
OUTPUTS_ONLY = ("floor+dispatch", "ecp-push")
CASES = ("1", "64", "256", "add")
ENGINE_IDENTITY = (0).to_bytes(2, "little")
ACK_TIMEOUT_MS = 60_000


def default_peer() -> Path:
    return Path(os.environ.get("VLLM_PEER", Path.home() / ".cache" / "vllm-peer-0.33"))


# ------------------------------------------------------------------ frames (orchestrator side)
def output_id(i: int) -> str:
    """The request id of stream ``i`` in an output step (``bench_codec._output_step``'s)."""
    return f"cmpl-{i:032x}-0"


def build_frames(cases: list[str], adds: int) -> dict[str, Any]:
    """Pre-encoded frames: ``{case: {"frames": [...], "streams": n, "tokens": per message}}``."""
    from benchmarks import bench_codec  # noqa: E402 -- one place builds the benchmark's output steps

    from ecp import spec
    from ecp.spec import golden

    vectors = golden.load_vectors()
    step = next(v for v in vectors if v.producer == "python-engine" and v.kind == "outputs"
                and len(v.frames[0]) > 600 and v.value[1])
    out: dict[str, Any] = {}
    for case in cases:
        if case == "add":
            template = next(v for v in vectors if v.name.startswith("3b.")).frames
            request = spec.decode_input(template)
            frames = [spec.encode_add(msgspec.structs.replace(request, request_id=f"hop-{i}"))
                      for i in range(adds)]
            out[case] = {"frames": frames, "streams": 1, "tokens": len(request.prompt_token_ids or ())}
        else:
            n = int(case)
            frame = bench_codec._output_step(step.value, n)
            decoded = spec.decode_outputs([frame])
            assert [o.request_id for o in decoded.outputs] == [output_id(i) for i in range(n)]
            out[case] = {"frames": [[frame]], "streams": n,
                         "tokens": sum(len(o.new_token_ids) for o in decoded.outputs)}
    return out


# ------------------------------------------------------------------ receivers (measured process)
def _report(obj: dict[str, Any]) -> None:
    """One JSON line on stdout: the receiver's side of the control channel."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _cpu() -> float:
    return time.process_time()


def _startup_done() -> None:
    """Every receiver freezes its startup heap before the first measured message, as a serving
    process does once it is up (``ecp serve``, vLLM's engine core): the collector's full passes
    then scan only what the hop allocates, not the client and its streams."""
    gc.collect()
    gc.freeze()


class _Acks:
    """The measured side of the ack socket (a PAIR to the orchestrator): delivery times back,
    go signals in. Plain (non-asyncio) sends: they cost every receiver the same."""

    def __init__(self, ctx: Any, address: str, zmq: Any) -> None:
        self._zmq = zmq
        self.sock = ctx.socket(zmq.PAIR)
        self.sock.linger = 0
        self.sock.connect(address)

    def delivered(self, t_ns: int, cpu: float | None = None) -> None:
        self.sock.send(msgspec.msgpack.encode((t_ns, cpu)), self._zmq.NOBLOCK)


def run_floor(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Bare pyzmq + bare msgspec, blocking loop: the floor."""
    import zmq

    ctx = zmq.Context()
    acks = _Acks(ctx, args.ack, zmq)
    frames, streams = data["frames"], data["streams"]
    if args.case == "add":
        from ecp.spec import EngineCoreRequest, decode_input
        requests = [decode_input(f) for f in frames]
        assert all(isinstance(r, EngineCoreRequest) for r in requests)
        encode = msgspec.msgpack.Encoder().encode
        router = ctx.socket(zmq.ROUTER)
        router.set_hwm(0)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        router.bind(args.input)
        _report({"bound": True})
        identity, _ = router.recv_multipart()  # the engine's registration
        assert identity == ENGINE_IDENTITY
        _startup_done()
        _report({"ready": True})
        send, add_type = router.send_multipart, frames[0][0]
        for phase, lo, hi in _add_phases(args, len(requests)):
            acks.sock.recv()  # go
            if phase == "paced":
                for r in requests[lo:hi]:
                    t = time.perf_counter_ns()
                    send([identity, add_type, encode(r)])
                    acks.delivered(t)
                    acks.sock.recv()
            else:
                cpu0 = _cpu()
                for r in requests[lo:hi]:
                    send([identity, add_type, encode(r)])
                acks.sock.recv()
                acks.delivered(0, _cpu() - cpu0)
        return
    from ecp.spec.outputs import EngineCoreOutputs
    import ecp.spec.codec as codec

    decode = msgspec.msgpack.Decoder(EngineCoreOutputs, dec_hook=codec._dec_hook, ext_hook=codec._ext_hook).decode
    pull = ctx.socket(zmq.PULL)
    pull.set_hwm(0)
    pull.bind(args.output)
    _report({"bound": True, "ready": True})
    recv = pull.recv_multipart
    deliver = _least_dispatch(streams) if args.role == "floor+dispatch" else None
    _startup_done()
    for phase, count in (("paced", args.paced), ("flat", args.messages)):
        cpu0 = _cpu()
        tokens = 0
        for _ in range(count):
            msg = decode(recv()[0])
            tokens += len(msg.outputs) if deliver is None else deliver(msg)
            if phase == "paced":
                acks.delivered(time.perf_counter_ns())
        assert tokens == count * streams
        if phase == "flat":
            acks.delivered(time.perf_counter_ns(), _cpu() - cpu0)


def _least_dispatch(streams: int) -> Any:
    """The least any Python receiver does to hand a message's outputs to their streams: one
    dict lookup and one append per output, then each stream that got something takes it
    (one call per stream per message). No check, no state, no counters."""
    boxes: dict[str, list[Any]] = {output_id(i): [] for i in range(streams)}

    def take(box: list[Any]) -> int:  # the stream's consumer
        n = len(box)
        box.clear()
        return n

    def deliver(msg: Any) -> int:
        touched = {}
        for out in msg.outputs:
            box = boxes[out.request_id]
            box.append(out)
            touched[out.request_id] = box
        return sum(take(box) for box in touched.values())
    return deliver


def _add_phases(args: argparse.Namespace, total: int) -> list[tuple[str, int, int]]:
    """The ADD frames each phase sends: the paced ones, then the flat-out bursts."""
    assert args.paced + args.messages <= total
    return [("paced", 0, args.paced), ("flat", args.paced, args.paced + args.messages)]


def run_ecp(args: argparse.Namespace, data: dict[str, Any]) -> None:
    asyncio.run(_ecp_main(args, data))


async def _ecp_main(args: argparse.Namespace, data: dict[str, Any]) -> None:
    import zmq
    import zmq.asyncio

    from ecp.reference.client import ClientConfig, EngineCoreClient
    from ecp.spec import EngineCoreRequest, SamplingParams, decode_input

    transport = "ipc" if args.input.startswith("ipc") else "tcp"
    client = EngineCoreClient(ClientConfig(engine_count=1, transport=transport, ready_timeout_s=60))
    await client.bind()
    ctx = zmq.asyncio.Context()
    acks = _Acks(ctx, args.ack, zmq)
    _report({"bound": True, "handshake": client.handshake_address})
    await client.wait_ready()
    frames, streams_n = data["frames"], data["streams"]
    loop = asyncio.get_running_loop()
    try:
        if args.case == "add":
            requests = [decode_input(f) for f in frames]
            _startup_done()
            _report({"ready": True})
            keep = []  # a dropped stream is auto-aborted: hold them all
            for phase, lo, hi in _add_phases(args, len(requests)):
                await acks.sock.recv()
                if phase == "paced":
                    for r in requests[lo:hi]:
                        t = time.perf_counter_ns()
                        keep.append(await client.add(r))
                        acks.delivered(t)
                        await acks.sock.recv()
                else:
                    cpu0 = _cpu()
                    for r in requests[lo:hi]:
                        keep.append(await client.add(r))
                    await acks.sock.recv()
                    acks.delivered(0, _cpu() - cpu0)
            return
        now = time.time()
        total = args.paced + args.messages + 1
        streams = [await client.add(EngineCoreRequest(output_id(i), [1, 2, 3], None,
                                                      SamplingParams(max_tokens=total), None, now,
                                                      None, None, None))
                   for i in range(streams_n)]
        state = {"delivered": 0, "tokens": 0, "cpu0": 0.0}
        paced_n = args.paced * streams_n
        flat_n = (args.paced + args.messages) * streams_n
        done = loop.create_future()

        def on_output(out_tokens: int) -> None:
            state["delivered"] += 1
            state["tokens"] += out_tokens
            d = state["delivered"]
            if d <= paced_n:
                if d % streams_n == 0:
                    acks.delivered(time.perf_counter_ns())
                    if d == paced_n:
                        state["cpu0"] = _cpu()
            elif d == flat_n:
                acks.delivered(time.perf_counter_ns(), _cpu() - state["cpu0"])
                if not done.done():
                    done.set_result(None)

        if args.receiver == "ecp":
            async def consume(stream: Any) -> None:
                try:
                    async for out in stream:
                        on_output(len(out.new_token_ids))
                except Exception:  # the client's shutdown at the end ends every stream
                    pass
            tasks = [asyncio.ensure_future(consume(s)) for s in streams]
        else:
            tasks = []
            for s in streams:
                def listener(s: Any = s) -> None:
                    try:
                        for out in s.take_nowait():
                            on_output(len(out.new_token_ids))
                    except Exception:
                        pass
                s.listen(listener)
        _startup_done()
        _report({"ready": True})
        await asyncio.wait_for(done, ACK_TIMEOUT_MS / 1000)
        for t in tasks:
            t.cancel()
    finally:
        await client.shutdown()
        acks.sock.close()
        ctx.term()


# ------------------------------------------------------------------ vLLM's client (its venv)
def run_vllm(args: argparse.Namespace, data: dict[str, Any]) -> None:
    asyncio.run(_vllm_main(args, data))


async def _vllm_main(args: argparse.Namespace, data: dict[str, Any]) -> None:
    import zmq
    import zmq.asyncio
    from vllm.config import VllmConfig
    from vllm.v1.engine import EngineCoreRequest as VllmRequest
    from vllm.v1.engine.core_client import AsyncMPClient
    from vllm.v1.serial_utils import MsgpackDecoder

    frames, streams_n = data["frames"], data["streams"]
    ctx = zmq.asyncio.Context()
    acks = _Acks(ctx, args.ack, zmq)
    _report({"bound": True})  # the addresses are ours: the engine connects while the client waits for it
    client = AsyncMPClient(VllmConfig(), None, False,
                           client_addresses={"input_address": args.input, "output_address": args.output})
    loop = asyncio.get_running_loop()
    try:
        if args.case == "add":
            decode = MsgpackDecoder(VllmRequest).decode
            requests = [decode(f[1:]) for f in frames]
            _startup_done()
            _report({"ready": True})
            for phase, lo, hi in _add_phases(args, len(requests)):
                await acks.sock.recv()
                if phase == "paced":
                    for r in requests[lo:hi]:
                        t = time.perf_counter_ns()
                        await client.add_request_async(r)
                        acks.delivered(t)
                        await acks.sock.recv()
                else:
                    cpu0 = _cpu()
                    for r in requests[lo:hi]:
                        await client.add_request_async(r)
                    await acks.sock.recv()
                    acks.delivered(0, _cpu() - cpu0)
            return
        state = {"delivered": 0, "cpu0": 0.0}
        paced_n = args.paced * streams_n
        flat_n = (args.paced + args.messages) * streams_n
        done = loop.create_future()
        queues = {output_id(i): asyncio.Queue() for i in range(streams_n)}

        async def consume(q: asyncio.Queue) -> None:
            while True:
                q.get_nowait() if not q.empty() else await q.get()
                state["delivered"] += 1
                d = state["delivered"]
                if d <= paced_n:
                    if d % streams_n == 0:
                        acks.delivered(time.perf_counter_ns())
                        if d == paced_n:
                            state["cpu0"] = _cpu()
                elif d == flat_n:
                    acks.delivered(time.perf_counter_ns(), _cpu() - state["cpu0"])
                    done.set_result(None)

        async def dispatch() -> None:
            while True:
                outs = await client.get_output_async()
                for out in outs.outputs:
                    queues[out.request_id].put_nowait(out)

        tasks = [asyncio.ensure_future(consume(q)) for q in queues.values()]
        tasks.append(asyncio.ensure_future(dispatch()))
        _startup_done()
        _report({"ready": True})
        await asyncio.wait_for(done, ACK_TIMEOUT_MS / 1000)
        for t in tasks:
            t.cancel()
    finally:
        client.shutdown()
        acks.sock.close()
        ctx.term()


# ------------------------------------------------------------------ orchestrator = raw engine
def _free_port() -> int:
    # not ecp.conformance.frontend.launcher.free_port: this file also runs in the vLLM peer's venv,
    # where ecp is not installed (the vllm receiver), so it imports nothing of ecp at module level
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _addresses(transport: str, tmp: str, tag: str) -> tuple[str, str]:
    if transport == "ipc":
        return f"ipc://{tmp}/{tag}-in", f"ipc://{tmp}/{tag}-out"
    return f"tcp://127.0.0.1:{_free_port()}", f"tcp://127.0.0.1:{_free_port()}"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _Receiver:
    """A measured process and its JSON-line control channel."""

    def __init__(self, argv: list[str], env: dict[str, str] | None) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        self._seen: dict[str, Any] = {}

    def expect(self, key: str, timeout: float = 120.0) -> dict[str, Any]:
        import select
        if key in self._seen:
            return self._seen
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"receiver exited ({self.proc.wait()}) before {key!r}")
            try:
                msg = json.loads(line)
            except ValueError:  # a library printed something: not ours
                continue
            if isinstance(msg, dict):
                self._seen.update(msg)
            if key in self._seen:
                return self._seen
        raise TimeoutError(f"receiver sent no {key!r} in {timeout:.0f} s")

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def measure(receiver: str, case: str, transport: str, data: dict[str, Any], frames_file: str, tmp: str,
            args: argparse.Namespace) -> dict[str, Any]:
    """One receiver on one case and transport: the flat-out run and the paced one."""
    import zmq

    ctx = zmq.Context()
    ack = ctx.socket(zmq.PAIR)
    ack.linger = 0
    ack_address = f"ipc://{tmp}/ack-{receiver}-{case}-{transport}"
    ack.bind(ack_address)
    ack.rcvtimeo = ACK_TIMEOUT_MS
    in_addr, out_addr = _addresses(transport, tmp, f"{receiver}-{case}")
    script = str(Path(__file__).resolve())
    common = ["--role", receiver, "--case", case, "--frames-file", frames_file, "--ack", ack_address,
              "--input", in_addr, "--output", out_addr, "--paced", str(args.paced),
              "--messages", str(args.messages)]
    if args.profile == f"{receiver}:{case}":
        common += ["--profile-out", f"{tmp}/profile"]
    env = None
    if receiver == "vllm":
        python = str(args.peer / "venv" / "bin" / "python")
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu",
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", VLLM_LOGGING_LEVEL="ERROR",
                   PYTHONPATH=str(Path(__file__).resolve().parent))
    else:
        python = sys.executable
    rx = _Receiver([python, script, *common], env)
    sockets = []
    try:
        hello = rx.expect("bound")
        if receiver == "ecp" or receiver == "ecp-push":
            io = ecp_engine(ctx, hello["handshake"])
            dealer, push = io.sockets["input[0]"], io.sockets["output[0]"]
            sockets.append(io)
        else:
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.IDENTITY, ENGINE_IDENTITY)
            dealer.set_hwm(0)
            dealer.linger = 0
            dealer.connect(in_addr)
            dealer.send(b"")  # registration, as an engine registers
            push = ctx.socket(zmq.PUSH)
            push.set_hwm(0)
            push.linger = 0
            push.connect(out_addr)
            sockets += [dealer, push]
        if case != "add" and receiver.startswith("ecp"):
            for _ in range(data["streams"]):  # the client's ADDs for the streams the frames name
                dealer.recv_multipart()
        rx.expect("ready")
        dealer.rcvtimeo = ACK_TIMEOUT_MS
        if case == "add":
            result = _drive_adds(ack, dealer, data, args)
        else:
            result = _drive_outputs(ack, push, data, args)
        rx.close()
        if args.profile == f"{receiver}:{case}":
            result["profile"] = f"{tmp}/profile"
        return result
    finally:
        if rx.proc.poll() is None:
            rx.proc.kill()
            rx.proc.wait()
        for s in sockets:
            s.close(0) if not isinstance(s, zmq.Socket) else s.close()
        ack.close()
        ctx.term()


def ecp_engine(ctx: Any, handshake_address: str, max_num_seqs: int = 1024) -> Any:
    """A raw-frame engine's sockets (``EngineSockets``), registered with an ecp client through the
    handshake (engine side of ``ecp.spec.peer``); ``max_num_seqs`` goes in its ready payload."""
    from ecp.spec import EngineCoreReadyResponse, Hello, Ready
    from ecp.spec.peer import EnginePeer
    from ecp.spec.peer.zmq_io import EngineSockets

    peer = EnginePeer(0, hello=Hello(local=True, headless=False), ready=Ready(local=True, headless=False),
                      payload=EngineCoreReadyResponse(
                          max_model_len=1 << 20, num_gpu_blocks=1, block_size=16, dp_stats_address=None,
                          dtype="float32", vllm_version="0.33.0", world_size=1, data_parallel_size=1,
                          tensor_parallel_size=1, pipeline_parallel_size=1, decode_context_parallel_size=1,
                          data_parallel_rank=0, max_num_seqs=max_num_seqs, max_num_batched_tokens=max(max_num_seqs, 8192),
                          instance_id="hop-floor", supports_lora=False, max_loras=0))
    io = EngineSockets(ctx, peer)
    io.handshake(handshake_address, 60.0)
    return io


def _drive_outputs(ack: Any, push: Any, data: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    frame = data["frames"][0]
    latencies = []
    for _ in range(args.paced):  # one message in flight: send time to delivery
        t = time.perf_counter_ns()
        push.send_multipart(frame)
        t_done, _ = msgspec.msgpack.decode(ack.recv())
        latencies.append((t_done - t) / 1e3)
    t0 = time.perf_counter_ns()
    for _ in range(args.messages):
        push.send_multipart(frame)
    t_end, cpu = msgspec.msgpack.decode(ack.recv())
    seconds = (t_end - t0) / 1e9
    return _figures(args.messages, args.messages * data["tokens"], seconds, cpu, latencies)


def _drive_adds(ack: Any, dealer: Any, data: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    expected = data["frames"]
    latencies = []
    ack.send(b"go")
    for i in range(args.paced):  # one ADD in flight: the frontend's call to its arrival here
        got = dealer.recv_multipart()
        t_recv = time.perf_counter_ns()
        t_call, _ = msgspec.msgpack.decode(ack.recv())
        latencies.append((t_recv - t_call) / 1e3)
        _check_add(got, expected[i])
        ack.send(b"next")
    ack.send(b"go")
    t0 = time.perf_counter_ns()
    for i in range(args.paced, args.paced + args.messages):
        got = dealer.recv_multipart()
        if i == args.paced or i % 64 == 0:
            _check_add(got, expected[i])
    seconds = (time.perf_counter_ns() - t0) / 1e9
    ack.send(b"done")
    _, cpu = msgspec.msgpack.decode(ack.recv())
    return _figures(args.messages, args.messages * data["tokens"], seconds, cpu, latencies)


def _check_add(got: list[bytes], expected: list[bytes]) -> None:
    """The frontend sent the request the frame holds (``client_index`` and ``current_wave``, which
    a client stamps, aside): the benchmark measures the same messages for every receiver."""
    from ecp.spec import decode_input

    a, b = decode_input(got), decode_input(expected)
    if msgspec.structs.replace(a, client_index=0, current_wave=0) != \
            msgspec.structs.replace(b, client_index=0, current_wave=0):
        raise AssertionError(f"the engine received another request than the frame: {a!r}")


def _figures(messages: int, tokens: int, seconds: float, cpu: float, latencies: list[float]) -> dict[str, Any]:
    return {"messages": messages, "tokens": tokens, "seconds": seconds,
            "messages_per_s": messages / seconds, "tokens_per_s": tokens / seconds,
            "latency_p50_us": statistics.median(latencies) if latencies else float("nan"),
            "latency_p99_us": _percentile(latencies, 0.99) if latencies else float("nan"),
            "cpu_us_per_token": cpu / tokens * 1e6}


FIGURES = ("messages_per_s", "tokens_per_s", "latency_p50_us", "latency_p99_us", "cpu_us_per_token")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    receivers = [r for r in args.receivers if r != "vllm" or _peer_ok(args.peer)]
    if "vllm" in args.receivers and "vllm" not in receivers:
        print(f"# skipping vllm: no vLLM 0.33 peer venv at {args.peer}", file=sys.stderr)
    adds = args.paced + args.messages
    data = build_frames(args.cases, adds)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hop-") as tmp:
        for case in args.cases:
            frames_file = f"{tmp}/frames-{case}.msgpack"
            with open(frames_file, "wb") as f:
                f.write(msgspec.msgpack.encode(data[case]))
            order = ["floor", *[r for r in receivers if r != "floor" and not (case == "add" and r in OUTPUTS_ONLY)]]
            for transport in args.transports:
                runs: dict[str, list[dict[str, Any]]] = {r: [] for r in order}
                for rnd in range(args.rounds):
                    # every round measures every receiver, in turn (reversed every other round),
                    # so that a change in the machine's load reaches them alike
                    for receiver in order if rnd % 2 == 0 else order[::-1]:
                        fig = measure(receiver, case, transport, data[case], frames_file, tmp, args)
                        if "profile" in fig:
                            import pstats
                            pstats.Stats(fig.pop("profile"), stream=sys.stderr).sort_stats("tottime").print_stats(25)
                        runs[receiver].append(fig)
                medians = {r: {k: statistics.median(f[k] for f in figs) for k in FIGURES}
                           for r, figs in runs.items()}
                floor = medians["floor"]
                for receiver in order:
                    fig = medians[receiver]
                    row = {"case": case, "transport": transport, "receiver": receiver, "rounds": args.rounds,
                           "messages": runs[receiver][0]["messages"], "tokens": runs[receiver][0]["tokens"], **fig}
                    row["ratios"] = {
                        "tokens_per_s": floor["tokens_per_s"] / fig["tokens_per_s"],
                        "latency_p50": fig["latency_p50_us"] / floor["latency_p50_us"],
                        "latency_p99": fig["latency_p99_us"] / floor["latency_p99_us"],
                        "cpu_per_token": fig["cpu_us_per_token"] / floor["cpu_us_per_token"]}
                    rows.append(row)
    return rows


def _peer_ok(peer: Path) -> bool:
    return (peer / "venv" / "bin" / "python").exists()


def table(rows: list[dict[str, Any]]) -> str:
    rounds = rows[0]["rounds"] if rows else 0
    lines = [f"# {platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
             f"{os.getloadavg()[0]:.1f}; medians of {rounds} alternating rounds; "
             "ratios = receiver / floor (tokens/s: floor / receiver, i.e. how many times slower)",
             f"{'case':<6} {'tr':<4} {'receiver':<14} | {'msg/s':>9} {'tok/s':>10} {'p50 us':>8} {'p99 us':>8} "
             f"{'CPU us/tok':>10} | {'tok/s x':>7} {'p50 x':>6} {'p99 x':>6} {'CPU x':>6}"]
    for r in rows:
        q = r["ratios"]
        case = "ADD" if r["case"] == "add" else f"out{r['case']}"
        lines.append(f"{case:<6} {r['transport']:<4} {r['receiver']:<14} | {r['messages_per_s']:>9.0f} "
                     f"{r['tokens_per_s']:>10.0f} {r['latency_p50_us']:>8.1f} {r['latency_p99_us']:>8.1f} "
                     f"{r['cpu_us_per_token']:>10.3f} | {q['tokens_per_s']:>6.2f}x {q['latency_p50']:>5.2f}x "
                     f"{q['latency_p99']:>5.2f}x {q['cpu_per_token']:>5.2f}x")
    return "\n".join(lines)


def _receiver_main(args: argparse.Namespace) -> None:
    with open(args.frames_file, "rb") as f:
        data = msgspec.msgpack.decode(f.read())
    data["frames"] = [[bytes(x) for x in fr] for fr in data["frames"]]
    target = {"floor": run_floor, "floor+dispatch": run_floor, "ecp": run_ecp, "ecp-push": run_ecp,
              "vllm": run_vllm}[args.role]
    args.receiver = args.role
    if args.profile_out:
        import cProfile
        cProfile.runctx("target(args, data)", globals(), {"target": target, "args": args, "data": data},
                        args.profile_out)
    else:
        target(args, data)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--transports", nargs="+", choices=("ipc", "tcp"), default=["ipc", "tcp"])
    ap.add_argument("--receivers", nargs="+", choices=RECEIVERS, default=list(RECEIVERS))
    ap.add_argument("--messages", type=int, default=2000, help="messages in the flat-out run")
    ap.add_argument("--paced", type=int, default=300, help="messages in the paced (latency) run")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measurements of each receiver, alternating; the table has their medians")
    ap.add_argument("--peer", type=Path, default=default_peer(), help="vLLM 0.33 peer directory")
    ap.add_argument("--profile", metavar="RECEIVER:CASE", help="cProfile that receiver (stderr)")
    ap.add_argument("--json", action="store_true")
    # the measured process's own arguments (it is this script, started by the run)
    ap.add_argument("--role", choices=RECEIVERS, help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--frames-file", help=argparse.SUPPRESS)
    ap.add_argument("--ack", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role:
        _receiver_main(args)
        return 0
    rows = run(args)
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
