"""Helpers for HTTP tests: an in-process ``ecp serve`` app on an ephemeral port."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx

from ecp.reference.frontend.app import ServeApp
from ecp.reference.frontend.server import start_http
from ecp.reference.frontend.serving import Frontend, FrontendConfig
from ecp.reference.tokenizer import ByteTokenizer


def run(fn: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """Run an async test body with a hard bound."""
    return asyncio.run(asyncio.wait_for(fn(), timeout))


@contextlib.asynccontextmanager
async def served(client: Any, *, dev_mode: bool = False, kv_connector: str | None = None,
                 bugs: tuple[str, ...] = (), model: str = "ecp-synthetic",
                 max_model_len: int | None = None) -> AsyncIterator[tuple[httpx.AsyncClient, Frontend]]:
    cfg = FrontendConfig(model_name=model, max_model_len=max_model_len or client.max_model_len,
                         kv_connector=kv_connector, bugs=frozenset(bugs), dev_mode=dev_mode)
    frontend = Frontend(client, ByteTokenizer(), cfg)
    http = await start_http(ServeApp(frontend).build())
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=20) as h:
            yield h, frontend
    finally:
        await http.stop()


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
