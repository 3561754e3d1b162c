"""Process entry of ``ecp engine``: one rank in this process, ranks as threads
(``--in-process``), or a supervisor that starts one OS process per rank and
forwards SIGTERM/SIGINT to them."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import logging
import os
import signal
import sys
import threading

from .config import EngineConfig

log = logging.getLogger("ecp.engine")


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    values = {}
    for f in dataclasses.fields(EngineConfig):
        if f.name == "bugs":
            values["bugs"] = list(args.bug or [])
        elif hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    config = EngineConfig(**values)
    config.validate()
    return config


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"ecp engine: {exc}", file=sys.stderr)
        return 2
    if config.executor == "torch" and importlib.util.find_spec("torch") is None:
        # say so now, not after a frontend's INIT arrives
        print("ecp engine: --executor torch needs torch: pip install 'engine-core-protocol[gpu]'",
              file=sys.stderr)
        return 2
    if not args.handshake_address.startswith(("tcp://", "ipc://")):
        print(f"ecp engine: --handshake-address must be tcp://HOST:PORT or ipc:///PATH, "
              f"got {args.handshake_address!r}", file=sys.stderr)
        return 2
    if args.engine_count < 1 or not 0 <= args.engine_start_index <= 0xFFFF - args.engine_count + 1:
        print("ecp engine: --engine-count must be >= 1 and ranks must fit 2 bytes", file=sys.stderr)
        return 2
    dp_size = args.data_parallel_size or (args.engine_start_index + args.engine_count)
    if args.engine_count > 1 and not args.in_process:
        return _supervise(args, config, dp_size)
    return _run_here(args, config, dp_size)


def _run_here(args: argparse.Namespace, config: EngineConfig, dp_size: int) -> int:
    from .server import EngineServer

    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        log.info("signal %d: aborting in-flight requests and exiting", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.local:
        watch_parent(stop.set, stop)
    servers = [EngineServer(config, rank=args.engine_start_index + i, handshake_address=args.handshake_address,
                            data_parallel_size=dp_size, local_index=args.dp_local_index + i, stop_event=stop)
               for i in range(args.engine_count)]
    if len(servers) == 1:
        return servers[0].run()
    threads = [threading.Thread(target=s.run, name=f"ecp-engine-{s.rank}", daemon=True) for s in servers]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
        if any(s.exit_code not in (None, 0) for s in servers):
            stop.set()  # one rank failed: take the others down too
    return max((s.exit_code or 0) for s in servers)


def _supervise(args: argparse.Namespace, config: EngineConfig, dp_size: int) -> int:
    from .launcher import launch

    handle = launch(args.handshake_address, args.engine_count, args.engine_start_index, mode="process",
                    config=config, data_parallel_size=dp_size)

    def forward(signum, frame):  # noqa: ARG001
        handle.signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if args.local:
        gone = threading.Event()
        watch_parent(lambda: (gone.set(), handle.signal(signal.SIGTERM)), gone)
    stopping = False
    while handle.alive():
        handle.wait(0.5)
        if not stopping and any(c not in (None, 0) for c in handle.exit_codes()):
            stopping = True  # one rank failed: take the others down too (as --in-process does)
            handle.signal(signal.SIGTERM)
    codes = handle.exit_codes()
    return max((c if c is not None and c >= 0 else 1) for c in codes)


def watch_parent(on_orphaned, stop: threading.Event, poll_s: float = 0.5) -> threading.Thread:
    """A ``--local`` engine lives no longer than the process that spawned it (as vLLM's local
    engine cores do): when that parent dies without stopping us (SIGKILL, the OOM killer), call
    ``on_orphaned`` once instead of lingering forever as an orphan. Stops watching when ``stop`` is set."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(poll_s):
            if os.getppid() != parent:
                log.warning("parent process %d is gone: stopping", parent)
                on_orphaned()
                return

    thread = threading.Thread(target=watch, name="ecp-engine-parent-watch", daemon=True)
    thread.start()
    return thread
