"""Hostile HTTP clients against a real ``ecp serve``: no answer outside the documented ones, no 500,
no engine death, descriptors and memory back to their baseline, every admitted request ended once.

Starts ``ecp serve`` (one embedded reference engine, a KV consumer, loopback, an ephemeral
port) and runs five phases, each bounded in count and time, every choice drawn from one seed:

1. **generated requests** (``--requests``): every route the app registers (from its own route
   table), unknown paths and wrong methods; bodies built from each route's own request type
   (``CompletionRequest``, ``ChatCompletionRequest``, the abort bodies: :mod:`hostile_bodies`),
   valid or with fields of the wrong type, out of range, huge, deeply nested, or as broken JSON,
   random bytes, an over-limit ``Content-Length``; random ``X-Request-Id``,
   ``X-data-parallel-rank`` and ``Content-Type`` headers; ``kv_transfer_params`` naming another
   producer port each time (the server trusts them, the engine allows every loopback port: its
   notice sockets meet their bound); a tenth of the connections half-closed after the request.
   With ``--dev-mode`` the dev routes are served and generated too; an operator task wakes and
   resumes the engine every 2 s meanwhile (a request waits while the engine sleeps or is paused,
   as in vLLM) and once afterwards. Every
   answer must be a documented status (200, 400, 404, 405, 408, 413, 503) and every error the
   OpenAI error object; every 200 stream ends with one finish reason per choice and one
   ``[DONE]``. Requests whose bytes break HTTP itself are answered by the HTTP parser (uvicorn's
   plain-text 400) and counted apart (``parser_refused``).
2. **abort and admission bursts** (``--bursts``): streams opened, then abort calls naming random
   subsets (with duplicates and unknown ids) on both abort APIs and ``abort_all``, concurrent with
   new admissions: every named id in exactly one list of its answer, every stream ended once, and
   every stream that ended with ``abort`` reported by exactly one call.
3. **slow clients** (``--slow``): connections sending a request one byte a second for
   ``--slow-seconds``, while other requests are answered (the server's header deadline, 10 s,
   answers them 408).
4. **idle connections** (``--idle``): connections that never send, held open while a completion
   is served, then closed (from several loopback addresses, each under the cap per client).
5. **after**: ``/health`` 200, a normal completion served, ``/load`` 0, the engine process
   alive, and the server's descriptors back to their baseline (the engine's within the bound of
   its KV notice sockets, 64); RSS growth over phases 1 and 2 within ``--rss-bound-mib``, and
   phase 4 repeated (``--idle-rounds``) without RSS growing round over round (a quarter of it).

Run ``python -m campaigns.hostile_http --requests 100000``; it prints one JSON object and exits
1 when a criterion fails. ``tests/reliability/test_hostile_http.py`` runs a short seeded variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from typing import Any


from campaigns.hostile_bodies import abort_body, generate_body, header_value, raw_body_mutation  # noqa: E402
from benchmarks.procstat import descendants, open_fds, rss_kib  # noqa: E402

from ecp.reference.frontend.generate import GENERATE_ROUTES  # noqa: E402

#: Statuses ``ecp serve`` documents (docs/frontend.md); 500 is a failure here.
DOCUMENTED = {200, 400, 404, 405, 408, 413, 503}
MAX_MODEL_LEN = 256
IO_TIMEOUT_S = 30.0
#: dev mode: how often the campaign's operator wakes and resumes the engine during phase 1
WAKE_EVERY_S = 2.0


# ---------------------------------------------------------------- the server under test
class Server:
    """``ecp serve`` as a subprocess, with its log drained in a thread."""

    def __init__(self, engine_args: str, serve_args: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", "--max-model-len", str(MAX_MODEL_LEN),
             "--kv-connector", "reference", "--engine-args", engine_args, "--log-level", "error", *serve_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.host, self.port = "", 0
        deadline = time.monotonic() + 120
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = re.search(r"on http://(\S+):(\d+)", line)
            if m and "serving" in line:
                self.host, self.port = m.group(1), int(m.group(2))
                break
            if time.monotonic() > deadline:
                break
        if not self.port:
            self.stop()
            raise RuntimeError("ecp serve did not start")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def engine_pids(self) -> list[int]:
        return descendants(self.proc.pid)

    def figures(self) -> dict[str, int]:
        engines = self.engine_pids()
        return {"serve_fds": open_fds(self.proc.pid), "serve_rss_kib": rss_kib(self.proc.pid),
                "engine_fds": sum(open_fds(p) for p in engines), "engine_rss_kib": sum(rss_kib(p) for p in engines),
                "engines": len(engines)}

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


# ---------------------------------------------------------------- a raw HTTP/1.1 client
async def exchange(host: str, port: int, data: bytes, *, half_close: bool = False,
                   local: str | None = None) -> tuple[int, dict, bytes]:
    """Send ``data`` on a new connection (from the loopback address ``local``) and read the
    answer to its end (the server closes it)."""
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22,
                                                   local_addr=(local, 0) if local else None)
    try:
        writer.write(data)
        if half_close:
            writer.write_eof()
        await writer.drain()
        return await asyncio.wait_for(read_response(reader), IO_TIMEOUT_S)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    status_line = await reader.readline()
    if not status_line:
        return 0, {}, b""  # closed without an answer
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        return status, headers, bytes(body)
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    return status, headers, await reader.read()


def request_bytes(method: str, path: str, body: bytes, headers: dict[str, bytes], *,
                  declared_length: int | None = None) -> bytes:
    head = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close"]
    head += [k.encode() + b": " + v for k, v in headers.items()]
    head.append(b"Content-Length: " + str(len(body) if declared_length is None else declared_length).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


# ---------------------------------------------------------------- judging one answer
class Tally:
    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.violations: list[str] = []
        self.parser_refused = 0
        self.half_closed_dropped = 0
        self.streams_ended = 0
        self.completions = 0

    def violation(self, what: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(what[:400])
        else:
            self.violations[-1] = f"… and more (last: {what[:200]})"

    def judge(self, label: str, status: int, headers: dict, body: bytes) -> dict | None:
        """Check one answer; returns the decoded JSON body of a 200 JSON answer."""
        self.statuses[status] = self.statuses.get(status, 0) + 1
        ctype = headers.get("content-type", "")
        if status == 400 and ctype.startswith("text/plain"):
            self.parser_refused += 1  # the HTTP parser refused the bytes before the app saw them
            return None
        if status not in DOCUMENTED:
            self.violation(f"{label}: status {status}: {body[:200]!r}")
            return None
        if status != 200:
            try:
                err = json.loads(body)["error"]
                assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
            except Exception:
                self.violation(f"{label}: {status} without the OpenAI error object: {body[:200]!r}")
            return None
        if ctype.startswith("text/event-stream"):
            self._judge_stream(label, body)
            return None
        if ctype.startswith("application/json"):
            try:
                obj = json.loads(body)
            except ValueError:
                self.violation(f"{label}: 200 with a body that is not JSON")
                return None
            if isinstance(obj, dict) and "choices" in obj:
                self.completions += 1
                if any(c.get("finish_reason") is None for c in obj["choices"]):
                    self.violation(f"{label}: a completion choice without a finish reason")
            return obj
        return None

    def _judge_stream(self, label: str, body: bytes) -> None:
        # SSE lines end with LF only; the text may hold U+2028 and the like, so no splitlines()
        events = [line[6:].rstrip("\r") for line in body.decode("utf-8", "replace").split("\n")
                  if line.startswith("data: ")]
        if events.count("[DONE]") != 1 or events[-1] != "[DONE]":
            self.violation(f"{label}: stream without exactly one final [DONE]")
            return
        finishes: dict[int, int] = {}
        errored = False
        for e in events[:-1]:
            try:
                obj = json.loads(e)
            except ValueError:
                self.violation(f"{label}: an SSE event that is not JSON: {e[:200]!r}")
                return
            if "error" in obj:
                errored = True
                continue
            for c in obj.get("choices", []):
                if c.get("finish_reason") is not None:
                    finishes[c["index"]] = finishes.get(c["index"], 0) + 1
        if not errored and (not finishes or set(finishes.values()) != {1}):
            self.violation(f"{label}: stream choices ended {finishes} times")
        self.streams_ended += 1


# ---------------------------------------------------------------- phase 1: generated requests
def route_table(dev_mode: bool = False) -> list[tuple[str, str]]:
    """(method, path) of every route ``ecp serve`` registers, from its own app (the dev routes
    with ``dev_mode``)."""
    from ecp.reference.frontend.app import ServeApp
    from ecp.reference.frontend.serving import Frontend, FrontendConfig
    from ecp.reference.tokenizer import ByteTokenizer

    asgi = ServeApp(Frontend(None, ByteTokenizer(), FrontendConfig(dev_mode=dev_mode))).build()
    return sorted({(m, r.path) for r in asgi.app.routes for m in (r.methods or ()) if m != "HEAD"})


def one_request(rnd: random.Random, routes: list[tuple[str, str]]) -> tuple[bytes, bool, str]:
    """One generated request: its bytes, whether to half-close, and a label for reports."""
    kind = rnd.random()
    if kind < 0.04:
        method, path = rnd.choice(["GET", "POST", "PUT", "DELETE", "PATCH"]), rnd.choice(
            ["/", "/v1", "/v1/completion", "/nope/" + header_value(rnd).decode("latin-1").replace(" ", ""),
             "/v1/completions/../health", "/%00", "/" + "a" * rnd.randint(1, 4000)])
    elif kind < 0.08:
        method, path = rnd.choice([("GET", "/v1/completions"), ("PUT", "/abort_requests"), ("POST", "/health"),
                                   ("DELETE", "/v1/models")])
    else:
        method, path = rnd.choice(routes)
    if method == "POST" and path in GENERATE_ROUTES:
        body = generate_body(GENERATE_ROUTES[path], rnd)
    elif method == "POST" and path.endswith("abort_requests"):
        body = abort_body(path, rnd)
    else:
        body = b"" if rnd.random() < 0.8 else raw_body_mutation(rnd)
    declared = None
    if rnd.random() < 0.05:
        body, declared = raw_body_mutation(rnd), None
    if rnd.random() < 0.01:  # over the route's limit: refused before the body is read
        declared = rnd.choice([17 << 20, 1 << 40] if path in GENERATE_ROUTES else [2 << 20, 1 << 40])
    headers: dict[str, bytes] = {}
    if rnd.random() < 0.5:
        headers["Content-Type"] = rnd.choice([b"application/json", b"text/plain", header_value(rnd)])
    if rnd.random() < 0.3:
        headers["X-Request-Id"] = header_value(rnd)
    if rnd.random() < 0.2:
        headers["X-data-parallel-rank"] = rnd.choice([b"0", b"1", b"-1", b"99", b"x", header_value(rnd)])
    # a declared length over the body's: the rest never comes, the limit answers first
    data = request_bytes(method, path, body, headers, declared_length=declared)
    return data, rnd.random() < 0.1, f"{method} {path}"


async def generated(host: str, port: int, count: int, concurrency: int, seed: int, deadline: float,
                    tally: Tally, dev_mode: bool = False) -> int:
    rnd = random.Random(seed)
    routes = route_table(dev_mode)
    work = [one_request(rnd, routes) for _ in range(min(count, 1000))]  # regenerated per batch
    sent = 0
    sem = asyncio.Semaphore(concurrency)

    async def one(data: bytes, half: bool, label: str) -> None:
        async with sem:
            try:
                status, headers, body = await exchange(host, port, data, half_close=half)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                status, headers, body = 0, {}, repr(exc).encode()
            except asyncio.TimeoutError:
                tally.violation(f"{label}: no answer within {IO_TIMEOUT_S:g} s")
                return
            if status == 0:
                # uvicorn ends a connection whose client half-closed it (end of file) before the
                # answer: the request counts as disconnected (its engine requests are aborted)
                if half:
                    tally.half_closed_dropped += 1
                else:
                    tally.violation(f"{label}: connection closed without an answer ({body[:100]!r})")
                return
            tally.judge(label, status, headers, body)

    async def operator(stop: asyncio.Event) -> None:
        # with the dev routes drawn, the engine may be put to sleep or paused at any time, and a
        # request then waits (as in vLLM) until it is woken and resumed: the operator does so every
        # WAKE_EVERY_S, which bounds that wait far below IO_TIMEOUT_S
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), WAKE_EVERY_S)
            except asyncio.TimeoutError:
                pass
            for path in ("/wake_up", "/resume"):
                tally.judge(f"POST {path} (operator)", *await exchange(host, port, request_bytes("POST", path, b"", {})))

    stop = asyncio.Event()
    waker = asyncio.ensure_future(operator(stop)) if dev_mode else None
    try:
        while sent < count and time.monotonic() < deadline:
            batch = work[:count - sent]
            await asyncio.gather(*(one(*w) for w in batch))
            sent += len(batch)
            work = [one_request(rnd, routes) for _ in range(min(count - sent, 1000))]
    finally:
        stop.set()
        if waker is not None:
            await waker
    return sent


# ---------------------------------------------------------------- phase 2: abort and admission bursts
async def bursts(host: str, port: int, count: int, streams: int, seed: int, deadline: float, tally: Tally) -> dict:
    rnd = random.Random(seed + 1)
    figures = {"bursts": 0, "streams": 0, "abort_calls": 0, "aborted": 0}

    async def stream(base: str, max_tokens: int, opened: asyncio.Event | None) -> dict[str, Any]:
        body = json.dumps({"prompt": "x", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}).encode()
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request_bytes("POST", "/v1/completions", body, {"X-Request-Id": base.encode()}))
            status, headers, raw = await asyncio.wait_for(read_response(reader), IO_TIMEOUT_S) if opened is None \
                else await _first_then_rest(reader, opened)
        finally:
            writer.close()
        tally.judge("burst stream", status, headers, raw)
        reasons = [c["finish_reason"] for line in raw.decode().split("\n") if line.startswith("data: {")
                   for c in json.loads(line[6:]).get("choices", []) if c.get("finish_reason")]
        return {"base": base, "status": status, "reasons": reasons}

    for b in range(count):
        if time.monotonic() > deadline:
            break
        bases = [f"b{seed}-{b}-{i}" for i in range(streams)]
        opened = [asyncio.Event() for _ in bases]
        tasks = [asyncio.ensure_future(stream(base, MAX_MODEL_LEN - 8, ev)) for base, ev in zip(bases, opened)]
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in opened)), IO_TIMEOUT_S)
        calls = []
        for _ in range(rnd.randint(4, 12)):
            if rnd.random() < 0.1:
                calls.append(("/v1/abort_requests", {"abort_all": True}, None))
                continue
            named = rnd.sample(bases, rnd.randint(1, len(bases))) + ["unknown-" + str(rnd.random())]
            named += rnd.sample(named, min(2, len(named)))  # duplicates
            if rnd.random() < 0.5:
                calls.append(("/v1/abort_requests", {"req_ids": named}, named))
            else:
                calls.append(("/abort_requests", {"request_ids": named}, named))
        admissions = [asyncio.ensure_future(stream(f"a{seed}-{b}-{i}", 3, None)) for i in range(streams // 2)]
        answers = await asyncio.gather(*(exchange(host, port, request_bytes("POST", path, json.dumps(p).encode(),
                                                                             {"Content-Type": b"application/json"}))
                                         for path, p, _ in calls))
        ends = await asyncio.wait_for(asyncio.gather(*tasks, *admissions), IO_TIMEOUT_S)
        reported: dict[str, int] = {}
        for (path, _, named), (status, headers, body) in zip(calls, answers):
            obj = tally.judge(f"burst {path}", status, headers, body)
            if obj is None:
                continue
            for r in obj["results"]:
                base = r["response_id"].split("-", 1)[1]
                reported[base] = reported.get(base, 0) + 1
            if named is not None:
                for rid in dict.fromkeys(named):
                    places = obj["not_found"].count(rid) + (1 if any(r["response_id"] == f"cmpl-{rid}"
                                                                     for r in obj["results"]) else 0)
                    if places != 1:
                        tally.violation(f"burst {path}: {rid!r} in {places} lists of {obj}")
        for end in ends:
            if end["status"] != 200:
                tally.violation(f"burst: {end['base']} answered {end['status']}")
            if end["status"] == 200 and len(end["reasons"]) != 1:
                tally.violation(f"burst: {end['base']} ended {len(end['reasons'])} times")
            if end["reasons"] == ["abort"] and reported.get(end["base"], 0) != 1:
                tally.violation(f"burst: aborted {end['base']} reported by {reported.get(end['base'], 0)} calls")
            if end["reasons"] != ["abort"] and end["base"] in reported:
                tally.violation(f"burst: {end['base']} reported aborted but ended {end['reasons']}")
        figures["bursts"] += 1
        figures["streams"] += len(ends)
        figures["abort_calls"] += len(calls)
        figures["aborted"] += sum(reported.values())
    return figures


async def _first_then_rest(reader: asyncio.StreamReader, opened: asyncio.Event) -> tuple[int, dict, bytes]:
    """Read a streamed answer, setting ``opened`` once its first event arrived."""
    status_line = await asyncio.wait_for(reader.readline(), IO_TIMEOUT_S)
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    opened.set()
    body = bytearray()
    while True:
        size_line = await asyncio.wait_for(reader.readline(), IO_TIMEOUT_S)
        if not size_line:
            break
        size = int(size_line.split(b";")[0], 16) if headers.get("transfer-encoding") == "chunked" else None
        if size is None:
            body += size_line + await reader.read()
            break
        if size == 0:
            break
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    return status, headers, bytes(body)


# ---------------------------------------------------------------- phases 3 and 4: slow and idle connections
#: loopback addresses the idle connections come from, this many per address: under ``ecp serve``'s
#: default cap per client (4,096); the probe and the slow clients have addresses of their own
IDLE_PER_ADDRESS = 2000
PROBE_ADDRESS = "127.0.0.2"
SLOW_ADDRESS = "127.0.0.3"


def idle_address(i: int) -> str:
    return f"127.0.1.{1 + i // IDLE_PER_ADDRESS}"


async def slow_and_idle(host: str, port: int, slow: int, slow_s: float, idle: int, tally: Tally) -> dict:
    body = json.dumps({"prompt": "slow", "max_tokens": 2}).encode()
    data = request_bytes("POST", "/v1/completions", body, {"Content-Type": b"application/json"})
    stop = asyncio.Event()
    opened = 0

    async def slow_client() -> None:
        nonlocal opened
        _, writer = await asyncio.open_connection(host, port, local_addr=(SLOW_ADDRESS, 0))
        opened += 1
        try:
            for byte in data:
                if writer.is_closing() or writer.transport.get_extra_info("socket") is None:
                    return  # the server closed it (its header deadline)
                writer.write(bytes([byte]))
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)  # one byte a second until the phase ends
                    return
                except asyncio.TimeoutError:
                    pass
        finally:
            writer.close()

    idle_writers = []
    for _ in range(idle):
        try:
            idle_writers.append((await asyncio.open_connection(host, port,
                                                               local_addr=(idle_address(len(idle_writers)), 0)))[1])
        except OSError as exc:
            tally.violation(f"idle: connection {len(idle_writers)} refused: {exc}")
            break
    slow_tasks = [asyncio.ensure_future(slow_client()) for _ in range(slow)]
    loop = asyncio.get_running_loop()
    latencies = []
    end = loop.time() + slow_s
    while loop.time() < end:  # the server keeps answering meanwhile
        t0 = loop.time()
        status, headers, answer = await exchange(host, port, data, local=PROBE_ADDRESS)
        latencies.append(loop.time() - t0)
        tally.judge("while slow and idle clients", status, headers, answer)
        if status != 200:
            tally.violation(f"a completion during the slow/idle phase answered {status}")
        await asyncio.sleep(0.2)  # pacing the probe, not synchronisation
    stop.set()
    await asyncio.gather(*slow_tasks, return_exceptions=True)
    for w in idle_writers:
        w.close()
    return {"slow_clients": slow, "idle_connections": len(idle_writers), "probe_requests": len(latencies),
            "probe_latency_max_s": round(max(latencies, default=0.0), 3)}


# ---------------------------------------------------------------- the campaign
async def _settle(server: Server, baseline: dict, bound_s: float) -> dict:
    """Wait (bounded) for the server's descriptors to return to the baseline; the last figures."""
    loop = asyncio.get_running_loop()
    end = loop.time() + bound_s
    while True:
        now = server.figures()
        if now["serve_fds"] <= baseline["serve_fds"] or loop.time() > end:
            return now
        await asyncio.sleep(0.1)  # polling /proc: the kernel signals nothing


async def campaign(requests: int, *, seed: int = 0, concurrency: int = 32, bursts_n: int = 10, burst_streams: int = 16,
                   slow: int = 20, slow_s: float = 5.0, idle: int = 1000, idle_rounds: int = 1,
                   max_seconds: float = 1800.0, rss_bound_mib: float = 32.0, dev_mode: bool = False) -> dict[str, Any]:
    # 5 ms steps: a burst's streams (248 tokens) are still running when the aborts come. The
    # requests' kv_transfer_params reach the engine (the server trusts them) and name producers on
    # every loopback port, which its allow-list lets through: its notice sockets meet their bound
    engine_args = ("--kv-connector reference --kv-role consumer --log-level ERROR --num-gpu-blocks 4096 "
                   "--step-time-ms 5 --kv-producer 127.0.0.1/32")
    server = Server(engine_args, ("--trust-request-kv-params",) + (("--dev-mode",) if dev_mode else ()))
    tally = Tally()
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    try:
        host, port = server.host, server.port
        warm = request_bytes("POST", "/v1/completions", b'{"prompt": "warm", "max_tokens": 4}', {})
        for _ in range(20):  # what serving allocates once (caches, buffers) is in the baseline
            tally.judge("warm-up", *await exchange(host, port, warm))
        # an ADD over 64 KiB is sent zero-copy, and the first such send starts pyzmq's garbage
        # collector thread (a context of its own, 7 descriptors, once per process)
        big = json.dumps({"prompt": "warm", "max_tokens": 1, "stop": ["s" * 1000] * 80}).encode()
        tally.judge("warm-up", *await exchange(host, port, request_bytes("POST", "/v1/completions", big, {})))
        baseline = server.figures()
        sent = await generated(host, port, requests, concurrency, seed, deadline, tally, dev_mode)
        if dev_mode:  # the dev routes may have left the engine asleep or paused: the later phases need it serving
            for path in ("/wake_up", "/resume"):
                tally.judge(f"POST {path} (after phase 1)", *await exchange(host, port, request_bytes("POST", path, b"", {})))
        burst_figures = await bursts(host, port, bursts_n, burst_streams, seed, deadline, tally)
        after_requests = await _settle(server, baseline, 15.0)
        slow_figures = await slow_and_idle(host, port, slow, slow_s, idle, tally)
        idle_rss = [(await _settle(server, baseline, 15.0))["serve_rss_kib"]]
        for _ in range(idle_rounds - 1):  # the same again: memory kept per connection would show here
            await slow_and_idle(host, port, 0, 1.0, idle, tally)
            idle_rss.append((await _settle(server, baseline, 15.0))["serve_rss_kib"])
        after = await _settle(server, baseline, 15.0)
        health = await exchange(host, port, request_bytes("GET", "/health", b"", {}))
        final = await exchange(host, port, warm)
        load = json.loads((await exchange(host, port, request_bytes("GET", "/load", b"", {})))[2])["server_load"]
        elapsed = time.monotonic() - t0
        engine_alive = server.figures()["engines"] >= 1
    finally:
        exit_code = server.stop()
    fd_growth = after["serve_fds"] - baseline["serve_fds"]
    engine_fd_growth = after["engine_fds"] - baseline["engine_fds"]
    # the requests' growth, then the idle rounds' growth over the first: 10,000 connections raise the
    # allocator's high-water mark once (uvicorn's per-connection objects), which later rounds reuse
    rss_growth = (after_requests["serve_rss_kib"] - baseline["serve_rss_kib"]) / 1024
    idle_round_growth = (idle_rss[-1] - idle_rss[0]) / 1024
    engine_rss_growth = (after["engine_rss_kib"] - baseline["engine_rss_kib"]) / 1024
    result = {
        "campaign": "hostile-http", "seed": seed, "dev_mode": dev_mode, "requests_sent": sent,
        "requests_asked": requests,
        "statuses": dict(sorted(tally.statuses.items())), "status_500": tally.statuses.get(500, 0),
        "parser_refused": tally.parser_refused, "half_closed_dropped": tally.half_closed_dropped,
        "streams_ended_once": tally.streams_ended,
        "completions": tally.completions, "bursts": burst_figures, "slow_idle": slow_figures,
        "health_after": health[0], "completion_after": final[0], "load_after": load,
        "engine_alive": engine_alive, "serve_exit_code": exit_code,
        "serve_fds_baseline_after": [baseline["serve_fds"], after["serve_fds"]],
        "engine_fds_baseline_after": [baseline["engine_fds"], after["engine_fds"]],
        "serve_rss_mib_baseline_after": [round(baseline["serve_rss_kib"] / 1024, 1), round(after["serve_rss_kib"] / 1024, 1)],
        "engine_rss_mib_baseline_after": [round(baseline["engine_rss_kib"] / 1024, 1),
                                          round(after["engine_rss_kib"] / 1024, 1)],
        "serve_rss_mib_after_requests": round(after_requests["serve_rss_kib"] / 1024, 1),
        "serve_rss_mib_after_each_idle_round": [round(r / 1024, 1) for r in idle_rss],
        "seconds": round(elapsed, 1), "violations": tally.violations,
    }
    result["passed"] = (not tally.violations and tally.statuses.get(500, 0) == 0 and health[0] == 200
                        and final[0] == 200 and load == 0 and engine_alive and fd_growth <= 0
                        and engine_fd_growth <= 2 * 64 + 8 and rss_growth <= rss_bound_mib
                        and idle_round_growth <= rss_bound_mib / 4 and engine_rss_growth <= rss_bound_mib
                        and exit_code == 0)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--requests", type=int, default=100_000, help="generated requests (phase 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=32, help="connections open at once in phase 1")
    p.add_argument("--bursts", type=int, default=20, help="abort and admission bursts (phase 2)")
    p.add_argument("--burst-streams", type=int, default=32, help="streams per burst")
    p.add_argument("--slow", type=int, default=100, help="clients sending a byte a second (phase 3)")
    p.add_argument("--slow-seconds", type=float, default=40.0, help="how long they do (past the 30 s body bound)")
    p.add_argument("--idle", type=int, default=10_000, help="connections that never send (phase 4)")
    p.add_argument("--idle-rounds", type=int, default=3, help="times phase 4 runs (RSS must not grow round over round)")
    p.add_argument("--max-seconds", type=float, default=3600.0, help="bound on phases 1 and 2")
    p.add_argument("--rss-bound-mib", type=float, default=32.0)
    p.add_argument("--dev-mode", action="store_true", help="serve (and generate requests for) the dev routes too")
    args = p.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the idle connections; ecp serve inherits it
    result = asyncio.run(campaign(args.requests, seed=args.seed, concurrency=args.concurrency, bursts_n=args.bursts,
                                  burst_streams=args.burst_streams, slow=args.slow, slow_s=args.slow_seconds,
                                  idle=args.idle, idle_rounds=args.idle_rounds, max_seconds=args.max_seconds,
                                  rss_bound_mib=args.rss_bound_mib, dev_mode=args.dev_mode))
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
