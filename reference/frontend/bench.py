"""``ecp bench serve``: a load generator for any OpenAI-compatible completions server.

Sends ``--num-requests`` streaming ``/v1/completions`` requests with
``--concurrency`` in flight, and reports request throughput, output tokens/s,
time to first token (TTFT) and inter-token latency (ITL) percentiles. Output
tokens come from the final ``usage`` chunk (``stream_options.include_usage``)
when the server sends one, else from the number of non-empty text chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .bench_http import Connection

_decode_json = msgspec.json.decode


@dataclass
class RequestResult:
    ok: bool
    ttft: float | None = None
    itls: list[float] = field(default_factory=list)
    output_tokens: int = 0
    latency: float = 0.0
    error: str | None = None


def percentile(values: list[float], q: float) -> float | None:
    """Percentile ``q`` (0..100) interpolated linearly between the closest ranks, as
    ``numpy.percentile`` computes it (and so ``vllm bench serve`` / ``vllm-rs bench serve``)."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


async def one_request(conn: Connection, payload: bytes, timeout: float) -> RequestResult:
    """One streaming completion on ``conn``; TTFT and ITL are taken from the arrival time
    of each event with text (see :mod:`.bench_http`)."""
    start = time.perf_counter()
    res = RequestResult(ok=False)
    state = {"last": None, "chunks": 0}

    def on_event(data: bytes, now: float) -> None:
        if data == b"[DONE]":
            res.ok = res.error is None
            return
        try:
            obj = _decode_json(data)
        except ValueError:
            res.error = f"not JSON: {data[:80]!r}"
            return
        if "error" in obj:
            err = obj["error"]
            res.error = str(err.get("message", err) if isinstance(err, dict) else err)
            return
        if obj.get("usage"):
            res.output_tokens = obj["usage"].get("completion_tokens", state["chunks"])
        if any(c.get("text") for c in obj.get("choices", [])):
            state["chunks"] += 1
            if state["last"] is None:
                res.ttft = now - start
            else:
                res.itls.append(now - state["last"])
            state["last"] = now

    try:
        status, body = await conn.stream_post("/v1/completions", payload, on_event, timeout)
        if status != 200:
            res.ok = False
            res.error = f"HTTP {status}: {body[:200].decode(errors='replace')}"
    except Exception as exc:  # network errors count as failed requests
        res.ok = False
        res.error = f"{type(exc).__name__}: {exc}"
    res.latency = time.perf_counter() - start
    if res.ok and not res.output_tokens:
        res.output_tokens = state["chunks"]
    return res


async def run_bench(url: str, *, model: str | None, concurrency: int, num_requests: int, prompt_len: int,
                    max_tokens: int, timeout: float, progress: bool = True,
                    extra_body: dict[str, Any] | None = None) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        if model is None:
            models = (await client.get("/v1/models")).json()
            model = models["data"][0]["id"]
        prompt = ("The quick brown fox jumps over the lazy dog. " * (prompt_len // 45 + 1))[:prompt_len]
        payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                   "ignore_eos": True, "temperature": 0.0, "stream_options": {"include_usage": True}}
        for k, v in (extra_body or {}).items():  # null removes a field (e.g. ignore_eos for strict servers)
            if v is None:
                payload.pop(k, None)
            else:
                payload[k] = v
        body = json.dumps(payload).encode()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=num_requests, file=sys.stderr, unit="req", desc=f"c={concurrency}")
        results: list[RequestResult] = []
        next_index = 0

        connections: list[Connection] = []

        async def worker() -> None:
            # one kept-alive connection per worker, as a client pool of C connections would
            nonlocal next_index
            conn = Connection(url)
            connections.append(conn)
            try:
                while next_index < num_requests:
                    next_index += 1
                    results.append(await one_request(conn, body, timeout))
                    if bar is not None:
                        bar.update(1)
            finally:
                conn.close()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, num_requests))))
        elapsed = time.perf_counter() - start
        if bar is not None:
            bar.close()
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    itls = [x for r in ok for x in r.itls]
    out_tokens = sum(r.output_tokens for r in ok)

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 3)

    return {
        "url": url, "model": model, "concurrency": concurrency, "num_requests": num_requests,
        "completed": len(ok), "failed": len(results) - len(ok),
        "connections": sum(c.connects for c in connections),
        "errors": sorted({r.error for r in results if r.error})[:5],
        "duration_s": round(elapsed, 3),
        "request_throughput": round(len(ok) / elapsed, 3) if elapsed else None,
        "output_tokens": out_tokens,
        "output_tokens_per_s": round(out_tokens / elapsed, 1) if elapsed else None,
        "ttft_ms": {f"p{q}": ms(percentile(ttfts, q)) for q in (50, 90, 99)},
        "itl_ms": {f"p{q}": ms(percentile(itls, q)) for q in (50, 90, 99)},
    }


def format_report(r: dict[str, Any]) -> str:
    lines = [
        f"url {r['url']}  model {r['model']}  concurrency {r['concurrency']}",
        f"requests      {r['completed']} ok, {r['failed']} failed in {r['duration_s']} s",
        f"throughput    {r['request_throughput']} req/s, {r['output_tokens_per_s']} output tok/s",
        "TTFT ms       " + "  ".join(f"{k} {v}" for k, v in r["ttft_ms"].items()),
        "ITL ms        " + "  ".join(f"{k} {v}" for k, v in r["itl_ms"].items()),
    ]
    lines += [f"error         {e}" for e in r["errors"]]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        print("ecp bench serve: --concurrency must be at least 1", file=sys.stderr)
        return 2
    n = args.num_requests if args.num_requests is not None else max(64, 4 * args.concurrency)
    try:
        extra = json.loads(args.extra_body) if args.extra_body else None
    except ValueError as exc:
        print(f"ecp bench serve: --extra-body is not JSON: {exc}", file=sys.stderr)
        return 2
    if extra is not None and not isinstance(extra, dict):
        print("ecp bench serve: --extra-body must be a JSON object", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(run_bench(args.url, model=args.model, concurrency=args.concurrency, num_requests=n,
                                       prompt_len=args.prompt_len, max_tokens=args.max_tokens,
                                       timeout=args.timeout, progress=not args.no_progress,
                                       extra_body=extra))
    except Exception as exc:  # e.g. the server is not reachable
        print(f"ecp bench serve: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0 if report["failed"] == 0 else 1
