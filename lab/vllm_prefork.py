"""vLLM's CLI launched as forks of one process that imported vLLM once.

A launch of ``vllm serve --headless`` on CPU spends most of its CPU importing vLLM (docs/interop.md,
"What the engine-role run costs"); ``vllm_forked_cli.py`` saves the engine core's second import. This
saves the first one too, for a run that launches vLLM many times (the engine-role suite: 16 launches
at DP=1). Two commands, both run with the peer's Python (``vllm_forked_serve.sh`` runs them):

``server SOCKET``
    Import vLLM's CLI (with ``vllm_forked_cli``'s fork patch) and the modules a headless launch
    imports on its way to serving, then listen on the Unix socket SOCKET. Each connection is one
    launch: the server forks, and the child becomes that launch, in its own session, with the
    launcher's argv, environment, working directory and standard streams, running vLLM's CLI
    ``main()`` as ``vllm`` would. Nothing of a launch is shared with another: each is a fresh
    fork of the server, which itself never runs vLLM.

``launch SOCKET ARG...``
    What the harness starts as its engine command: asks the server for a launch of ``vllm ARG...``,
    and stands for it. The signals the harness sends (SIGTERM, SIGINT, SIGHUP, SIGQUIT) go to the
    launch's process group; when the launch exits, this exits with its status (a launch killed by
    a signal is reported as killed by that signal). If this is killed (SIGKILL included), the server
    kills the launch's process group; once a launch exits, the server kills what it left in its
    group, as the harness does for a process group it created.

So the engine under test is vLLM's engine core, built afresh by vLLM's own code in every launch;
only the imports are inherited. The environment that a module reads at import (the peer's
``fake_executor`` reads ``FAKE_STEP_DELAY``) is the launch's: the server does not import those.
Start a server before the run and stop it (SIGTERM) after; ``interop_matrix.py --forked`` does both.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
from typing import Callable

#: the signals the launcher passes on to its launch
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
#: the largest request (argv, environment, working directory) a launcher may send
MAX_REQUEST = 1 << 20
#: how long the server waits for a connected launcher's request before it refuses it
REQUEST_TIMEOUT_S = 5.0


def _warm_imports() -> None:
    """What a headless launch imports after ``main()`` starts, imported once here instead."""
    import vllm_forked_cli  # noqa: F401 - patches CoreEngineProcManager to fork, imports the CLI

    import importlib

    for name in ("vllm.entrypoints.cli.serve", "vllm.engine.arg_utils", "vllm.v1.engine.core",
                 "vllm.v1.engine.utils", "vllm.v1.executor.abstract", "vllm.v1.kv_cache_interface",
                 "vllm.v1.outputs", "vllm.v1.worker.worker_base", "vllm.v1.core.sched.scheduler",
                 "transformers"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a module another release moved: the launch imports what it needs itself


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One launch request: a JSON line (argv, env, cwd) with the launcher's three standard streams
    passed along. Raises ``ValueError`` or ``OSError`` (timeout) with the passed streams closed."""
    data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
    try:
        while not data.endswith(b"\n"):
            more = conn.recv(MAX_REQUEST)
            if not more or len(data) > MAX_REQUEST:
                raise ValueError("incomplete launch request")
            data += more
        if len(fds) != 3:
            raise ValueError(f"a launch request carries 3 file descriptors, this one {len(fds)}")
        request = json.loads(data)
        if not (isinstance(request, dict) and isinstance(request.get("cwd"), str)
                and isinstance(request.get("argv"), list) and all(isinstance(a, str) for a in request["argv"])
                and isinstance(request.get("env"), dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())):
            raise ValueError("a launch request is one JSON object: argv (strings), env (strings), cwd")
        return request, fds
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        raise


def _become_launch(request: dict, fds: list[int], entry: Callable[[], int | None]) -> None:
    """In the forked child: turn into the launch the request asks for, run ``entry`` as it, and exit."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (*FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["vllm", *request["argv"]]
        code = entry()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code or 0)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def serve(path: str, entry: Callable[[], int | None], request_timeout_s: float = REQUEST_TIMEOUT_S) -> int:
    """Serve launches on the Unix socket ``path`` until SIGTERM or SIGINT: each a fork that runs
    ``entry()`` (vLLM's CLI ``main``) with the launcher's argv (after ``vllm``), environment, working
    directory and standard streams, and exits with what it returns. A launcher that has not sent
    its request within ``request_timeout_s`` is refused. At the end every launch still running is
    killed with its process group."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # the socket appears only once the server is ready
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept", None))
    wake_r, wake_w = socket.socketpair()  # a stop signal wakes the select at once
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    sel.register(wake_r, selectors.EVENT_READ, ("wake", None))
    launches: dict[int, socket.socket | None] = {}  # pid -> its launcher's connection (None: gone)
    print(f"vllm_prefork: serving launches on {path} (pid {os.getpid()})", flush=True)
    try:
        while not stopping:
            for key, _ in sel.select():
                kind, pid = key.data
                if kind == "wake":
                    wake_r.recv(4096)
                elif kind == "accept":
                    conn, _ = listener.accept()
                    conn.settimeout(request_timeout_s)  # a silent launcher must not hold the server
                    try:
                        request, fds = _read_request(conn)
                        conn.settimeout(None)
                    except (OSError, ValueError) as exc:
                        print(f"vllm_prefork: refused a launch: {exc}", file=sys.stderr, flush=True)
                        conn.close()
                        continue
                    sys.stdout.flush()
                    sys.stderr.flush()
                    child = os.fork()
                    if child == 0:
                        signal.set_wakeup_fd(-1)
                        for other_key in list(sel.get_map().values()):
                            if other_key.data[0] == "exit":
                                os.close(other_key.fd)
                        sel.close()
                        wake_r.close()
                        wake_w.close()
                        listener.close()
                        conn.close()
                        for other in launches.values():
                            if other is not None:
                                other.close()
                        _become_launch(request, fds, entry)
                    for fd in fds:
                        os.close(fd)
                    launches[child] = conn
                    sel.register(os.pidfd_open(child), selectors.EVENT_READ, ("exit", child))
                    sel.register(conn, selectors.EVENT_READ, ("launcher", child))
                    conn.sendall(f"pid {child}\n".encode())
                elif kind == "exit":
                    # still a zombie, so its group id cannot have been reused: end what it left
                    _killpg(pid, signal.SIGKILL)
                    _, status = os.waitpid(pid, 0)
                    sel.unregister(key.fileobj)
                    os.close(key.fd)
                    conn = launches.pop(pid)
                    if conn is not None:
                        try:
                            conn.sendall(f"exit {status}\n".encode())
                        except OSError:
                            pass
                        sel.unregister(conn)
                        conn.close()
                elif kind == "launcher":
                    conn = key.fileobj
                    if not conn.recv(4096):  # the launcher is gone (killed): so goes its launch
                        _killpg(pid, signal.SIGKILL)
                        sel.unregister(conn)
                        conn.close()
                        launches[pid] = None
    finally:
        for pid in launches:
            _killpg(pid, signal.SIGKILL)
        for pid in launches:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        listener.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return 0


def launch(path: str, argv: list[str]) -> int:
    """Have the server at ``path`` run ``vllm ARGV...``, stand for it (signals, exit status), and
    return its exit code (2: no server, or the server refused)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        print(f"vllm_prefork: no launch server at {path} ({exc}); start one with "
              f"'vllm_prefork.py server {path}'", file=sys.stderr)
        return 2
    pending: list[int] = []
    launched: list[int] = []

    def forward(sig, _frame):
        if launched:
            _killpg(launched[0], sig)
        else:
            pending.append(sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    socket.send_fds(sock, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    replies = sock.makefile("rb")
    line = replies.readline().split()
    if len(line) != 2 or line[0] != b"pid":
        print("vllm_prefork: the launch server refused the launch", file=sys.stderr)
        return 2
    launched.append(int(line[1]))
    for sig in pending:
        _killpg(launched[0], sig)
    line = replies.readline().split()
    if len(line) != 2 or line[0] != b"exit":
        print("vllm_prefork: the launch server went away", file=sys.stderr)
        return 1
    status = int(line[1])
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.waitstatus_to_exitcode(status)


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "server":
        _warm_imports()
        from vllm_forked_cli import main as vllm_main

        return serve(sys.argv[2], vllm_main)
    if len(sys.argv) >= 4 and sys.argv[1] == "launch":
        return launch(sys.argv[2], sys.argv[3:])
    print(__doc__, file=sys.stderr)
    print("usage: vllm_prefork.py server SOCKET | vllm_prefork.py launch SOCKET ARG...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
