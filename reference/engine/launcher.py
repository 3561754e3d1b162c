"""Start reference engines from Python (tests, the conformance harness, tools).

``launch(handshake_address, engine_count, engine_start_index, mode=…, **options)``
starts ``engine_count`` engine cores for global ranks ``start .. start+count-1``
that join the frontend-owned handshake at ``handshake_address`` and returns an
:class:`EngineHandle`. ``mode="thread"`` runs them as threads of this process
(fast to start; what unit tests use); ``mode="process"`` runs one
``python -m ecp.reference.engine`` OS process per rank, like ``ecp engine``.
``options`` are :class:`~ecp.reference.engine.config.EngineConfig` fields.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .config import EngineConfig, config_from_options, config_to_argv


class EngineHandle:
    """Running engines. :meth:`stop` ends them gracefully (in-flight requests get
    ABORT outputs) and returns their exit codes."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ranks
        self._threads: list[threading.Thread] = []
        self._servers: list[Any] = []
        self._stop = threading.Event()
        self._procs: list[subprocess.Popen] = []

    @property
    def servers(self) -> list[Any]:
        """The :class:`~ecp.reference.engine.server.EngineServer` objects (thread mode)."""
        return self._servers

    def alive(self) -> bool:
        if self._procs:
            return any(p.poll() is None for p in self._procs)
        return any(t.is_alive() for t in self._threads)

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Thread mode: wait until every engine sent READY."""
        deadline = time.monotonic() + timeout
        return all(s.ready.wait(max(0.0, deadline - time.monotonic())) for s in self._servers)

    def exit_codes(self) -> list[int | None]:
        if self._procs:
            return [p.poll() for p in self._procs]
        return [s.exit_code for s in self._servers]

    def signal(self, signum: int = signal.SIGTERM) -> None:
        """Process mode: deliver a signal to every engine process."""
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signum)

    def wait(self, timeout: float = 10.0) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for p in self._procs:
            try:
                p.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for t in self._threads:
            t.join(max(0.01, deadline - time.monotonic()))
        return self.exit_codes()

    def stop(self, timeout: float = 10.0) -> list[int | None]:
        """Stop gracefully; kill what does not exit within ``timeout``."""
        self._stop.set()
        self.signal(signal.SIGTERM)
        codes = self.wait(timeout)
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
        return codes if not self._procs else [p.poll() for p in self._procs]

    def __enter__(self) -> "EngineHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def launch(handshake_address: str, engine_count: int = 1, engine_start_index: int = 0, *,
           mode: str = "thread", config: EngineConfig | None = None, data_parallel_size: int | None = None,
           stderr: Any = None, **options: Any) -> EngineHandle:
    """Start engines for ranks ``engine_start_index .. +engine_count-1`` (see module doc)."""
    if config is None:
        config = config_from_options(**options)
    elif options:
        config = config.replace(**options)
        config.validate()
    dp_size = data_parallel_size or config.data_parallel_size or (engine_start_index + engine_count)
    ranks = list(range(engine_start_index, engine_start_index + engine_count))
    handle = EngineHandle(ranks)
    if mode == "thread":
        from .server import EngineServer

        for i, rank in enumerate(ranks):
            server = EngineServer(config, rank=rank, handshake_address=handshake_address,
                                  data_parallel_size=dp_size, local_index=i, stop_event=handle._stop)
            t = threading.Thread(target=server.run, name=f"ecp-engine-{rank}", daemon=True)
            handle._servers.append(server)
            handle._threads.append(t)
            t.start()
    elif mode == "process":
        for i, rank in enumerate(ranks):
            argv = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", handshake_address,
                    "--engine-count", "1", "--engine-start-index", str(rank),
                    "--data-parallel-size", str(dp_size), "--dp-local-index", str(i),
                    *config_to_argv(config.replace(data_parallel_size=None))]
            handle._procs.append(subprocess.Popen(argv, stderr=stderr, env=dict(os.environ)))
    else:
        raise ValueError("mode must be 'thread' or 'process'")
    return handle
