"""Startup failures, --local, and the fatal path (ENGINE_CORE_DEAD)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import zmq

from engine_rawfront import make_request

from ecp.reference.engine import launch


def test_local_engine_says_so(rig):
    fe, _ = rig.start(1, local=True)
    assert (fe.hellos[0].local, fe.hellos[0].headless) == (True, False)
    assert (fe.readies[0].local, fe.readies[0].headless) == (True, False)


def test_unexpected_executor_failure_sends_engine_core_dead(rig):
    fe, handle = rig.start(1)

    def broken(batch):
        raise RuntimeError("device lost")

    handle.servers[0].core.executor.execute = broken
    fe.add(0, make_request("x", max_tokens=2))
    assert fe.pump(lambda: fe.dead())
    assert handle.wait(5) == [1]


def _router(tmp_path, name):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{tmp_path}/{name}"
    sock.bind(address)
    return ctx, sock, address


def test_no_init_times_out_and_exits_one(tmp_path):
    ctx, sock, address = _router(tmp_path, "hs")
    handle = launch(address, handshake_timeout_s=0.3)
    try:
        assert sock.poll(5000)  # the HELLO arrives; nobody answers it
        assert handle.wait(10) == [1]
    finally:
        handle.stop()
        ctx.destroy(linger=0)


def test_malformed_init_exits_one(tmp_path):
    ctx, sock, address = _router(tmp_path, "hs")
    handle = launch(address)
    try:
        assert sock.poll(5000)
        ident, _hello = sock.recv_multipart()
        sock.send_multipart([ident, b"\x82\xa1a\x01\xa1b\x02"])  # a map without addresses
        assert handle.wait(10) == [1]
    finally:
        handle.stop()
        ctx.destroy(linger=0)


def test_invalid_handshake_address_exits_one_instead_of_hanging():
    """zmq rejects the address in connect(); the engine must report it and exit, not block in ctx.term()."""
    handle = launch("not-an-endpoint")


def test_unusable_handshake_address_exits_one_without_hanging():
    # connect() fails before any message: the socket must still be closed, or Context.term() hangs
    handle = launch("tcp://no-port-here")
    try:
        assert handle.wait(10) == [1]
    finally:
        handle.stop()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("engine_count", [1, 2])
def test_local_engine_exits_when_its_parent_is_killed(tmp_path, engine_count):
    """`ecp serve` SIGKILLed (OOM) must not leave its embedded engines running forever."""
    parent_src = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'ecp.reference.engine', '--local', '--handshake-address',\n"
        f"                     'ipc://{tmp_path}/hs', '--engine-count', '{engine_count}'])\n"
        "print(p.pid, flush=True)\n"
        "p.wait()\n")
    ctx, sock, _ = _router(tmp_path, "hs")
    # its own process group, so that teardown can reap whatever a failing run left behind
    parent = subprocess.Popen([sys.executable, "-c", parent_src], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    engine_pid = int(parent.stdout.readline())
    try:
        assert sock.poll(20000)  # a HELLO: the engine runs (and watches its parent) before the parent dies
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 15
        while not _gone(engine_pid):
            assert time.monotonic() < deadline, "the orphaned engine kept running"
            time.sleep(0.1)  # polling a foreign process's state; there is nothing to wait on
    finally:
        ctx.destroy(linger=0)
        try:
            os.killpg(parent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.torch
def test_executor_that_cannot_load_exits_one(tmp_path):
    from ecp.spec import EngineHandshakeMetadata, EngineZmqAddresses, encode_handshake

    ctx, sock, address = _router(tmp_path, "hs")
    handle = launch(address, executor="torch", device="cpu", model=str(tmp_path / "no-model-here"))
    try:
        assert sock.poll(5000)
        ident, _hello = sock.recv_multipart()
        init = EngineHandshakeMetadata(EngineZmqAddresses([f"ipc://{tmp_path}/in"], [f"ipc://{tmp_path}/out"],
                                                          None, None, None), {})
        sock.send_multipart([ident, encode_handshake(init)])
        assert handle.wait(30) == [1]  # a clear startup failure, not an uncaught exception
    finally:
        handle.stop()
        ctx.destroy(linger=0)


def test_cli_refuses_a_handshake_address_that_is_not_tcp_or_ipc():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "engine", "--handshake-address", "localhost:5555"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--handshake-address must be tcp://HOST:PORT or ipc:///PATH" in proc.stderr


def test_cli_without_torch_refuses_the_torch_executor_at_once():
    import subprocess
    import sys

    # sys.modules["torch"] = None makes torch unimportable, as in an install without the gpu extra
    code = ("import sys; sys.modules['torch'] = None; from ecp.spec.cli import main; "
            "sys.exit(main(['engine', '--handshake-address', 'ipc:///nonexistent/hs', '--executor', 'torch']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'engine-core-protocol[gpu]'" in proc.stderr


def test_help_explains_every_flag_with_its_default_and_the_exit_codes(capsys):
    import pytest

    from ecp.spec.cli import main

    with pytest.raises(SystemExit) as info:
        main(["engine", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Exit codes: 0 after a graceful stop" in text
    for flag, default in [("--max-model-len", "4096"), ("--block-size", "16"), ("--max-num-seqs", "256"),
                          ("--handshake-timeout-s", "300.0"), ("--kv-lease-s", "480.0")]:
        assert f"(default: {default})" in text.split(flag, 2)[2].split(" --", 1)[0], flag
