"""Running ``ecp serve``: client + engines + HTTP, wired together.

* :func:`start_http` runs a Starlette app under uvicorn on an already bound
  socket (port 0 = ephemeral), returning once it accepts connections; tests
  and ``ecp serve`` both use it.
* :func:`spawn_engines` starts the embedded default: N reference engines as
  subprocesses (``python -m ecp.reference.engine --local …``) pointed at the client's
  handshake address.
* :func:`serve` is the ``ecp serve`` main coroutine.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Sequence

log = logging.getLogger("ecp.serve")


@dataclass
class HttpServer:
    server: Any  # uvicorn.Server
    task: asyncio.Task
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except asyncio.TimeoutError:
            self.server.force_exit = True
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


def _server_class() -> type:
    import contextlib

    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn without its signal capture: uvicorn re-raises a captured
        SIGTERM after shutdown, which would kill the process before ``serve``
        stops its engines. Signals are handled by :func:`serve` instead."""

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            yield

    return Server


async def start_http(app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> HttpServer:
    import uvicorn

    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP. Without it, Nagle holds a response body back until the client's delayed ACK
    # of its headers (~40 ms on every keep-alive request after the first).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", timeout_graceful_shutdown=5,
                            backlog=2048)
    server = _server_class()(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    # The socket already listens, so connections made from now on wait in the
    # backlog until uvicorn accepts them: no readiness polling is needed.
    await asyncio.sleep(0)
    return HttpServer(server, task, host, sock.getsockname()[1])


def engine_command(handshake_address: str, engine_count: int, engine_start_index: int = 0,
                   extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", handshake_address,
            "--engine-count", str(engine_count), "--engine-start-index", str(engine_start_index), *extra]


def spawn_engines(handshake_address: str, engine_count: int, extra: Sequence[str] = ()) -> subprocess.Popen:
    """The embedded default: one supervisor process for N local reference engines."""
    return subprocess.Popen(engine_command(handshake_address, engine_count, 0, extra),
                            stdin=subprocess.DEVNULL, start_new_session=True)


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def client_bugs(bugs: Sequence[str]) -> frozenset[str]:
    """The client's faults among ``bugs`` (``ecp serve --bug``)."""
    from ..client.faults import FAULTS

    return frozenset(b for b in bugs if b in FAULTS)


async def _until_stopped(stop: asyncio.Event, work: Any) -> bool:
    """Run ``work`` until it ends (True) or ``stop`` is set (False, work cancelled)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return False


async def serve(args: argparse.Namespace) -> int:
    from ecp.reference.client import ClientConfig, EngineCoreClient

    from ..tokenizer import load_tokenizer
    from .app import ServeApp
    from .serving import Frontend, FrontendConfig

    from .faults import FrontendFaults, check_serve_faults

    try:
        check_serve_faults(args.bug)
    except ValueError as exc:
        print(f"ecp serve: --bug: {exc}", file=sys.stderr)
        return 2
    external = args.data_parallel_size_local == 0
    dp = args.data_parallel_size
    if args.data_parallel_size_local not in (None, 0, dp):
        print("ecp serve: --data-parallel-size-local must be 0 (external engines) or equal to "
              "--data-parallel-size (embedded engines); hybrid deployments are not supported", file=sys.stderr)
        return 2
    if external:
        if args.data_parallel_rpc_port is None:
            print("ecp serve: --data-parallel-size-local 0 needs --data-parallel-rpc-port (or --handshake-port)",
                  file=sys.stderr)
            return 2
        host = args.data_parallel_address or "127.0.0.1"
        handshake = f"tcp://{host}:{args.data_parallel_rpc_port}"
        cfg = ClientConfig(engine_count=dp, engine_start_index=args.data_parallel_start_rank,
                           handshake_address=handshake, transport="tcp", host=host,
                           handshake_timeout_s=args.handshake_timeout, kv_connector=args.kv_connector,
                           liveness_timeout_s=args.engine_liveness_timeout, bugs=client_bugs(args.bug))
    else:
        cfg = ClientConfig(engine_count=dp, transport="ipc", handshake_timeout_s=args.handshake_timeout,
                           kv_connector=args.kv_connector, liveness_timeout_s=args.engine_liveness_timeout,
                           bugs=client_bugs(args.bug))
    # SIGINT/SIGTERM end the server and then the engines, at any stage.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tokenizer = load_tokenizer(args.tokenizer)
    client = EngineCoreClient(cfg)
    await client.bind()
    engines = None
    try:
        if external:
            print(f"ecp serve: waiting for {dp} engine(s) to connect to {client.handshake_address}",
                  file=sys.stderr, flush=True)
        else:
            # Embedded engines are co-located: HELLO local=true, headless=false.
            extra = ["--local", "--max-model-len", str(args.max_model_len)]
            if args.tokenizer is not None:  # synthetic token ids stay inside the tokenizer's vocabulary
                extra += ["--vocab-size", str(tokenizer.vocab_size)]
            extra += shlex.split(args.engine_args or "")
            if args.kv_connector == "reference":  # the one connector the reference engine has
                extra += ["--kv-connector", args.kv_connector]
            engines = spawn_engines(client.handshake_address, dp, extra)
        if not await _until_stopped(stop, client.wait_ready()):
            return 0
        reported = [r.max_model_len for r in client.ready_responses.values() if r is not None]
        max_model_len = FrontendFaults(args.bug).max_model_len(client.max_model_len, reported)
        fcfg = FrontendConfig(model_name=args.model, max_model_len=max_model_len,
                              kv_connector=args.kv_connector, bugs=frozenset(args.bug),
                              dev_mode=args.dev_mode or os.environ.get("VLLM_SERVER_DEV_MODE", "0") not in ("", "0"))
        frontend = Frontend(client, tokenizer, fcfg)
        app = ServeApp(frontend).build()
        try:
            http = await start_http(app, args.host, args.port, log_level=args.log_level)
        except OSError as exc:  # port taken, unknown host: a usage error, not a crash
            print(f"ecp serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 2
        print(f"ecp serve: serving {args.model!r} on {http.url} with {dp} engine(s)"
              f"{' (dev mode)' if fcfg.dev_mode else ''}", file=sys.stderr, flush=True)
        await _until_stopped(stop, asyncio.shield(http.task))
        await http.stop()
        return 0
    finally:
        await client.shutdown()
        if engines is not None:
            stop_process(engines)
