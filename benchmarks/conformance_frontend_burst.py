"""One burst of the frontend role, phase by phase, against a frontend command.

Run: ``python -m benchmarks.conformance_frontend_burst [-k 2000] [--client raw|httpx] [-- COMMAND ...]``
(default COMMAND: the reference frontend, ``ecp serve`` with two external engines). It opens K
held streams (the scripted engines stop after two tokens), waits for every first token, drops
all K at once (frontend frozen during the drop, as the FE-ABORT cases do, unless
``--no-freeze``) and reports: time to open, time to the last first token, time to drop, time
from the drop until every dropped id was aborted at its engine, and per engine each ABORT
message as (ms after the drop, ids). ``--client httpx`` opens the streams through one httpx
AsyncClient instead of plain asyncio connections (the comparison in docs/conformance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time

SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}", "--dev-mode"]


async def open_httpx(fe, k: int):
    import httpx

    from ecp.spec.sse import SseDecoder

    client = httpx.AsyncClient(base_url=fe.base_url, timeout=120,
                               limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    async def one(i: int):
        body = fe.driver.completion_body(f"bench {i}", 64, stream=True)
        response = await client.send(client.build_request("POST", "/v1/completions", json=body), stream=True)
        events = SseDecoder()
        async for piece in response.aiter_bytes():
            if events.data(piece):   # the first event: the stream is open and generating
                break
        return response

    responses = await asyncio.gather(*(one(i) for i in range(k)))
    return client, responses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, default=2000, help="streams in the burst (2000)")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    parser.add_argument("--no-freeze", action="store_true", help="do not stop the frontend during the drop")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    from ecp.conformance.frontend.cases import _common as s
    from ecp.conformance.frontend.session import FrontendManager, FrontendRunConfig
    from ecp.conformance.transcript import Transcript

    cfg = FrontendRunConfig(command=command or SERVE, engine_count=args.engines, workdir=tempfile.mkdtemp(),
                            case_timeout_s=600)
    manager = FrontendManager(cfg, Transcript())
    figures: dict[str, object] = {"k": args.k, "engines": args.engines, "client": args.client}

    async def burst(m):
        fe = await m.shared()
        s.program(fe, s.held_script())
        t0 = time.monotonic()
        if args.client == "httpx":
            client, _ = await open_httpx(fe, args.k)
            figures["open_and_first_token_s"] = round(time.monotonic() - t0, 3)
            await s.wait_open(fe, args.k, "held requests")
            expected = {e.rank: set(e.generation.active) for e in fe.engines}
            t2 = time.monotonic()
            await client.aclose()
        else:
            streams = await s.open_held(fe, args.k)
            figures["open_and_first_token_s"] = round(time.monotonic() - t0, 3)
            expected = {e.rank: set(e.generation.active) for e in fe.engines}
            t2 = time.monotonic()
            if args.no_freeze:
                s.drop_all(streams)
            else:
                with fe.frozen():
                    s.drop_all(streams)
        t3 = time.monotonic()
        figures["drop_s"] = round(t3 - t2, 4)
        await fe.until(lambda: all(expected[e.rank] <= e.generation.aborted_ids for e in fe.engines), 120,
                       "every ABORT")
        figures["drop_to_all_aborted_s"] = round(time.monotonic() - t3, 3)
        figures["aborts"] = {e.rank: [(round((r.t - t3) * 1000, 1), len(ids)) for r, ids in e.recorder.aborts()]
                             for e in fe.engines}

    try:
        manager.run(burst)
    finally:
        manager.close()
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>24}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
