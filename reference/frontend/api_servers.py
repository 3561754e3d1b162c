"""``ecp serve --api-server-count N``: N API server processes in front of the same engines.

One Python process streams at most so many tokens per second (the per-token
work of ``serving.py`` and the HTTP writes; docs/frontend.md measures it).
As vLLM's ``--api-server-count`` does, this runs N processes, each a whole
``ecp serve`` frontend with its own engine-core client:

* the **launcher** (this process, the one the user started) binds the HTTP
  listening socket and the handshake ROUTER, starts the N API servers (they
  inherit the listening socket: the kernel gives each accepted connection
  to one of them), answers each engine's HELLO with an INIT that lists the
  N API servers' input/output address pairs (``ECP-SOCK-3``: pair *i*
  belongs to client *i*), collects READY, starts the embedded engines if
  any, and supervises: when one process ends, everything stops;
* **API server i** is a bootstrapped client with ``client_index = i``
  (``ECP-REQ-6``): it binds its own input ROUTER and output PULL, tells the
  launcher where (one JSON line on stdout), waits for every engine's ready
  payload on its input socket (``ECP-HS-3``), then serves HTTP. Engines send
  each request's outputs to the client that added it (``ECP-SOCK-4``).

What a user sees is one server: utility routes reach every engine once from
whichever process received them; the abort APIs and ``/load`` reach every
process (:mod:`.peers`). ``/metrics`` describes the process that answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
from typing import Any

log = logging.getLogger("ecp.serve")

#: Bound on an API server process binding its client sockets and saying where.
STARTUP_TIMEOUT_S = 60.0
#: What the launcher writes to each API server's stdin once every engine sent READY.
OPEN_LINE = b"open\n"
#: Bound on an API server process stopping after SIGTERM.
STOP_TIMEOUT_S = 15.0


def _spec_args(args: argparse.Namespace) -> dict[str, Any]:
    """``ecp serve``'s arguments that travel to the API server processes (JSON values only)."""
    out = {}
    for k, v in vars(args).items():
        try:
            json.dumps(v)
        except TypeError:
            continue  # e.g. the argparse handler function
        out[k] = v
    return out


async def _read_addresses(proc: asyncio.subprocess.Process, index: int) -> tuple[str, str]:
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if not line:
        raise RuntimeError(f"API server {index} exited before binding its sockets (status {await proc.wait()})")
    obj = json.loads(line)
    return obj["input"], obj["output"]


async def _handshake(args: argparse.Namespace, handshake_sock: Any, inputs: list[str], outputs: list[str]) -> None:
    """HELLO → INIT (every API server's addresses), then READY from every engine (``ECP-HS-*``);
    the ready payloads go to the API servers, which wait for them themselves."""
    from ecp.reference.client import HandshakeOwner
    from ecp.reference.client.handshake import ClientHooks
    from ecp.spec import EngineHandshakeMetadata, EngineZmqAddresses
    from ecp.spec.peer import Stage
    from ecp.spec.peer.zmq_io import AsyncFrontendSockets

    from .launch import client_config

    class LauncherHooks(ClientHooks):
        """The registrations go to the API servers: the launcher is done at READY from every engine."""

        def finished(self, peer: Any, now: float) -> bool:
            return not peer.missing(Stage.HELLO) and not peer.missing(Stage.READY)

        def awaited(self, peer: Any) -> Stage | None:
            return Stage.HELLO if peer.missing(Stage.HELLO) else Stage.READY if peer.missing(Stage.READY) else None

    cfg = client_config(args)
    init = EngineHandshakeMetadata(addresses=EngineZmqAddresses(inputs=inputs, outputs=outputs), parallel_config={})
    owner = HandshakeOwner(cfg.engine_ranks, init)
    await AsyncFrontendSockets(owner, {"handshake": handshake_sock}, LauncherHooks()).handshake(
        cfg.handshake_timeout_s, ready_timeout_s=cfg.ready_timeout_s)


async def _stop_children(children: list[asyncio.subprocess.Process]) -> None:
    for p in children:
        if p.returncode is None:
            p.terminate()
    for p in children:
        try:
            await asyncio.wait_for(p.wait(), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            p.kill()
            await p.wait()


async def serve_api_servers(args: argparse.Namespace) -> int:
    """The launcher (see the module docstring). Exit status as ``ecp serve``'s."""
    import zmq
    import zmq.asyncio

    from ..tokenizer import load_tokenizer
    from .http_server import listen_socket
    from .launch import embedded_engine_args, external_engines, handshake_host, spawn_engines, stop_event, stop_process

    n, dp = args.api_server_count, args.data_parallel_size
    stop = stop_event()
    tokenizer = load_tokenizer(args.tokenizer)
    try:
        sock = listen_socket(args.host, args.port)
    except OSError as exc:  # port taken, unknown host: a usage error, not a crash
        print(f"ecp serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="ecp-serve-")
    ctx = zmq.asyncio.Context()
    children: list[asyncio.subprocess.Process] = []
    engines = None
    try:
        spec = {"args": _spec_args(args), "peers": [f"ipc://{os.path.join(tmp, f'peer-{i}')}" for i in range(n)],
                "listen_fd": sock.fileno()}
        for i in range(n):
            # same process group as the launcher: a signal to the group reaches every API server
            children.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ecp.reference.frontend.api_servers", json.dumps({**spec, "index": i}),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, pass_fds=(sock.fileno(),)))
        pairs = []
        try:
            for i, p in enumerate(children):
                pairs.append(await asyncio.wait_for(_read_addresses(p, i), STARTUP_TIMEOUT_S))
        except (RuntimeError, ValueError, KeyError, asyncio.TimeoutError) as exc:
            print(f"ecp serve: an API server process did not start: {exc or 'timed out'}", file=sys.stderr)
            return 1
        handshake = ctx.socket(zmq.ROUTER)
        handshake.setsockopt(zmq.LINGER, 0)
        handshake.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if external_engines(args):
            handshake.bind(f"tcp://{handshake_host(args)}:{args.data_parallel_rpc_port}")
            print(f"ecp serve: waiting for {dp} engine(s) to connect to "
                  f"{handshake.getsockopt_string(zmq.LAST_ENDPOINT)}", file=sys.stderr, flush=True)
        else:
            handshake.bind(f"ipc://{os.path.join(tmp, 'handshake')}")
            engines = spawn_engines(handshake.getsockopt_string(zmq.LAST_ENDPOINT), dp,
                                    embedded_engine_args(args, tokenizer))
        exits = [asyncio.ensure_future(p.wait()) for p in children]
        stopper = asyncio.ensure_future(stop.wait())
        try:
            work = asyncio.ensure_future(_handshake(args, handshake, [a for a, _ in pairs], [b for _, b in pairs]))
            await asyncio.wait([work, stopper, *exits], return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                if stop.is_set():
                    return 0
                print("ecp serve: an API server process ended during the handshake", file=sys.stderr)
                return 1
            work.result()
            handshake.close(0)
            # every engine sent READY (ECP-HS-8): only now may the API servers answer HTTP
            try:
                for p in children:
                    assert p.stdin is not None
                    p.stdin.write(OPEN_LINE)
                    await p.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                print("ecp serve: an API server process ended during startup", file=sys.stderr)
                return 1
            host, port = sock.getsockname()[:2]
            print(f"ecp serve: serving {args.model!r} on http://{host}:{port} with {dp} engine(s) and {n} API "
                  f"server processes", file=sys.stderr, flush=True)
            await asyncio.wait([stopper, *exits], return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                return 0
            ended = [(i, p.returncode) for i, p in enumerate(children) if p.returncode is not None]
            print(f"ecp serve: API server process(es) ended {ended}; stopping", file=sys.stderr)
            return 1
        finally:
            for t in (stopper, *exits):
                t.cancel()
    finally:
        await _stop_children(children)
        if engines is not None:
            stop_process(engines)
        sock.close()
        ctx.destroy(0)
        shutil.rmtree(tmp, ignore_errors=True)


async def _launcher_opens() -> None:
    """Wait for :data:`OPEN_LINE` on stdin; the launcher going away first is an error."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    line = await reader.readline()
    if line != OPEN_LINE:
        raise RuntimeError("the ecp serve launcher ended before every engine was READY")


async def api_server(spec: dict[str, Any]) -> int:
    """API server ``spec["index"]``: a bootstrapped client with that ``client_index``, the
    app, the peer link, HTTP on the inherited listening socket."""
    from ecp.reference.client import EngineCoreClient

    from ..tokenizer import load_tokenizer
    from .peers import PeerLink
    from .http_server import start_http
    from .launch import build_app, client_config, http_limits, tune_gc_for_serving, stop_event, until_stopped

    args = argparse.Namespace(**spec["args"])
    index = spec["index"]
    stop = stop_event()
    tokenizer = load_tokenizer(args.tokenizer)
    client = EngineCoreClient(client_config(args, bootstrapped=True, client_index=index, handshake_address=None))
    await client.bind()
    link: PeerLink | None = None
    try:
        print(json.dumps({"input": client.input_address, "output": client.output_address}), flush=True)
        if not await until_stopped(stop, client.wait_ready()):
            return 0
        # the ready payloads came (registration); READY goes to the launcher, which says so
        if not await until_stopped(stop, _launcher_opens()):
            return 0
        link = PeerLink(index, spec["peers"], None)
        app, _ = build_app(args, client, tokenizer, peers=link)
        link.frontend = app.state.serve.frontend
        await link.start()
        sock = socket.socket(fileno=spec["listen_fd"])
        sock.setblocking(False)
        http = await start_http(app, log_level=args.log_level, http=args.http, sock=sock, limits=http_limits(args))
        tune_gc_for_serving()
        await until_stopped(stop, asyncio.shield(http.task))
        await http.stop()
        return 0
    finally:
        if link is not None:
            await link.close()
        await client.shutdown()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ecp.reference.frontend.api_servers SPEC_JSON (started by ecp serve "
              "--api-server-count N)", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    logging.basicConfig(level=str(spec["args"].get("log_level", "warning")).upper(),
                        format=f"%(levelname)s %(name)s[api {spec['index']}]: %(message)s")
    return asyncio.run(api_server(spec))


if __name__ == "__main__":
    sys.exit(main())
