"""The HTTP server of ``ecp serve``: uvicorn on an already bound socket.

* :func:`listen_socket` binds the listening socket (port 0 = ephemeral); several API server
  processes may serve one inherited socket;
* :func:`start_http` runs a Starlette app under uvicorn on it, returning once it accepts
  connections; tests and ``ecp serve`` both use it;
* :func:`resolve_http` picks the HTTP/1.1 implementation (``--http``).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any


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


def protocol_class(http: str = "auto", limits: Any = None) -> type:
    """uvicorn's HTTP protocol class for ``http`` (:func:`resolve_http`), wrapped with the header
    deadline and connection caps of ``limits`` (:class:`~.http_limits.HttpLimits`, its defaults when None)."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from .http_limits import HttpLimits, limited_protocol

    base = import_from_string(HTTP_PROTOCOLS[resolve_http(http)])
    return limited_protocol(base, limits if limits is not None else HttpLimits())


async def start_http(app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                     http: str = "auto", sock: socket.socket | None = None, limits: Any = None) -> HttpServer:
    """Serve ``app`` on ``host:port``, or on the listening ``sock`` when given
    (:func:`listen_socket`). ``http``: see :func:`resolve_http`; ``limits``: the header deadline
    and connection caps (:class:`~.http_limits.HttpLimits`, its defaults when None)."""
    import uvicorn

    if sock is None:
        sock = listen_socket(host, port)
    # No proxy-headers middleware and no access log: nothing here reads a forwarded client
    # address, and both cost on every request.
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", timeout_graceful_shutdown=5,
                            backlog=2048, http=protocol_class(http, limits), proxy_headers=False,
                            access_log=False)
    server = _server_class()(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    # The socket already listens, so connections made from now on wait in the
    # backlog until uvicorn accepts them: no readiness polling is needed.
    await asyncio.sleep(0)
    name = sock.getsockname()
    return HttpServer(server, task, name[0], name[1])
