"""``ecp serve``'s main coroutine (:func:`serve`): client + engines + HTTP, wired together.

With ``--api-server-count N`` above 1 it hands over to :mod:`.api_servers`; the pieces both use
are :mod:`.launch` (arguments, engine processes, the app, stop signals) and :mod:`.http_server`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from .http_server import start_http
from .launch import (
    build_app, check_args, client_config, embedded_engine_args, external_engines, http_limits, tune_gc_for_serving,
    spawn_engines, stop_event, stop_process, until_stopped,
)


async def serve(args: argparse.Namespace, stop: asyncio.Event | None = None) -> int:
    """Serve until SIGINT/SIGTERM, or until ``stop`` is set where given (a server in a thread of a process
    that is not its own: no signal handlers, and the process's garbage collector left as it is)."""
    from ecp.reference.client import EngineCoreClient

    from ..tokenizer import load_tokenizer

    problem = check_args(args)
    if problem is not None:
        print(f"ecp serve: {problem}", file=sys.stderr)
        return 2
    if getattr(args, "api_server_count", 1) > 1:
        from .api_servers import serve_api_servers

        return await serve_api_servers(args)
    external = external_engines(args)
    dp = args.data_parallel_size
    own_process = stop is None
    stop = stop_event() if stop is None else stop
    tokenizer = load_tokenizer(args.tokenizer)
    client = EngineCoreClient(client_config(args))
    await client.bind()
    engines = None
    try:
        if external:
            print(f"ecp serve: waiting for {dp} engine(s) to connect to {client.handshake_address}",
                  file=sys.stderr, flush=True)
        else:
            engines = spawn_engines(client.handshake_address, dp, embedded_engine_args(args, tokenizer))
        if not await until_stopped(stop, client.wait_ready()):
            return 0
        app, dev_mode = build_app(args, client, tokenizer)
        try:
            http = await start_http(app, args.host, args.port, log_level=args.log_level,
                                    http=getattr(args, "http", "auto"), limits=http_limits(args))
        except OSError as exc:  # port taken, unknown host: a usage error, not a crash
            print(f"ecp serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 2
        if own_process:
            tune_gc_for_serving()
        print(f"ecp serve: serving {args.model!r} on {http.url} with {dp} engine(s)"
              f"{' (dev mode)' if dev_mode else ''}", file=sys.stderr, flush=True)
        await until_stopped(stop, asyncio.shield(http.task))
        await http.stop()
        return 0
    finally:
        await client.shutdown()
        if engines is not None:
            stop_process(engines)
