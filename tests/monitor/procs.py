"""Processes for the end-to-end monitor tests: `ecp serve` (frontend only) -> `ecp monitor` ->
`ecp engine`, each started here, read line by line with bounded waits, and stopped."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from ecp.conformance.frontend.launcher import free_port


class Proc:
    def __init__(self, *args: str, log: Path) -> None:
        self.log = log
        self._log = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "ecp.spec.cli", *args], stdout=self._log,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            self._log.write(line)
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match:
        pat = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {timeout}s; got {self.seen[-20:]}") from None
            self.seen.append(line)
            m = pat.search(line)
            if m:
                return m

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def close(self) -> None:
        self.stop()
        self._pumper.join(5)  # stderr ends with the process
        self.proc.stderr.close()
        self._log.close()


class Deployment:
    """serve (2 external engines, tcp) <- monitor <- 2 engine ranks in one `ecp engine` process."""

    def __init__(self, workdir: Path, *, serve_args: tuple[str, ...] = (), engine_args: tuple[str, ...] = (),
                 monitor_args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []
        self.report = workdir / "report.json"
        self.capture = workdir / "capture.txt"
        self.transcripts = workdir / "transcripts"
        rpc = free_port()
        try:
            self.serve = self._start("serve", "--data-parallel-size-local", "0", "--data-parallel-size", "2",
                                     "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc),
                                     "--port", "0", "--dev-mode", *serve_args)
            self.serve.wait_for("waiting for 2 engine")
            self.monitor = self._start("monitor", "--listen", "tcp://127.0.0.1:*", "--frontend",
                                       f"tcp://127.0.0.1:{rpc}", "--record", str(self.capture), "--report-json",
                                       str(self.report), "--report-md", str(workdir / "report.md"),
                                       "--events", str(workdir / "events.jsonl"), "--transcripts",
                                       str(self.transcripts), "--console-interval", "0", *monitor_args)
            listen = self.monitor.wait_for(r"listening on (\S+)").group(1)
            self.engines = self._start("engine", "--handshake-address", listen, "--engine-count", "2",
                                       "--data-parallel-size", "2", *engine_args)
            self.url = self.serve.wait_for(r"serving .* on (http://\S+)").group(1)
            self.http = httpx.Client(base_url=self.url, timeout=30)
        except BaseException:
            self.close()
            raise

    def _start(self, *args: str) -> Proc:
        p = Proc(*args, log=self.workdir / f"{args[0]}.log")
        self.procs.append(p)
        return p

    def wait_idle(self, timeout: float = 20.0) -> None:
        """Until the frontend has no engine request in flight (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.http.get("/load").json()["server_load"] == 0:
                return
            time.sleep(0.05)
        raise AssertionError("requests still in flight")

    def wait_violations(self, n: int, timeout: float = 20.0) -> None:
        """Until the monitor's event log holds ``n`` violations (bounded): what the frontend saw
        first may still be on its way through the monitor from another engine."""
        log = self.workdir / "events.jsonl"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = log.read_text() if log.exists() else ""
            if sum(json.loads(line)["event"] == "violation" for line in text.splitlines() if line.strip()) >= n:
                return
            time.sleep(0.05)
        raise AssertionError(f"the monitor did not log {n} violations within {timeout} s")

    def stop_monitor(self) -> tuple[int, dict]:
        code = self.monitor.stop()
        return code, json.loads(self.report.read_text())

    def close(self) -> None:
        if getattr(self, "http", None) is not None:
            self.http.close()
        for p in reversed(self.procs):
            p.close()


def replay(capture: Path, report: Path) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "monitor", "--replay", str(capture),
                        "--report-json", str(report), "--quiet"], capture_output=True, text=True, timeout=60,
                       env={**os.environ})
    return r.returncode, json.loads(report.read_text())
