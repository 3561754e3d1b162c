"""SIGTERM/SIGINT/SIGHUP in the harness (ecp.conformance.interrupts): the sections an interrupt does not
cut, and the commands (explorer, conformance runs) that stop their peers when signalled.

In-process, each signal is sent to this process with os.kill; CPython runs the handler in the main
thread at its next bytecode boundary, so the bounded loops below give it a place to run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from ecp.conformance import launch as launch_mod
from ecp.conformance.engine.session import EngineRunConfig, EngineUnderTest
from ecp.conformance.interrupts import SIGNALS, Interrupted, deferred, interruptible
from ecp.conformance.launch import CommandPeer
from ecp.conformance.transcript import Transcript

SPIN = 200_000  # bytecode boundaries enough for a pending handler to run (it runs at the first)


def _spin() -> int:
    n = 0
    for _ in range(SPIN):
        n += 1
    return n


def test_an_interrupt_outside_a_section_is_raised_at_once():
    reached = []
    with interruptible():
        with pytest.raises(Interrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            _spin()
            reached.append(True)
    assert info.value.args == ("SIGTERM",)
    assert not reached


def test_an_interrupt_inside_a_section_is_raised_when_it_ends():
    done = []
    with interruptible():
        with pytest.raises(Interrupted) as info:
            with deferred():
                with deferred():
                    os.kill(os.getpid(), signal.SIGINT)
                    _spin()
                    done.append("inner")
                _spin()
                done.append("outer")    # nested: only the outermost end raises
            done.append("after")
    assert info.value.args == ("SIGINT",)
    assert done == ["inner", "outer"]


def test_the_interrupt_replaces_what_the_section_raised_and_keeps_it_as_context():
    with interruptible():
        with pytest.raises(Interrupted) as info:
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                _spin()
                raise ValueError("the launch failed")
    assert isinstance(info.value.__context__, ValueError)


def test_later_signals_are_ignored_and_the_handlers_come_back():
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    with interruptible():
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
            _spin()
        os.kill(os.getpid(), signal.SIGINT)   # ignored: the cleanup after the first is not cut
        assert _spin() == SPIN
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_section_in_another_thread_defers_nothing():
    entered, release = threading.Event(), threading.Event()

    def worker():
        with deferred():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert entered.wait(10)
        with interruptible():
            with pytest.raises(Interrupted):   # raised here at once, not held by the worker's section
                os.kill(os.getpid(), signal.SIGTERM)
                _spin()
    finally:
        release.set()
        t.join(10)


def _signal_self_after_spawn(monkeypatch, spawned: list[subprocess.Popen]) -> None:
    """Popen that, once the child runs, sends SIGTERM to this process and gives the handler a
    place to run before it returns: the interrupt arrives between the spawn and its handle."""
    real = subprocess.Popen

    def popen(*args, **kwargs):
        proc = real(*args, **kwargs)
        spawned.append(proc)
        os.kill(os.getpid(), signal.SIGTERM)
        _spin()
        return proc

    monkeypatch.setattr(launch_mod.subprocess, "Popen", popen)


def test_an_interrupt_during_a_launch_stops_the_started_peer(tmp_path, monkeypatch):
    spawned: list[subprocess.Popen] = []
    _signal_self_after_spawn(monkeypatch, spawned)
    cfg = EngineRunConfig(command=[sys.executable, "-c", "import time; time.sleep(60)"], workdir=str(tmp_path),
                          startup_timeout_s=30)
    ctx = zmq.Context()
    try:
        with interruptible():
            with pytest.raises(Interrupted):
                EngineUnderTest(cfg, ctx, Transcript(), 1, clients=1, engine_count=1)
        assert len(spawned) == 1
        assert spawned[0].poll() is not None, "the peer started before the interrupt was left running"
    finally:
        for proc in spawned:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        ctx.term()


def test_an_interrupt_during_a_stop_is_raised_once_the_peer_is_reaped(tmp_path, monkeypatch):
    peer = CommandPeer([sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "peer.log")
    real_signal = peer._signal

    def signal_then_interrupt(sig):
        real_signal(sig)
        os.kill(os.getpid(), signal.SIGTERM)   # the interrupt arrives between the peer's signal and its wait
        _spin()

    monkeypatch.setattr(peer, "_signal", signal_then_interrupt)
    try:
        with interruptible():
            with pytest.raises(Interrupted):
                peer.stop(grace_s=5)
        assert peer.proc.returncode is not None, "the stop was cut before it reaped the peer"
        assert peer._log.closed
    finally:
        if peer.proc.poll() is None:
            peer.proc.kill()
            peer.proc.wait(10)


# ------------------------------------------------------------------ the commands, signalled
ENGINE = [sys.executable, "-m", "ecp.reference.engine", "--handshake-address", "{handshake_address}",
          "--engine-count", "{engine_count}", "--in-process"]
SERVE = [sys.executable, "-m", "ecp.spec.cli", "serve", "--data-parallel-size-local", "0",
         "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "{handshake_port}",
         "--data-parallel-size", "{engine_count}", "--port", "{http_port}"]
CLI = [sys.executable, "-m", "ecp.spec.cli"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _signal_once_a_peer_runs(argv: list[str], signum: int) -> tuple[int, str, list[int]]:
    """Start ``argv``, send ``signum`` as soon as it has started a process, wait for it to exit:
    its exit code, its output and the processes it had started."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        peers: list[int] = []
        while not peers and time.monotonic() < deadline and proc.poll() is None:
            peers = _children(proc.pid)
            time.sleep(0.1)  # polling /proc: there is no event for a process appearing
        assert peers, "no peer was launched"
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, peers


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (an exited process its new parent has not reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _still_running(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The processes of ``pids`` still running ``within_s`` from now; killed here, so that a failing
    test leaves none. (A SIGKILLed process dies once the scheduler runs it: on a loaded machine,
    some milliseconds after the harness sent the signal.)"""
    deadline = time.monotonic() + within_s
    left = [pid for pid in pids if _running(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)  # polling /proc: a process that is not our child signals nothing we can wait on
        left = [pid for pid in left if _running(pid)]
    for pid in left:
        try:
            os.killpg(pid, signal.SIGKILL)  # (the harness starts each peer as its own group)
        except OSError:
            pass
    return left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_explorer_s_peer_and_keeps_the_report(tmp_path, signum):
    code, out, peers = _signal_once_a_peer_runs(
        [*CLI, "conformance", "explore", "engine", "--budget", "60s", "--out", str(tmp_path), "--", *ENGINE,
         "--step-time-ms", "5"], signum)
    assert f"interrupted by {signal.Signals(signum).name}" in out, out
    assert code in (0, 1)
    assert not _still_running(peers)


@pytest.mark.parametrize("role, signum", [("engine", signal.SIGTERM), ("engine", signal.SIGINT),
                                          ("engine", signal.SIGHUP), ("frontend", signal.SIGTERM)])
def test_a_signal_ends_a_conformance_run_and_stops_its_peer(role, signum):
    """A cancelled CI job (SIGTERM), Ctrl-C (SIGINT) or a closed terminal (SIGHUP) must not leave
    the peer under test running: before, SIGTERM and SIGHUP killed the harness at once and left the
    engine behind."""
    code, out, peers = _signal_once_a_peer_runs(
        [*CLI, "conformance", role, "--", *(ENGINE if role == "engine" else SERVE)], signum)
    name = signal.Signals(signum).name
    assert f"ecp conformance: interrupted by {name} after" in out, out
    assert code == 128 + signum
    assert not _still_running(peers)


def test_a_signal_outside_pytest_s_own_catch_still_ends_the_run_cleanly(monkeypatch, capsys):
    """A signal at pytest's start or end reaches the runner as the exception itself: the run ends
    with the same message and exit code as one interrupted during a case."""
    import pytest as pytest_module

    from ecp.spec.cli import main

    def main_then_signalled(args, plugins=()):
        os.kill(os.getpid(), signal.SIGTERM)
        _spin()
        raise AssertionError("the signal did not interrupt")

    monkeypatch.setattr(pytest_module, "main", main_then_signalled)
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        code = main(["conformance", "engine", "--case", "ENG-HS-1", "--", *ENGINE])
        # interrupted, the command ignores further signals on its way out
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in SIGNALS), [signal.getsignal(s) for s in SIGNALS]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert code == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM after 0 of 1 case(s)" in capsys.readouterr().err


def test_an_interrupted_frontend_role_coroutine_finishes_its_cleanup_first():
    """The frontend role runs its cases on a loop thread: an interrupt reaching the main thread
    while it waits there cancels the coroutine and waits for its cleanup (closing what it launched)
    before going on; before, teardown could find sockets still open and hang in zmq's term()."""
    import asyncio

    from ecp.conformance.frontend.session import LoopThread

    loop = LoopThread()
    cleaned = threading.Event()

    async def case():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.Event().wait()  # the case's work, which the interrupt ends
        finally:
            await asyncio.sleep(0.2)     # a cleanup that takes a while, as stopping a frontend does
            cleaned.set()

    try:
        with interruptible():
            with pytest.raises(Interrupted):
                loop.run(case(), lambda: time.monotonic() + 60, "the case")
        assert cleaned.is_set(), "the interrupt went on before the coroutine's cleanup"
    finally:
        loop.close()


# ------------------------------------------------------------------ every process a peer started
ESCAPES = ("import os, subprocess, sys, time\n"
           "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
           "print(child.pid, flush=True)\n"
           "time.sleep(60)\n")


def _read_pid(log: Path, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        lines = [ln for ln in text.splitlines()[1:] if ln.strip().isdigit()]  # (line 1: the command)
        if lines:
            return int(lines[0])
        time.sleep(0.05)  # polling the peer's log: it says nothing else
    raise AssertionError(f"the peer printed no pid: {log.read_text()!r}")


def test_a_peer_s_child_in_a_session_of_its_own_is_stopped_with_it(tmp_path):
    """killpg reaches the peer's group only; a process it moved to a session of its own (as a
    supervisor may) is found among its descendants and stopped too, even once orphaned."""
    peer = CommandPeer([sys.executable, "-c", ESCAPES], {}, tmp_path / "peer.log")
    child = None
    try:
        child = _read_pid(tmp_path / "peer.log")
        assert os.getpgid(child) != peer.proc.pid   # outside the group the harness created
        peer.note_family()
        peer.proc.kill()                            # the peer dies first: its child is orphaned
        peer.proc.wait(10)
        peer.stop(grace_s=1)
        assert _still_running([child]) == [], "the peer's child outlived its stop"
    finally:
        if peer.proc.poll() is None:
            peer.proc.kill()
            peer.proc.wait(10)
        if child is not None:
            _still_running([child])


#: a peer that keeps starting processes in sessions of their own, each pid on a line of its log
SPAWNS = ("import os, sys, time\n"
          "for _ in range(40):\n"
          "    pid = os.fork()\n"
          "    if pid == 0:\n"
          "        os.setsid(); time.sleep(60); os._exit(0)\n"
          "    print(pid, flush=True)\n"
          "    time.sleep(0.002)\n"
          "time.sleep(60)\n")


def test_a_peer_still_starting_processes_leaves_none_behind(tmp_path):
    """A kill while the peer is starting processes (a supervisor spawning its workers): the one it
    starts between the scan of its descendants and the SIGKILL must die too, so the harness freezes
    the peer's processes before it looks."""
    log = tmp_path / "peer.log"
    peer = CommandPeer([sys.executable, "-c", SPAWNS], {}, log)
    children: list[int] = []
    try:
        _read_pid(log)              # it has started spawning
        peer.kill_now()
        assert peer.wait(10) is not None
    finally:
        if peer.proc.poll() is None:
            peer.proc.kill()
            peer.proc.wait(10)
        children = [int(ln) for ln in log.read_text().splitlines()[1:] if ln.strip().isdigit()]
        left = _still_running(children)
    assert children and left == [], f"{len(left)} of the {len(children)} processes it started outlived it"


LAST_RESORT = """
import os, signal, sys, time
from ecp.conformance import interrupts
from ecp.conformance.launch import CommandPeer
interrupts.LAST_RESORT_S = 0.5
peer = CommandPeer([sys.executable, "-c", {escapes!r}], {{}}, {log!r})
with interrupts.interruptible():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    except interrupts.Interrupted:
        with interrupts.deferred():
            time.sleep(60)   # a cleanup that never ends
"""


def test_a_cleanup_that_never_ends_meets_the_last_resort(tmp_path):
    """Whatever holds the harness after the first signal, it exits by LAST_RESORT_S with 128+N and
    every peer it started, and their children, killed."""
    log = tmp_path / "peer.log"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", LAST_RESORT.format(escapes=ESCAPES, log=str(log))],
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert "still stopping 0.5 s after SIGTERM" in proc.stderr
    assert took < 30, took
    child = _read_pid(log, timeout=1)
    assert _still_running([child]) == [], "the peer's child outlived the last resort"
