"""``ecp serve`` in a thread of the calling process: the in-process form of the reference frontend.

:func:`serve` takes ``ecp serve``'s arguments (the same parser, the same :func:`.server.serve`
coroutine) and runs the server on an event loop of its own, in a daemon thread; it returns at once
with a :class:`ServeThread` that stops it. The conformance harness calls it as a frontend adapter
(``ecp conformance frontend --adapter ecp.reference.frontend.in_thread:serve -- ARGS``), so that a
run costs no process launch per frontend::

    handle = serve(["--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
                    "--data-parallel-rpc-port", "5570", "--data-parallel-size", "2", "--port", "8000"])
    ...
    handle.stop()

Only external engines (``--data-parallel-size-local 0``) and one API server are served this way:
embedded engines and API-server processes are processes of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
from typing import Sequence

#: how long :meth:`ServeThread.stop` waits for the server to close its client, sockets and HTTP server
STOP_S = 15.0
#: the longest :meth:`ServeThread.frozen` holds the server's event loop
FREEZE_S = 10.0


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``ecp serve``'s arguments, read by its own parser; a usage error raises ``ValueError``."""
    from .commands import register

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # type: ignore[override] - never exit the calling process
            raise ValueError(f"ecp serve: {message}")

    parser = Parser(prog="ecp")
    register(parser.add_subparsers(dest="command", parser_class=Parser))
    args = parser.parse_args(["serve", *argv])
    if args.data_parallel_size_local != 0:
        raise ValueError("ecp serve in a thread serves external engines only (--data-parallel-size-local 0)")
    if getattr(args, "api_server_count", 1) > 1:
        raise ValueError("ecp serve in a thread runs one API server (--api-server-count 1)")
    return args


class ServeThread:
    """One ``ecp serve`` on its own event loop in a daemon thread."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.status: int | None = None
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name=f"ecp-serve:{args.port}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from .server import serve as serve_coroutine

        asyncio.set_event_loop(self._loop)
        try:
            self.status = self._loop.run_until_complete(serve_coroutine(self.args, stop=self._stop))
        except BaseException as exc:  # noqa: BLE001 - a frontend that fails ends its thread, not the caller
            import sys

            print(f"ecp serve (thread) ended: {exc!r}", file=sys.stderr, flush=True)
            self.status = 1
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def exit_status(self) -> int | None:
        """The server's exit status once it ended (as ``ecp serve``'s: 0, 1 for an error), else None."""
        return None if self._thread.is_alive() else self.status

    def wait(self, timeout: float) -> int | None:
        self._thread.join(timeout)
        return self.exit_status()

    @contextlib.contextmanager
    def frozen(self, limit_s: float = FREEZE_S):
        """Hold the server's event loop for the body (at most ``limit_s``), as SIGSTOP holds a process:
        what happens to its sockets meanwhile (a crowd of clients leaving) reaches it in one batch."""
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(limit_s)

        try:
            self._loop.call_soon_threadsafe(hold)
        except RuntimeError:  # the server has ended: nothing to hold
            yield
            return
        held.wait(limit_s)
        try:
            yield
        finally:
            release.set()

    def stop(self) -> None:
        """Stop serving (as SIGTERM does) and wait, at most :data:`STOP_S`, until the server has closed."""
        if self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop closed between the check and the call: it has ended
                pass
            self._thread.join(STOP_S)


def serve(argv: Sequence[str]) -> ServeThread:
    """Start ``ecp serve ARGV`` in a thread of this process; its handle stops it."""
    return ServeThread(parse(argv))
