"""Fixtures for engine tests: a raw-frame frontend plus engines it owns, always torn down."""

from __future__ import annotations

import tempfile

import pytest

from engine_rawfront import RawFrontend

from ecp.reference.engine import launch


class Rig:
    """A frontend and the engines started against it."""

    def __init__(self) -> None:
        self.frontends: list[RawFrontend] = []
        self.handles = []
        self._tmp = tempfile.TemporaryDirectory(prefix="ecp-eng-")

    def start(self, engine_count: int = 1, engine_start_index: int = 0, *, transport: str = "ipc",
              num_clients: int = 1, coordinator: bool = False, mode: str = "thread", handshake: bool = True,
              **options):
        import os

        d = tempfile.mkdtemp(dir=self._tmp.name)
        fe = RawFrontend(d, transport=transport, num_clients=num_clients, coordinator=coordinator,
                         vllm=options.get("vllm", "0.33"))
        self.frontends.append(fe)
        options.setdefault("max_model_len", 512)
        options.setdefault("num_gpu_blocks", 512)
        options.setdefault("handshake_timeout_s", 20.0)
        handle = launch(fe.handshake_address, engine_count, engine_start_index, mode=mode, **options)
        self.handles.append(handle)
        if handshake:
            fe.handshake(list(range(engine_start_index, engine_start_index + engine_count)))
        assert os.path.isdir(d)
        return fe, handle

    def close(self) -> None:
        for h in self.handles:
            h.stop(timeout=10)
        for fe in self.frontends:
            fe.close()
        self._tmp.cleanup()


@pytest.fixture
def rig():
    r = Rig()
    try:
        yield r
    finally:
        r.close()
