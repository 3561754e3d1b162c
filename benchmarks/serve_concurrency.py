"""N concurrent streaming completions through a real ``ecp serve`` on reference engines.

Starts ``ecp serve`` (``--dp`` embedded reference engines) on an ephemeral
port, then opens ``--streams`` streaming ``/v1/completions`` requests at once.
``--loader raw`` (the default) is a lean asyncio HTTP/1.1 client (one
connection per stream, the SSE body read line by line), light enough on 2
cores to hold every stream open at the same time; it reports the most streams
that were open at once (response headers received, ``[DONE]`` not yet).
``--loader bench`` uses ``ecp bench serve``'s httpx load generator instead.
It samples the server's RSS and open file descriptors while the load runs and
counts completed and failed streams: every stream must complete (a terminal
chunk with a finish reason, then ``[DONE]``), none may fail.

Each stream is one TCP connection on both sides, so N needs N descriptors in
this process and N in the server (plus a few): ``ulimit -n`` bounds N (the
script raises its soft limit to the hard limit and says what it got).

Run ``python -m benchmarks.serve_concurrency --streams 10000``; it prints one
JSON object and exits 1 if a stream failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from typing import Any


from benchmarks.procstat import descendants, open_fds, rss_kib  # noqa: E402

from ecp.reference.frontend.bench import run_bench  # noqa: E402
from ecp.spec.sse import DONE, SseDecoder  # noqa: E402


async def raw_load(url: str, streams: int, max_tokens: int, timeout: float) -> dict[str, Any]:
    """Open ``streams`` SSE completions at once over plain asyncio connections."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    body = json.dumps({"prompt": "The quick brown fox", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0.0}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    state = {"open": 0, "peak_open": 0, "completed": 0, "failed": 0, "errors": {}}

    async def one() -> None:
        opened = False
        try:
            reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
            try:
                writer.write(head + body)
                status = await reader.readline()
                if b" 200 " not in status:
                    raise RuntimeError(status.decode(errors="replace").strip())
                opened = True
                state["open"] += 1
                state["peak_open"] = max(state["peak_open"], state["open"])
                finished = done = False
                # headers and chunk-size lines are no SSE fields, so the decoder skips them (a frontend
                # writes whole events per chunk; a load generator need not undo the chunking)
                events = SseDecoder()
                while not done:
                    piece = await reader.read(65536)
                    if not piece:
                        break
                    for data in events.data(piece):
                        if data == DONE:
                            done = True
                        elif b'"finish_reason":"' in data.replace(b" ", b""):
                            finished = True
                        elif b'"error"' in data:
                            raise RuntimeError(data[:200].decode(errors="replace"))
                state["completed" if done and finished else "failed"] += 1
            finally:
                writer.close()
        except Exception as exc:  # noqa: BLE001 - counted per kind
            state["failed"] += 1
            key = type(exc).__name__
            state["errors"][key] = state["errors"].get(key, 0) + 1
        finally:
            if opened:
                state["open"] -= 1

    await asyncio.wait_for(asyncio.gather(*(one() for _ in range(streams))), timeout)
    return state


def run(streams: int, dp: int, max_tokens: int, timeout: float, step_time_ms: float,
        loader: str = "raw", rounds: int = 1) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the server too
    serve = subprocess.Popen(
        [sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", "-dp", str(dp), "--max-model-len", "512",
         "--engine-args", f"--num-gpu-blocks {max(1024, 10 * streams)} --max-num-seqs {streams} --max-num-batched-tokens {max(2048, 2 * streams)} "
                          f"--step-time-ms {step_time_ms} --log-level WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    peak = {"serve_rss": 0, "serve_fds": 0, "engines_rss": 0}
    stop = threading.Event()
    try:
        url = None
        deadline = time.monotonic() + 120
        for line in serve.stderr:
            m = re.search(r"on (http://\S+)", line)
            if m and "serving" in line:
                url = m.group(1)
                break
            if time.monotonic() > deadline:
                break
        if url is None:
            raise RuntimeError("ecp serve did not start")
        threading.Thread(target=lambda: [serve.stderr.read()], daemon=True).start()  # keep its log flowing

        def sample() -> None:
            while not stop.wait(0.2):
                peak["serve_rss"] = max(peak["serve_rss"], rss_kib(serve.pid))
                peak["serve_fds"] = max(peak["serve_fds"], open_fds(serve.pid))
                peak["engines_rss"] = max(peak["engines_rss"], sum(rss_kib(p) for p in descendants(serve.pid)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rss_before = rss_kib(serve.pid)
        completed = failed = peak_open = 0
        t0 = time.monotonic()
        rounds_rss = []
        for _ in range(rounds):  # later rounds on the same server show whether memory is kept
            if loader == "raw":
                report = asyncio.run(raw_load(url, streams, max_tokens, timeout))
            else:
                report = asyncio.run(run_bench(url, model=None, concurrency=streams, num_requests=streams,
                                               prompt_len=32, max_tokens=max_tokens, timeout=timeout,
                                               progress=False))
            completed += report["completed"]
            failed += report["failed"]
            peak_open = max(peak_open, report.get("peak_open") or 0)
            rounds_rss.append(round(rss_kib(serve.pid) / 1024, 1))
        elapsed = time.monotonic() - t0
        stop.set()
        sampler.join(2)
        rss_after = rss_kib(serve.pid)
    finally:
        stop.set()
        serve.terminate()
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, 9)
            serve.wait(10)
    return {
        "campaign": "serve-concurrency", "streams": streams, "engines": dp, "max_tokens": max_tokens, "step_time_ms": step_time_ms,
        "loader": loader, "rounds": rounds, "completed": completed, "failed": failed,
        "failure_kinds": report.get("errors"), "peak_streams_open_at_once": peak_open if loader == "raw" else None,
        "serve_rss_mib_after_each_round": rounds_rss,
        "seconds": round(elapsed, 1),
        "fd_limit_soft_hard": [soft, hard], "fd_limit_used": hard,
        "serve_rss_mib_before_peak_after": [round(rss_before / 1024, 1), round(peak["serve_rss"] / 1024, 1),
                                            round(rss_after / 1024, 1)],
        "serve_open_fds_peak": peak["serve_fds"], "engines_rss_mib_peak": round(peak["engines_rss"] / 1024, 1),
        "loader_rss_mib": round(rss_kib() / 1024, 1), "serve_exit_code": serve.returncode,
        "passed": completed == rounds * streams and failed == 0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--dp", type=int, default=2, help="embedded reference engines (default 2)")
    p.add_argument("--max-tokens", type=int, default=20)
    p.add_argument("--step-time-ms", type=float, default=500.0,
                   help="engine step time: slow steps keep every stream open at once (default 500)")
    p.add_argument("--timeout", type=float, default=600.0, help="bound on the whole load in seconds")
    p.add_argument("--loader", choices=("raw", "bench"), default="raw")
    p.add_argument("--rounds", type=int, default=1, help="run the load this many times on one server")
    args = p.parse_args(argv)
    result = run(args.streams, args.dp, args.max_tokens, args.timeout, args.step_time_ms, args.loader, args.rounds)
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
