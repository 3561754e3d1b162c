"""SIGTERM/SIGINT as Interrupted, and the sections it does not cut (ecp.conformance.interrupts).

Each signal is sent to this process with os.kill; CPython runs the handler in the main thread at
its next bytecode boundary, so the bounded loops below give it a place to run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
import zmq

from ecp.conformance import launch as launch_mod
from ecp.conformance.engine.session import EngineRunConfig, EngineUnderTest
from ecp.conformance.interrupts import Interrupted, deferred, interruptible
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
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
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
