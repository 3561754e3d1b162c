"""Helpers for HTTP tests: an in-process ``ecp serve`` app on an ephemeral port."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx

from ecp.reference.frontend.app import ServeApp
from ecp.reference.frontend.http_server import start_http
from ecp.reference.frontend.serving import Frontend, FrontendConfig
from ecp.reference.tokenizer import ByteTokenizer


def run(fn: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """Run an async test body with a hard bound."""
    return asyncio.run(asyncio.wait_for(fn(), timeout))


@contextlib.asynccontextmanager
async def served(client: Any, *, dev_mode: bool = False, kv_connector: str | None = None,
                 bugs: tuple[str, ...] = (), model: str = "ecp-synthetic",
                 max_model_len: int | None = None, trust_kv_params: bool = True,
                 kv_params_trust_header: str | None = None, limits: Any = None,
                 http: str = "auto") -> AsyncIterator[tuple[httpx.AsyncClient, Frontend]]:
    """``trust_kv_params``: as ``ecp serve --trust-request-kv-params`` (on here: most tests send
    kv_transfer_params as the trusted proxy of a P/D deployment would; ECP-SEC-5's tests turn it off)."""
    cfg = FrontendConfig(model_name=model, max_model_len=max_model_len or client.max_model_len,
                         kv_connector=kv_connector, bugs=frozenset(bugs), dev_mode=dev_mode,
                         trust_request_kv_params=trust_kv_params, kv_params_trust_header=kv_params_trust_header)
    frontend = Frontend(client, ByteTokenizer(), cfg)
    server = await start_http(ServeApp(frontend).build(), limits=limits, http=http)
    try:
        pool = httpx.Limits(max_connections=512, max_keepalive_connections=512)
        async with httpx.AsyncClient(base_url=server.url, timeout=20, limits=pool) as h:
            yield h, frontend
    finally:
        await server.stop()


def sse_events(text: str) -> list[Any]:
    """``data:`` payloads of an SSE body, JSON-decoded (``[DONE]`` kept as a string)."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def wait_until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait for ``pred`` by yielding to the loop between checks, bounded."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Deployment:
    """A real client, real reference engines (thread mode) and the HTTP app."""

    def __init__(self, http: httpx.AsyncClient, frontend: Frontend, client: Any, handles: list[Any]) -> None:
        self.http = http
        self.frontend = frontend
        self.client = client
        self.handles = handles

    async def engine_states(self) -> dict[int, dict[str, Any]]:
        return await self.client.call_utility("get_engine_state")

    async def wait_engines_idle(self, timeout: float = 15.0) -> dict[int, dict[str, Any]]:
        """Until every engine reports nothing running or waiting (engine stats back to zero)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            states = await self.engine_states()
            if all(s["num_running"] == 0 and s["num_waiting"] == 0 for s in states.values()):
                return states
            if loop.time() > deadline:
                raise AssertionError(f"engines still busy: {states}")
            await asyncio.sleep(0.02)  # between utility round trips, not a synchronisation point


@contextlib.asynccontextmanager
async def deployment(engine_count: int = 2, *, per_rank: dict[int, dict[str, Any]] | None = None,
                     kv_connector: str | None = None, bugs: tuple[str, ...] = (), dev_mode: bool = False,
                     **engine_options: Any) -> AsyncIterator[Deployment]:
    """``engine_count`` reference engines (``per_rank`` adds options for single ranks)."""
    import tempfile

    from ecp.reference.client import ClientConfig, EngineCoreClient
    from ecp.reference.engine import launch
    from ecp.reference.frontend.launch import client_bugs

    engine_options = {"max_model_len": 2048, "num_gpu_blocks": 2048, "handshake_timeout_s": 20.0,
                      "log_level": "WARNING", "kv_connector": kv_connector, **engine_options}
    with tempfile.TemporaryDirectory(prefix="ecp-fe-") as tmp:
        client = EngineCoreClient(ClientConfig(
            engine_count=engine_count, handshake_address=f"ipc://{tmp}/hs", handshake_timeout_s=20,
            ready_timeout_s=20, kv_connector=kv_connector, bugs=client_bugs(bugs)))
        await client.bind()
        handles: list[Any] = []
        try:
            per_rank = per_rank or {}
            for rank in range(engine_count):
                handles.append(launch(client.handshake_address, 1, rank, mode="thread",
                                      data_parallel_size=engine_count,
                                      **{**engine_options, **per_rank.get(rank, {})}))
            await client.wait_ready()
            async with served(client, kv_connector=kv_connector, bugs=bugs, dev_mode=dev_mode) as (h, fe):
                yield Deployment(h, fe, client, handles)
        finally:
            await client.shutdown()
            for handle in handles:
                await asyncio.to_thread(handle.stop, 5.0)
