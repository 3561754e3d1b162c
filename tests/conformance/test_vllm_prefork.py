"""lab/vllm_prefork.py, the launcher that makes each vLLM launch a fork of one server, with a
stand-in for vLLM's CLI: the harness must see each launch as the process it started (exit status,
output, signals), and no launch may outlive its launcher or the server."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 10.0

#: the stand-in for vLLM's CLI main: what it does is named by its first argument
ENTRY = '''
import os, signal, subprocess, sys, time

def main():
    what = sys.argv[1]
    print(f"argv={sys.argv[1:]} cwd={os.getcwd()} env={os.environ.get('PREFORK_PROBE')}", flush=True)
    if what == "exit":
        return int(sys.argv[2])
    if what == "wait-term":
        signal.signal(signal.SIGTERM, lambda *_: (print("got SIGTERM", flush=True), os._exit(0)))
    if what == "family":  # a child of its own, as vllm serve starts its engine core
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(f"child={child.pid}", flush=True)
    print(f"pid={os.getpid()}", flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        signal.pause() if what == "wait-term" else time.sleep(60)
    return 9
'''


def _gone(pid: int, timeout: float = WAIT_S) -> bool:
    """Whether the process ``pid`` exits within ``timeout`` (waited on through a pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _wait_for_line(path: Path, prefix: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines():
            if line.startswith(prefix):
                return line[len(prefix):]
        time.sleep(0.02)  # polling a file the launch writes; bounded by the deadline
    raise AssertionError(f"no {prefix!r} line in {path.read_text()!r}")


@pytest.fixture
def server(tmp_path):
    (tmp_path / "fake_cli.py").write_text(ENTRY)
    sock = tmp_path / "launch.sock"
    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(tmp_path)!r}]; import fake_cli; from lab import vllm_prefork; "
            f"sys.exit(vllm_prefork.serve({str(sock)!r}, fake_cli.main, request_timeout_s=0.5))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
        time.sleep(0.02)  # the socket appears once the server listens; bounded by the deadline
    yield proc, sock
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(WAIT_S)


def _launch(sock: Path, tmp_path: Path, *argv: str) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"launch-{argv[0]}.log"
    with open(out, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "lab" / "vllm_prefork.py"), "launch", str(sock), *argv],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path,
                                env={**os.environ, "PREFORK_PROBE": "from-the-launcher"})
    return proc, out


def _family(sock: Path, tmp_path: Path) -> tuple[subprocess.Popen, int, int]:
    """A launch with a child of its own: its launcher, its pid, its child's pid."""
    proc, out = _launch(sock, tmp_path, "family")
    child = int(_wait_for_line(out, "child="))
    return proc, int(_wait_for_line(out, "pid=")), child


def test_a_launch_runs_with_the_launchers_argv_environment_cwd_and_streams_and_exits_with_its_status(server, tmp_path):
    _, sock = server
    proc, out = _launch(sock, tmp_path, "exit", "3")
    assert proc.wait(WAIT_S) == 3
    assert f"argv=['exit', '3'] cwd={tmp_path} env=from-the-launcher" in out.read_text()


def test_sigterm_to_the_launchers_group_reaches_the_launch(server, tmp_path):
    _, sock = server
    proc, out = _launch(sock, tmp_path, "wait-term")
    pid = int(_wait_for_line(out, "pid="))
    assert pid != proc.pid
    os.killpg(proc.pid, signal.SIGTERM)  # what the harness does to stop a peer
    assert proc.wait(WAIT_S) == 0
    assert "got SIGTERM" in out.read_text()
    assert _gone(pid)


def test_a_launch_killed_by_a_signal_is_reported_as_killed_by_it(server, tmp_path):
    _, sock = server
    proc, out = _launch(sock, tmp_path, "sleep")
    os.kill(int(_wait_for_line(out, "pid=")), signal.SIGKILL)
    assert proc.wait(WAIT_S) == -signal.SIGKILL


def test_a_killed_launcher_takes_its_launch_and_the_launchs_children_with_it(server, tmp_path):
    _, sock = server
    proc, pid, child = _family(sock, tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(WAIT_S)
    assert _gone(pid) and _gone(child)


def test_a_launch_that_exits_leaves_no_children_behind(server, tmp_path):
    _, sock = server
    proc, pid, child = _family(sock, tmp_path)
    os.kill(pid, signal.SIGTERM)  # the launch dies, its child would live on
    assert proc.wait(WAIT_S) == -signal.SIGTERM
    assert _gone(child)


def test_a_malformed_request_is_refused_and_the_server_keeps_serving(server, tmp_path):
    srv, sock = server
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
        bad.connect(str(sock))
        bad.sendall(b'{"argv": []}\n')  # no standard streams passed with it
        bad.settimeout(WAIT_S)
        assert bad.recv(100) == b""  # refused: closed without a launch
    proc, _ = _launch(sock, tmp_path, "exit", "0")
    assert proc.wait(WAIT_S) == 0
    assert srv.poll() is None


def test_a_request_that_is_not_a_launch_is_refused_with_its_streams_closed(server, tmp_path):
    srv, sock = server
    for body in (b"not json\n", b'{"argv": "serve", "env": {}, "cwd": "/"}\n', b'[1, 2]\n'):
        r, w = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect(str(sock))
            socket.send_fds(bad, [body], [w, w, w])
            bad.settimeout(WAIT_S)
            assert bad.recv(100) == b""  # refused
        os.close(w)
        # the pipe reads its end only once no copy of the write end is left open: not in the server
        assert select.select([r], [], [], WAIT_S)[0] and os.read(r, 1) == b""
        os.close(r)
    proc, _ = _launch(sock, tmp_path, "exit", "0")
    assert proc.wait(WAIT_S) == 0
    assert srv.poll() is None


def test_a_launcher_that_sends_nothing_is_refused_after_a_while_and_holds_no_one_up(server, tmp_path):
    srv, sock = server
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(sock))
        silent.settimeout(WAIT_S)
        assert silent.recv(100) == b""  # refused once the server's request timeout passed
    proc, _ = _launch(sock, tmp_path, "exit", "4")
    assert proc.wait(WAIT_S) == 4
    assert srv.poll() is None


def test_a_stopped_server_ends_its_launches_and_removes_its_socket(server, tmp_path):
    srv, sock = server
    proc, pid, child = _family(sock, tmp_path)
    os.killpg(srv.pid, signal.SIGTERM)
    assert srv.wait(WAIT_S) == 0
    assert _gone(pid) and _gone(child)
    assert not sock.exists()
    assert proc.wait(WAIT_S) != 0  # its launcher learns that the launch is gone


def test_without_a_server_the_launcher_says_so(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "lab" / "vllm_prefork.py"), "launch", str(tmp_path / "none.sock"),
                           "serve"], capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 2
    assert "no launch server at" in proc.stderr
