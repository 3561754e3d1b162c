"""What ``ecp serve`` and its API server processes (:mod:`.api_servers`) start from.

* :func:`check_args`, :func:`client_config`, :func:`embedded_engine_args`: ``ecp serve``'s
  arguments read into a usage error, the engine-core client's configuration and the embedded
  engines' flags;
* :func:`spawn_engines`, :func:`stop_process`: the embedded default, N reference engines as
  subprocesses (``python -m ecp.reference.engine --local …``) pointed at the client's handshake
  address;
* :func:`build_app`: the Starlette app over a ready client;
* :func:`stop_event`, :func:`until_stopped`: SIGINT/SIGTERM end every stage of startup and serving;
  :func:`tune_gc_for_serving` once serving starts.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shlex
import signal
import subprocess
import sys
from typing import Any, Sequence

from ecp.spec import VLLM_RELEASE, VLLM_VERSION

from .engine_client import EngineClient


#: allocations between two young-generation collections while serving (CPython's default: 700).
#: Under load every in-flight request holds objects that survive a few young collections: at the
#: default the collector ran ~280 young, ~25 middle and 2-3 full collections over one load of
#: benchmarks/serve_compare.py (1,024 requests of 64 tokens at c=256), 72-147 ms of the server's
#: time; at 10,000, ~55, 4 and 1, 39-64 ms (docs/frontend.md, "How the serving path is built").
GC_YOUNG_THRESHOLD = 10_000


def tune_gc_for_serving() -> None:
    """Set the cyclic garbage collector up for serving, once startup is done.

    What startup allocated (modules, types, tables, the client's handshake state) is taken out
    of the collector's sight, as vLLM does once its engine core is up: a full collection under
    load then scans what serving allocates, not the whole process (a pause that otherwise reaches
    tens of milliseconds and shows as inter-token latency). Young collections run every
    :data:`GC_YOUNG_THRESHOLD` allocations instead of CPython's 700; the older generations keep
    CPython's ratios."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


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


async def until_stopped(stop: asyncio.Event, work: Any) -> bool:
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
    header = getattr(args, "kv_params_trust_header", None)
    if header is not None:
        name, sep, value = header.partition("=")
        if not sep or not name.strip() or not value or not all(c.isalnum() or c in "-_" for c in name.strip()):
            return "--kv-params-trust-header must be NAME=VALUE (a header name and the secret value the proxy sets)"
    try:
        http_limits(args)
    except ValueError as exc:
        return f"HTTP limits: {exc}"
    if getattr(args, "api_server_count", 1) < 1:
        return "--api-server-count must be at least 1"
    return check_release(getattr(args, "vllm", VLLM_RELEASE))


def http_limits(args: argparse.Namespace) -> Any:
    """The header deadline and connection caps ``ecp serve``'s arguments ask for."""
    from .http_limits import HttpLimits

    return HttpLimits(header_timeout_s=getattr(args, "http_header_timeout", 10.0),
                      max_connections=getattr(args, "max_connections", None),
                      max_connections_per_client=getattr(args, "max_connections_per_client", 4096))


def check_release(reference: str) -> str | None:
    """Why ``--vllm`` names no release (a usage error), or ``None``."""
    from ..client.release import ClientRelease
    from ecp.spec.layout.model import LayoutError

    try:
        ClientRelease(reference)
    except LayoutError as exc:
        return f"--vllm: {exc}"
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
        bugs=client_bugs(args.bug), vllm=getattr(args, "vllm", VLLM_RELEASE))
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
    from ..client.release import OWN

    if getattr(args, "vllm", VLLM_RELEASE) not in OWN:  # the engines speak the client's release
        extra += ["--vllm", args.vllm]
    return extra


def build_app(args: argparse.Namespace, client: EngineClient, tokenizer: Any, peers: Any = None) -> tuple[Any, bool]:
    """The Starlette app over a ready ``client``; returns it and whether dev mode is on."""
    from .app import ServeApp
    from .faults import FrontendFaults
    from .serving import Frontend, FrontendConfig

    # ECP-HS-9: the smallest max_model_len of the engines (the fault layer may swap it for the largest)
    reported = [r.max_model_len for r in client.ready_responses.values() if r is not None]
    max_model_len = FrontendFaults(args.bug).max_model_len(client.max_model_len, reported)
    fcfg = FrontendConfig(model_name=args.model, max_model_len=max_model_len,
                          kv_connector=args.kv_connector, bugs=frozenset(args.bug),
                          trust_request_kv_params=getattr(args, "trust_request_kv_params", False),
                          kv_params_trust_header=getattr(args, "kv_params_trust_header", None),
                          vllm_version=_vllm_version(getattr(args, "vllm", VLLM_RELEASE)),
                          dev_mode=args.dev_mode or os.environ.get("VLLM_SERVER_DEV_MODE", "0") not in ("", "0"))
    frontend = Frontend(client, tokenizer, fcfg)
    return ServeApp(frontend, peers=peers).build(), fcfg.dev_mode


def _vllm_version(reference: str) -> str:
    """What ``GET /version`` reports: the version of the release the engines speak."""
    from ..client.release import ClientRelease

    release = ClientRelease(reference)
    return release.profile.vllm_version if release.profile is not None else VLLM_VERSION


def stop_event() -> asyncio.Event:
    """Set by SIGINT/SIGTERM: ``ecp serve`` then ends the server and the engines, at any stage."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
