"""A test double: reference engines whose killed rank stays invisible to its frontend.

    python tests/conformance/dead_rank_hider.py --handshake-address ADDR --engine-count N

A supervisor starts one process per rank (``--engine-count 1 --engine-start-index K``, as ``ecp
engine`` does), and keeps running when a rank dies. Each rank process serves its rank (the
reference engine, in a thread) and, once ready, forks a child that holds the rank's connections
open and does nothing (forked by the engine thread as it becomes ready, before it serves). A SIGKILL of the rank's process then closes no connection, sends no
ENGINE_CORE_DEAD and exits no command: no frontend can tell the rank is dead. SIGTERM stops it all.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import warnings


def _keep_connections(watch: int) -> None:
    """In the forked child: hold every inherited descriptor until SIGTERM or until ``watch`` is gone."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        time.sleep(0.2)
        try:
            os.kill(watch, 0)
        except ProcessLookupError:
            os._exit(0)


class _ForkOnReady(threading.Event):
    """The engine thread sets its ``ready`` event once READY went out and before it serves
    anything: the child is forked right there, so every connection is held by it before the
    frontend's first request can be answered (a fork from the main thread would race the session)."""

    def __init__(self, watch: int) -> None:
        super().__init__()
        self._watch = watch

    def set(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # forking a threaded process: the child only sleeps
            if os.fork() == 0:
                _keep_connections(self._watch)
        super().set()


def rank(address: str, index: int, size: int) -> int:
    from ecp.reference.engine.config import config_from_options
    from ecp.reference.engine.server import EngineServer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = EngineServer(config_from_options(), rank=index, handshake_address=address, data_parallel_size=size,
                          local_index=0, stop_event=stop)
    server.ready = _ForkOnReady(os.getppid())
    thread = threading.Thread(target=server.run, name=f"hider-engine-{index}", daemon=True)
    thread.start()
    while not stop.wait(0.2) and thread.is_alive():
        pass
    stop.set()
    thread.join(5)
    return 0


def supervise(address: str, count: int) -> int:
    children = [subprocess.Popen([sys.executable, __file__, "--handshake-address", address, "--engine-count", "1",
                                  "--engine-start-index", str(k), "--data-parallel-size", str(count)])
                for k in range(count)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()  # a rank that died is not noticed: that is the fault
    for c in children:
        if c.poll() is None:
            c.terminate()
    for c in children:
        c.wait(10)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--handshake-address", required=True)
    ap.add_argument("--engine-count", type=int, default=1)
    ap.add_argument("--engine-start-index", type=int, default=None)
    ap.add_argument("--data-parallel-size", type=int, default=None)
    args = ap.parse_args()
    if args.engine_start_index is None:
        return supervise(args.handshake_address, args.engine_count)
    return rank(args.handshake_address, args.engine_start_index, args.data_parallel_size or 1)


if __name__ == "__main__":
    sys.exit(main())
