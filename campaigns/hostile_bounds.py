"""The trust boundary and the bounds under hostile load: three seeded campaigns.

1. ``addresses``: ``ecp serve`` over a KV consumer engine whose allow-list names one ipc
   directory; ``--addresses`` requests (1,000) each name another producer address where a decoy
   listens: host/port and ``tcp://`` forms (a TCP listener each), ``ipc://`` paths and ``ipc://``
   paths climbing out of the allowed directory by ``..`` (a Unix listener each), ``inproc://``
   names and ``tcp://`` addresses with a ZeroMQ ``;`` source prefix. Half carry the trusted proxy's
   header (the engine's allow-list refuses them), half do not (the frontend refuses them). Then one
   request names the allowed producer, whose notice must arrive. Criteria: every address request
   answered 400 naming ``kv_transfer_params``, **0 connections** to any decoy, the allowed notice
   received, the engine alive.
2. ``slow``: ``--slow`` connections (5,000) from one client address send their request headers a
   byte a second, reconnecting when the server closes them, for ``--seconds``; meanwhile a normal
   client (another address) sends completions one after another. Its latency p50/p99 is reported
   beside the same client's on the unloaded server. Criteria: every normal request answered 200,
   the slow connections answered only 408 (header deadline) or 503 (the cap per client), and the
   server's descriptors back to their baseline afterwards.
3. ``monitor``: ``ecp monitor --max-engines M`` in front of a raw frontend socket is fed
   ``--identities`` (100,000) distinct engine identities, each a connection that says HELLO and
   closes. Criteria: exactly M identities reach the frontend, one refusal line, an admitted
   identity still relayed after the flood, and the monitor's descriptors within 32 of their count
   once M were relayed. Its RSS is reported (at the bound, halfway, after), not judged.

``python -m campaigns.hostile_bounds all --seed 0`` prints one JSON object per campaign and exits
1 when a criterion fails. ``tests/reliability/test_hostile_bounds.py`` runs short seeded variants.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import msgspec
import zmq


from campaigns.hostile_http import Server, exchange, read_response, request_bytes  # noqa: E402
from benchmarks.procstat import open_fds, rss_kib  # noqa: E402

from ecp.spec import Hello, encode_handshake  # noqa: E402

TRUST_HEADER = ("X-PD-Proxy", "s3cret")
NORMAL_ADDRESS = "127.0.0.2"
SLOW_ADDRESS = "127.0.0.1"


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _settle(pid: int, baseline: int, bound_s: float) -> int:
    """Wait (bounded) for ``pid``'s descriptors to return to ``baseline``; the last count."""
    end = time.monotonic() + bound_s
    while True:
        now = open_fds(pid)
        if now <= baseline or time.monotonic() > end:
            return now
        await asyncio.sleep(0.1)  # polling /proc: the kernel signals nothing


# ---------------------------------------------------------------- 1. addresses
class Decoys:
    """Listeners at the addresses the requests name; counts every connection made to them."""

    FORMS = ("host-port", "tcp-url", "tcp-source", "ipc", "ipc-climb", "inproc")
    WEIGHTS = (30, 25, 5, 25, 10, 5)

    def __init__(self, n: int, rnd: random.Random, tmp: str) -> None:
        self.socks: list[socket.socket] = []
        self.addresses: list[tuple[str, dict]] = []
        forms = rnd.choices(self.FORMS, self.WEIGHTS, k=n)
        for i, form in enumerate(forms):
            if form in ("host-port", "tcp-url", "tcp-source"):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", 0))
                s.listen(8)
                s.setblocking(False)
                self.socks.append(s)
                port = s.getsockname()[1]
                params = {"host-port": {"remote_host": "127.0.0.1", "remote_port": port},
                          "tcp-url": {"remote_host": f"tcp://127.0.0.1:{port}"},
                          "tcp-source": {"remote_host": f"tcp://127.0.0.1:0;127.0.0.1:{port}"}}[form]
            elif form in ("ipc", "ipc-climb"):
                path = os.path.join(tmp, f"decoy-{i}")
                u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                u.bind(path)
                u.listen(8)
                u.setblocking(False)
                self.socks.append(u)
                params = {"remote_host": f"ipc://{path}" if form == "ipc"
                          else f"ipc://{tmp}/allowed/../decoy-{i}"}
            else:
                params = {"remote_host": f"inproc://decoy-{i}"}
            self.addresses.append((form, params))

    def connections(self) -> int:
        n = 0
        for s in self.socks:
            while True:
                try:
                    conn, _ = s.accept()
                except (BlockingIOError, OSError):
                    break
                conn.close()
                n += 1
        return n

    def close(self) -> None:
        for s in self.socks:
            s.close()


async def addresses(n: int = 1000, *, seed: int = 0, concurrency: int = 32) -> dict[str, Any]:
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="ecp-addr-") as tmp:
        os.mkdir(os.path.join(tmp, "allowed"))
        allowed = f"ipc://{tmp}/allowed/producer"
        decoys = Decoys(n, rnd, tmp)
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(allowed)
        server = Server(f"--kv-role consumer --kv-producer ipc://{tmp}/allowed/ --log-level ERROR",
                        ("--kv-params-trust-header", "=".join(TRUST_HEADER)))
        answers: dict[str, int] = {}
        wrong: list[str] = []
        by_frontend = by_engine = 0
        try:
            host, port = server.host, server.port
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int, form: str, params: dict) -> None:
                nonlocal by_frontend, by_engine
                trusted = i % 2 == 0
                kv = {"do_remote_prefill": True, "remote_engine_id": "p", "remote_request_id": f"a{i}", **params}
                body = json.dumps({"prompt": "x", "max_tokens": 2, "kv_transfer_params": kv}).encode()
                headers = {TRUST_HEADER[0]: TRUST_HEADER[1].encode()} if trusted else {}
                async with sem:
                    status, _, answer = await exchange(host, port, request_bytes("POST", "/v1/completions", body,
                                                                                 headers))
                answers[str(status)] = answers.get(str(status), 0) + 1
                try:
                    err = json.loads(answer)["error"]
                except (ValueError, KeyError, TypeError):
                    err = {}
                if status != 400 or err.get("param") != "kv_transfer_params":
                    if len(wrong) < 10:
                        wrong.append(f"{form} {params}: {status} {answer[:200]!r}")
                elif "kv_producer_not_allowed" in err.get("message", ""):
                    by_engine += 1
                else:
                    by_frontend += 1

            t0 = time.monotonic()
            await asyncio.gather(*(one(i, form, params) for i, (form, params) in enumerate(decoys.addresses)))
            seconds = time.monotonic() - t0
            kv = {"do_remote_prefill": True, "remote_engine_id": "p", "remote_request_id": "allowed-1",
                  "remote_host": allowed}
            ok = await exchange(host, port, request_bytes(
                "POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 2, "kv_transfer_params": kv}).encode(),
                {TRUST_HEADER[0]: TRUST_HEADER[1].encode()}))
            notice = msgspec.msgpack.decode(pull.recv()) if pull.poll(10_000) else None
            # the allowed notice left after every refused request: a decoy connection would be made by now
            connections = decoys.connections()
            health = (await exchange(host, port, request_bytes("GET", "/health", b"", {})))[0]
            alive = server.figures()["engines"] >= 1
        finally:
            exit_code = server.stop()
            pull.close()
            ctx.term()
            decoys.close()
    forms: dict[str, int] = {}
    for form, _ in decoys.addresses:
        forms[form] = forms.get(form, 0) + 1
    result = {"campaign": "addresses", "seed": seed, "addresses": n, "forms": forms, "answers": answers,
              "refused_by_frontend": by_frontend, "refused_by_engine": by_engine, "wrong_answers": wrong,
              "decoy_connections": connections, "allowed_answer": ok[0],
              "allowed_notice": notice == {"type": "free", "request_id": "allowed-1", "engine_id": "p"},
              "health_after": health, "engine_alive": alive, "serve_exit_code": exit_code,
              "seconds": round(seconds, 1)}
    result["passed"] = (not wrong and connections == 0 and by_frontend + by_engine == n and ok[0] == 200
                        and result["allowed_notice"] and health == 200 and alive and exit_code == 0)
    return result


# ---------------------------------------------------------------- 2. slow headers
async def _normal_client(host: str, port: int, stop: asyncio.Event, count: int | None = None) -> tuple[list[float], dict]:
    body = json.dumps({"prompt": "normal", "max_tokens": 4}).encode()
    data = request_bytes("POST", "/v1/completions", body, {"Content-Type": b"application/json"})
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    while not stop.is_set() and (count is None or len(latencies) < count):
        t0 = loop.time()
        status, _, _ = await exchange(host, port, data, local=NORMAL_ADDRESS)
        latencies.append(loop.time() - t0)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return latencies, statuses


async def slow_headers(slow: int = 5000, *, seed: int = 0, seconds: float = 20.0, header_timeout_s: float = 10.0,
                       unloaded_requests: int = 200, per_client: int | None = None) -> dict[str, Any]:
    rnd = random.Random(seed)
    cap = ("--max-connections-per-client", str(per_client)) if per_client is not None else ()
    server = Server("--log-level ERROR", ("--http-header-timeout", str(header_timeout_s), *cap))
    outcomes: dict[str, int] = {}
    try:
        host, port = server.host, server.port
        warm = asyncio.Event()
        await _normal_client(host, port, warm, 20)
        baseline = open_fds(server.proc.pid)
        unloaded, unloaded_statuses = await _normal_client(host, port, asyncio.Event(), unloaded_requests)
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"X-Slow: " + b"s" * 64 + b"\r\n")
        stop = asyncio.Event()
        connections = 0

        async def slow_client(delay: float) -> None:
            nonlocal connections
            await asyncio.sleep(delay)  # spread the openings (seeded), not synchronisation
            while not stop.is_set():
                try:
                    reader, writer = await asyncio.open_connection(host, port, local_addr=(SLOW_ADDRESS, 0))
                except OSError as exc:
                    outcomes[f"connect: {type(exc).__name__}"] = outcomes.get(f"connect: {type(exc).__name__}", 0) + 1
                    return
                connections += 1
                answer = asyncio.ensure_future(read_response(reader))
                try:
                    for byte in head:
                        if answer.done() or stop.is_set():
                            break
                        writer.write(bytes([byte]))
                        await asyncio.wait({answer, asyncio.ensure_future(stop.wait())}, timeout=1.0,
                                           return_when=asyncio.FIRST_COMPLETED)
                    if not answer.done() and not stop.is_set():
                        await asyncio.wait({answer, asyncio.ensure_future(stop.wait())},
                                           return_when=asyncio.FIRST_COMPLETED)
                    if answer.done():
                        try:
                            status = str(answer.result()[0])
                        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                            status = "closed"
                        outcomes[status] = outcomes.get(status, 0) + 1
                finally:
                    answer.cancel()
                    writer.close()

        tasks = [asyncio.ensure_future(slow_client(rnd.uniform(0, 1.0))) for _ in range(slow)]
        normal = asyncio.ensure_future(_normal_client(host, port, stop))
        await asyncio.sleep(seconds)  # the phase's length
        stop.set()
        loaded, loaded_statuses = await normal
        await asyncio.gather(*tasks, return_exceptions=True)
        after = await _settle(server.proc.pid, baseline, 20.0)
        alive = server.figures()["engines"] >= 1
    finally:
        exit_code = server.stop()
    ms = lambda v: round(v * 1000, 1)  # noqa: E731
    result = {"campaign": "slow-headers", "seed": seed, "slow_clients": slow, "seconds": seconds,
              "header_timeout_s": header_timeout_s, "max_connections_per_client": per_client or 4096, "slow_connections_made": connections,
              "slow_outcomes": dict(sorted(outcomes.items())),
              "unloaded": {"requests": len(unloaded), "statuses": unloaded_statuses,
                           "p50_ms": ms(_percentile(unloaded, 0.5)), "p99_ms": ms(_percentile(unloaded, 0.99))},
              "loaded": {"requests": len(loaded), "statuses": loaded_statuses,
                         "p50_ms": ms(_percentile(loaded, 0.5)), "p99_ms": ms(_percentile(loaded, 0.99))},
              "serve_fds_baseline_after": [baseline, after], "engine_alive": alive, "serve_exit_code": exit_code}
    result["passed"] = (set(loaded_statuses) == {"200"} and set(unloaded_statuses) == {"200"} and len(loaded) > 0
                        and set(outcomes) <= {"408", "503"} and outcomes.get("408", 0) > 0
                        and after <= baseline and alive and exit_code == 0)
    return result


# ---------------------------------------------------------------- 3. monitor identities
def _stable_fds(pid: int, bound_s: float = 10.0) -> int:
    """``pid``'s descriptor count once it stopped changing for half a second (bounded)."""
    end = time.monotonic() + bound_s
    last, since = open_fds(pid), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.05)  # polling /proc: the kernel signals nothing
        now = open_fds(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 0.5:
            break
    return last


def monitor_identities(identities: int = 100_000, *, seed: int = 0, max_engines: int = 256, batch: int = 256,
                       fd_bound: int = 32) -> dict[str, Any]:
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="ecp-monid-") as tmp:
        ctx = zmq.Context()
        ctx.set(zmq.MAX_SOCKETS, 32768)  # closed sockets count until their linger ends (default cap 1,023)
        front = ctx.socket(zmq.ROUTER)
        front.setsockopt(zmq.LINGER, 0)
        front.setsockopt(zmq.RCVHWM, 0)
        front.bind(f"ipc://{tmp}/front")
        proc = subprocess.Popen(
            [sys.executable, "-m", "ecp.spec.cli", "monitor", "--listen", f"ipc://{tmp}/mon", "--frontend",
             f"ipc://{tmp}/front", "--console-interval", "0", "--quiet", "--max-engines", str(max_engines)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        lines: list[str] = []
        seen: set[bytes] = set()

        def drain(timeout_ms: int = 0) -> None:
            while front.poll(timeout_ms):
                seen.add(front.recv_multipart()[0])
                timeout_ms = 0

        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if "listening on" in line:
                    break
            listen = f"ipc://{tmp}/mon"
            hello = encode_handshake(Hello(local=False, headless=True))
            used: set[bytes] = set()
            sent = 0
            baseline_fds = baseline_rss = half_rss = 0
            t0 = time.monotonic()
            while sent < identities:
                socks = []
                # the first batch is exactly the admitted identities: the monitor's figures are taken with them
                size = max_engines if sent == 0 else batch
                for _ in range(min(size, identities - sent)):
                    ident = rnd.getrandbits(64).to_bytes(8, "little")
                    while ident in used:
                        ident = rnd.getrandbits(64).to_bytes(8, "little")
                    used.add(ident)
                    s = ctx.socket(zmq.DEALER)
                    s.setsockopt(zmq.LINGER, 500)
                    s.setsockopt(zmq.IDENTITY, ident)
                    s.connect(listen)
                    s.send(hello)
                    socks.append(s)
                sent += len(socks)
                first = not baseline_fds
                if first:
                    end = time.monotonic() + 30
                    while len(seen) < max_engines and time.monotonic() < end:
                        drain(1000)
                else:
                    drain()
                for s in socks:
                    s.close()  # linger: the HELLO leaves first
                # pace the feed by this process's own descriptors: a closed socket keeps its connection
                # until its HELLO left and libzmq reaped it
                end = time.monotonic() + 30
                while open_fds() > 4 * batch + 64 and time.monotonic() < end:
                    drain(10)
                if first:  # their connections gone, the monitor holds what the bound lets it hold
                    baseline_fds = _stable_fds(proc.pid)
                    baseline_rss = rss_kib(proc.pid)
                if not half_rss and sent >= identities // 2:
                    half_rss = rss_kib(proc.pid)
            feed_s = time.monotonic() - t0
            # one more HELLO from an admitted identity, on a connection kept open: relayed once the
            # monitor got past the flood
            probe_id = next(iter(seen)) if seen else b"\x00\x00"
            probe = ctx.socket(zmq.DEALER)
            probe.setsockopt(zmq.LINGER, 0)
            probe.setsockopt(zmq.IDENTITY, probe_id)
            probe.connect(listen)
            probe.send(hello)
            relayed_after = False
            end = time.monotonic() + 60
            while time.monotonic() < end and not relayed_after:
                if front.poll(1000):
                    ident = front.recv_multipart()[0]
                    relayed_after = ident == probe_id
                    seen.add(ident)
            probe.close()
            # the flood's connections close as their lingers end: the monitor's descriptors follow
            end = time.monotonic() + 30
            while open_fds(proc.pid) > baseline_fds + fd_bound and time.monotonic() < end:
                time.sleep(0.1)  # polling /proc: the kernel signals nothing
            fds_after, rss_after = open_fds(proc.pid), rss_kib(proc.pid)
            alive = proc.poll() is None
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            assert proc.stderr is not None
            lines += proc.stderr.readlines()
            front.close()
            ctx.destroy(linger=0)
    refusal_lines = [ln.strip() for ln in lines if "refused engine identity" in ln]
    result = {"campaign": "monitor-identities", "seed": seed, "identities": identities, "max_engines": max_engines,
              "relayed_identities": len(seen), "refusal_log_lines": len(refusal_lines),
              "refusal_line": refusal_lines[0][:300] if refusal_lines else None, "relayed_after_flood": relayed_after,
              "monitor_fds_at_bound_after": [baseline_fds, fds_after],
              # RSS once the bound was reached, halfway through the flood and after it: what the monitor's
              # Python state holds is bounded (tests/monitor); libzmq's per-connection allocations show here
              "monitor_rss_mib_at_bound_half_after": [round(baseline_rss / 1024, 1), round(half_rss / 1024, 1),
                                                      round(rss_after / 1024, 1)],
              "monitor_alive": alive, "feed_seconds": round(feed_s, 1)}
    result["passed"] = (len(seen) == max_engines and len(refusal_lines) == 1 and relayed_after and alive
                        and fds_after <= baseline_fds + fd_bound)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("campaign", choices=("addresses", "slow", "monitor", "all"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--addresses", type=int, default=1000, help="address-choosing requests (campaign 1)")
    p.add_argument("--slow", type=int, default=5000, help="slow-header connections (campaign 2)")
    p.add_argument("--seconds", type=float, default=20.0, help="length of campaign 2's loaded phase")
    p.add_argument("--header-timeout", type=float, default=10.0, help="the server's --http-header-timeout")
    p.add_argument("--per-client", type=int, default=None, help="the server's --max-connections-per-client (4096)")
    p.add_argument("--identities", type=int, default=100_000, help="engine identities fed to the monitor (campaign 3)")
    p.add_argument("--max-engines", type=int, default=256, help="the monitor's --max-engines")
    args = p.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the slow connections; ecp serve inherits it
    results = []
    if args.campaign in ("addresses", "all"):
        results.append(asyncio.run(addresses(args.addresses, seed=args.seed)))
    if args.campaign in ("slow", "all"):
        results.append(asyncio.run(slow_headers(args.slow, seed=args.seed, seconds=args.seconds,
                                                header_timeout_s=args.header_timeout, per_client=args.per_client)))
    if args.campaign in ("monitor", "all"):
        results.append(monitor_identities(args.identities, seed=args.seed, max_engines=args.max_engines))
    for r in results:
        print(json.dumps(r, indent=1))
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
