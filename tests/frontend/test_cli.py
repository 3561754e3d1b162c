"""``ecp serve`` as a process: the embedded default and external engines (vLLM's flags)."""

from __future__ import annotations

import queue
import re
import socket
import subprocess
import sys
import threading

import httpx

from ecp.conformance.frontend.launcher import free_port
from ecp.reference.engine import launch

SERVING = re.compile(r"serving .* on (http://\S+)")


class ServeProcess:
    """``python -m ecp.spec.cli serve …`` with its stderr read line by line (bounded waits)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", "serve", "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: re.Pattern | str, timeout: float = 30.0) -> re.Match:
        pat = re.compile(pattern) if isinstance(pattern, str) else pattern
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line matching {pat.pattern!r}; got {self.seen}") from None
            self.seen.append(line)
            m = pat.search(line)
            if m:
                return m

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def _complete(url: str) -> dict:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 5}, timeout=20)
    assert r.status_code == 200, r.text
    return r.json()


def test_ecp_serve_embedded_default_serves_a_completion_and_exits_cleanly():
    serve = ServeProcess("--data-parallel-size", "2")
    try:
        url = serve.wait_for(SERVING).group(1)
        out = _complete(url)
        assert out["choices"][0]["finish_reason"] == "length" and out["usage"]["completion_tokens"] == 5
        assert httpx.get(f"{url}/is_sleeping").status_code == 404  # no dev mode
    finally:
        code = serve.stop()
    assert code == 0


def test_ecp_serve_waits_for_external_engines_like_vllm_serve():
    port = free_port()
    serve = ServeProcess("--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
                         "--data-parallel-rpc-port", str(port), "--dev-mode")
    engine = None
    try:
        serve.wait_for(f"waiting for 1 engine.* tcp://127.0.0.1:{port}")
        # A headless remote engine (HELLO local=false, headless=true) connects out to the frontend.
        engine = launch(f"tcp://127.0.0.1:{port}", 1, 0, mode="thread", handshake_timeout_s=20,
                        log_level="WARNING")
        url = serve.wait_for(SERVING).group(1)
        _complete(url)
        assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    finally:
        code = serve.stop()
        if engine is not None:
            engine.stop(5)
    assert code == 0


def test_ecp_serve_on_a_taken_port_is_a_usage_error_not_a_traceback():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        serve = ServeProcess("--port", str(taken.getsockname()[1]))
        try:
            code = serve.proc.wait(60)
        finally:
            serve.stop()
    serve.wait_for("cannot listen on 127.0.0.1:")
    assert code == 2
    assert not any("Traceback" in line for line in serve.seen), serve.seen


def test_bug_list_names_every_fault_with_its_clause_and_an_unknown_one_is_a_usage_error():
    from ecp.reference.frontend.faults import SERVE_FAULTS

    listed = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "serve", "--bug", "list"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0
    rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()}
    assert rows == {f.name: f.clause for f in SERVE_FAULTS.values()}
    bad = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "serve", "--bug", "no-such-fault"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no-such-fault" in bad.stderr
