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
import gc
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


#: HTTP/1.1 implementations ``ecp serve --http`` accepts (uvicorn's names).
HTTP_IMPLS = ("auto", "httptools", "h11")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def resolve_http(choice: str = "auto") -> str:
    """The HTTP/1.1 implementation to run: ``httptools`` (a C parser with uvicorn's lean
    response path) when installed, else ``h11`` (pure Python). Asking for ``httptools``
    when it is missing raises :class:`ValueError`."""
    if choice not in HTTP_IMPLS:
        raise ValueError(f"unknown HTTP implementation {choice!r} (choose from {', '.join(HTTP_IMPLS)})")
    if choice == "auto":
        return "httptools" if _importable("httptools") else "h11"
    if choice == "httptools" and not _importable("httptools"):
        raise ValueError("--http httptools needs the httptools package (pip install 'engine-core-protocol[serve]')")
    return choice


def listen_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket for the HTTP server (port 0 = ephemeral). Several API server
    processes may serve the one socket (inherited): the kernel hands each connection to one."""
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP. Without it, Nagle holds a response body back until the client's delayed ACK
    # of its headers (~40 ms on every keep-alive request after the first).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


async def start_http(app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                     http: str = "auto", sock: socket.socket | None = None) -> HttpServer:
    """Serve ``app`` on ``host:port``, or on the listening ``sock`` when given
    (:func:`listen_socket`). ``http``: see :func:`resolve_http`."""
    import uvicorn

    if sock is None:
        sock = listen_socket(host, port)
    # No proxy-headers middleware and no access log: nothing here reads a forwarded client
    # address, and both cost on every request.
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", timeout_graceful_shutdown=5,
                            backlog=2048, http=resolve_http(http), proxy_headers=False, access_log=False)
    server = _server_class()(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    # The socket already listens, so connections made from now on wait in the
    # backlog until uvicorn accepts them: no readiness polling is needed.
    await asyncio.sleep(0)
    name = sock.getsockname()
    return HttpServer(server, task, name[0], name[1])


def freeze_startup_heap() -> None:
    """Take what startup allocated (modules, types, tables, the client's handshake state) out
    of the cyclic garbage collector's sight, as vLLM does once its engine core is up: a full
    collection under load then scans what serving allocates, not the whole process (a pause
    that otherwise reaches tens of milliseconds and shows as inter-token latency)."""
    gc.collect()
    gc.freeze()


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


def check_args(args: argparse.Namespace) -> str | None:
    """Why ``ecp serve``'s arguments cannot work (a usage error), or ``None``."""
    from .faults import check_serve_faults

    try:
        check_serve_faults(args.bug)
    except ValueError as exc:
        return f"--bug: {exc}"
    dp = args.data_parallel_size
    if args.data_parallel_size_local not in (None, 0, dp):
        return ("--data-parallel-size-local must be 0 (external engines) or equal to "
                "--data-parallel-size (embedded engines); hybrid deployments are not supported")
    if args.data_parallel_size_local == 0 and args.data_parallel_rpc_port is None:
        return "--data-parallel-size-local 0 needs --data-parallel-rpc-port (or --handshake-port)"
    if getattr(args, "api_server_count", 1) < 1:
        return "--api-server-count must be at least 1"
    return None


def external_engines(args: argparse.Namespace) -> bool:
    return args.data_parallel_size_local == 0


def handshake_host(args: argparse.Namespace) -> str:
    return args.data_parallel_address or "127.0.0.1"


def client_config(args: argparse.Namespace, **overrides: Any) -> Any:
    """The client configuration ``ecp serve``'s arguments ask for (``overrides`` on top)."""
    from ecp.reference.client import ClientConfig

    common: dict[str, Any] = dict(
        engine_count=args.data_parallel_size, handshake_timeout_s=args.handshake_timeout,
        kv_connector=args.kv_connector, liveness_timeout_s=args.engine_liveness_timeout,
        bugs=client_bugs(args.bug))
    if external_engines(args):
        host = handshake_host(args)
        common.update(engine_start_index=args.data_parallel_start_rank, transport="tcp", host=host,
                      handshake_address=f"tcp://{host}:{args.data_parallel_rpc_port}")
    else:
        common.update(transport="ipc")
    common.update(overrides)
    return ClientConfig(**common)


def embedded_engine_args(args: argparse.Namespace, tokenizer: Any) -> list[str]:
    """Flags for the embedded engines (co-located: HELLO local=true, headless=false)."""
    extra = ["--local", "--max-model-len", str(args.max_model_len)]
    if args.tokenizer is not None:  # synthetic token ids stay inside the tokenizer's vocabulary
        extra += ["--vocab-size", str(tokenizer.vocab_size)]
    extra += shlex.split(args.engine_args or "")
    if args.kv_connector == "reference":  # the one connector the reference engine has
        extra += ["--kv-connector", args.kv_connector]
    return extra


def build_app(args: argparse.Namespace, client: Any, tokenizer: Any, peers: Any = None) -> tuple[Any, bool]:
    """The Starlette app over a ready ``client``; returns it and whether dev mode is on."""
    from .app import ServeApp
    from .faults import FrontendFaults
    from .serving import Frontend, FrontendConfig

    # ECP-HS-9: the smallest max_model_len of the engines (the fault layer may swap it for the largest)
    reported = [r.max_model_len for r in getattr(client, "ready_responses", {}).values() if r is not None]
    max_model_len = FrontendFaults(args.bug).max_model_len(client.max_model_len, reported)
    fcfg = FrontendConfig(model_name=args.model, max_model_len=max_model_len,
                          kv_connector=args.kv_connector, bugs=frozenset(args.bug),
                          dev_mode=args.dev_mode or os.environ.get("VLLM_SERVER_DEV_MODE", "0") not in ("", "0"))
    frontend = Frontend(client, tokenizer, fcfg)
    return ServeApp(frontend, peers=peers).build(), fcfg.dev_mode


def stop_event() -> asyncio.Event:
    """Set by SIGINT/SIGTERM: ``ecp serve`` then ends the server and the engines, at any stage."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve(args: argparse.Namespace) -> int:
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
    stop = stop_event()
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
        if not await _until_stopped(stop, client.wait_ready()):
            return 0
        app, dev_mode = build_app(args, client, tokenizer)
        try:
            http = await start_http(app, args.host, args.port, log_level=args.log_level,
                                    http=getattr(args, "http", "auto"))
        except OSError as exc:  # port taken, unknown host: a usage error, not a crash
            print(f"ecp serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 2
        freeze_startup_heap()
        print(f"ecp serve: serving {args.model!r} on {http.url} with {dp} engine(s)"
              f"{' (dev mode)' if dev_mode else ''}", file=sys.stderr, flush=True)
        await _until_stopped(stop, asyncio.shield(http.task))
        await http.stop()
        return 0
    finally:
        await client.shutdown()
        if engines is not None:
            stop_process(engines)
