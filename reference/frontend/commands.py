"""``ecp serve`` and ``ecp bench serve``."""

from __future__ import annotations

import argparse

from ecp.spec.profile.option import add_release_option


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="OpenAI-compatible reference frontend over N engine cores",
        description="With no engine flags, spawns --data-parallel-size local reference engines (synthetic "
                    "executor, byte-level tokenizer). With --data-parallel-size-local 0 it waits for external "
                    "engines on tcp://--data-parallel-address:--data-parallel-rpc-port, as `vllm serve` does.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", "--served-model-name", dest="model", default="ecp-synthetic",
                   help="model name served at /v1/models (default: %(default)s)")
    p.add_argument("--tokenizer", default=None,
                   help="a tokenizer.json (needs the 'tokenizers' extra); default: byte-level tokenizer")
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1, help="number of engines (default 1)")
    p.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None,
                   help="0 = start no engines; wait for external ones")
    p.add_argument("--data-parallel-start-rank", type=int, default=0,
                   help="global rank of the first external engine (default 0)")
    p.add_argument("--data-parallel-address", default=None, help="handshake host for external engines")
    p.add_argument("--data-parallel-rpc-port", "--handshake-port", dest="data_parallel_rpc_port", type=int,
                   default=None, help="handshake port for external engines")
    p.add_argument("--handshake-timeout", type=float, default=600.0,
                   help="seconds to wait for every engine's HELLO (default %(default)s)")
    p.add_argument("--engine-liveness-timeout", type=float, default=None, metavar="SECONDS",
                   help="fail closed (503) when an engine with requests in flight neither sends output nor "
                        "answers a probe within SECONDS (default: off, as vLLM; see docs/client.md)")
    p.add_argument("--max-model-len", type=int, default=4096, help="for the embedded engines (default 4096)")
    p.add_argument("--engine-args", default="",
                   help="extra flags for the embedded engines, e.g. \"--step-time-ms 2\"")
    p.add_argument("--kv-connector", default=None,
                   help="KV connector name; enables rejection notifications (ECP-REJECT-3)")
    p.add_argument("--http-header-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="a request's headers must arrive within SECONDS of the connection opening (or of the next "
                        "request's first byte), else 408 and the connection is closed (default 10)")
    p.add_argument("--max-connections", type=int, default=None, metavar="N",
                   help="open HTTP connections at most, per API server process; more are answered 503 and closed "
                        "(default: the descriptor limit less 256)")
    p.add_argument("--max-connections-per-client", type=int, default=4096, metavar="N",
                   help="open HTTP connections one client address may hold, per API server process; more are "
                        "answered 503 and closed (default 4096)")
    p.add_argument("--trust-request-kv-params", action="store_true",
                   help="forward kv_transfer_params from every HTTP client to the engines (ECP-SEC-5). Without it "
                        "(and without --kv-params-trust-header) a request carrying them is refused with a 400: "
                        "they name the KV producer an engine connects to")
    p.add_argument("--kv-params-trust-header", default=None, metavar="NAME=VALUE",
                   help="forward kv_transfer_params only from requests carrying header NAME with exactly VALUE, "
                        "a secret the trusted proxy in front of this server sets (ECP-SEC-5, docs/frontend.md)")
    p.add_argument("--dev-mode", action="store_true",
                   help="register the dev endpoints (also VLLM_SERVER_DEV_MODE=1)")
    p.add_argument("--bug", action="append", default=[], metavar="NAME",
                   help="break one protocol rule on purpose, for the conformance suite's self-proof (repeatable); "
                        "--bug list prints every fault with the clause it breaks")
    p.add_argument("--api-server-count", "-asc", type=int, default=1, metavar="N",
                   help="API server processes sharing the engines and the HTTP port, each its own engine-core "
                        "client (client_index 0..N-1), as vLLM's --api-server-count (default 1)")
    p.add_argument("--http", choices=("auto", "httptools", "h11"), default="auto",
                   help="HTTP/1.1 implementation: httptools (C parser, lean response path; the 'serve' extra "
                        "installs it) or h11 (pure Python); auto = httptools when installed (default)")
    add_release_option(p, "the vLLM release the engines speak",
                       effect="Frames are written and read as that release does; a dev route whose utility method "
                              "the release lacks answers 501 naming the release.")
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=_serve)

    bench = subparsers.add_parser("bench", help="benchmarks")
    bsub = bench.add_subparsers(dest="bench_command", metavar="BENCH")
    b = bsub.add_parser(
        "serve", help="load-test any OpenAI-compatible /v1/completions endpoint",
        description="Keep --concurrency streaming /v1/completions requests (ignore_eos, --max-tokens) in flight "
                    "against --url until --num-requests finished; report request throughput, output tokens/s and "
                    "TTFT/ITL p50/p90/p99 (progress bar on stderr). Exit 0 all requests ok, 1 some failed, "
                    "2 unreachable server or bad arguments.")
    b.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (default %(default)s)")
    b.add_argument("--model", default=None, help="model name (default: the first of /v1/models)")
    b.add_argument("--concurrency", "-c", type=int, default=1, help="requests in flight at once (default 1)")
    b.add_argument("--num-requests", "-n", type=int, default=None,
                   help="requests to send (default: max(64, 4 x concurrency))")
    b.add_argument("--prompt-len", type=int, default=32, help="prompt length in characters")
    b.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (default 64)")
    b.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds")
    b.add_argument("--extra-body", default=None, metavar="JSON",
                   help='fields merged into every request body, e.g. \'{"ignore_eos": null}\' (null removes)')
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(func=_bench_serve)
    bench.set_defaults(func=lambda args: (bench.print_help(), 2)[1])


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import sys

    import starlette  # noqa: F401 - the [serve] extra, checked before any engine starts
    import uvicorn  # noqa: F401

    from .http_server import resolve_http
    from .server import serve

    if "list" in args.bug:
        from .faults import SERVE_FAULTS

        width = max(map(len, SERVE_FAULTS))
        for fault in SERVE_FAULTS.values():
            print(f"{fault.name:<{width}}  {fault.clause:<13}  {fault.does}")
        return 0
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        resolve_http(args.http)
    except ValueError as exc:
        print(f"ecp serve: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(args))


def _bench_serve(args: argparse.Namespace) -> int:
    from .bench import main

    return main(args)
