"""Drives the frontend under test over HTTP: OpenAI completions and chat
(streaming or not), the vLLM dev endpoints, the abort endpoints, health.

Plain requests go through httpx. Streams are :class:`~.sse.SseStream` objects
(one asyncio connection each) opened up to the response headers; a case reads
events from them, or *drops* them (closes the connection without reading on,
which is what a departing client does) to trigger the frontend's auto-abort.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

import httpx

from ..outcomes import CaseTimeout, CaseFailure
from .sse import HttpLog, SseStream, body_head

def _connection_violation(method: str, path: str, exc: BaseException) -> CaseFailure:
    """What the frontend did, not a harness fault: it broke the connection without a status line,
    or wrote bytes h11 cannot parse as an HTTP response."""
    if isinstance(exc, httpx.RemoteProtocolError) and "disconnected" not in str(exc):
        what = "answered with bytes that are not a valid HTTP response"
    else:
        what = "closed the connection without an HTTP response"
    return CaseFailure(f"{method} {path}: the frontend {what} ({type(exc).__name__}: {exc!s:.200})")


def _json(body: Any) -> str:
    try:
        return json.dumps(body)
    except (TypeError, ValueError):
        return repr(body)


@dataclass
class Reply:
    """A non-streaming HTTP reply."""

    status_code: int
    body: Any
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300


class HttpDriver:
    """An httpx client bound to the frontend's base URL."""

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url
        self.timeout = timeout
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.model: str = "default"
        self.client = httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(timeout))
        #: awaited when a connection breaks without a response, before that is called a violation:
        #: raises ``PeerCrashed`` when the frontend's process is exiting (its sockets close first)
        self.on_connection_lost: Callable[[str], Awaitable[None]] | None = None
        #: every HTTP exchange, one line each way, into the case's transcript
        self.log: HttpLog | None = None
        #: ``"METHOD /path"`` of every route a case drove (the launch and the capability probe excepted):
        #: each must be governed by a clause the case cites (``ecp.spec.http``)
        self.routes_used: set[str] = set()
        #: off while the harness itself drives the frontend (launch, capability probe)
        self.attributing = True
        self._last_health: int | None | str = "unknown"


    def set_timeout(self, timeout: float) -> None:
        """How long each later request waits for its answer (the case budget grew or shrank)."""
        self.timeout = timeout
        self.client.timeout = httpx.Timeout(timeout)
    def _note(self, direction: str, text: str) -> None:
        if self.log is not None:
            self.log(direction, text)

    def _use(self, method: str, path: str) -> None:
        if self.attributing:
            self.routes_used.add(f"{method.upper()} {path.split('?', 1)[0]}")

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- plain requests ------------------------------------------------------------
    async def request(self, method: str, path: str, *, json_body: Any = None,
                      params: Any = None, headers: dict[str, str] | None = None) -> Reply:
        self._use(method, path)
        query = str(httpx.QueryParams(params)) if params else ""
        target = f"{method} {path}" + (f"?{query}" if query else "")
        shown = "".join(f" {k}: {v};" for k, v in (headers or {}).items())
        self._note("sent", f"{target}{shown}" + ("" if json_body is None else f" {body_head(_json(json_body))}"))
        try:
            response = await self.client.request(method, path, json=json_body, params=params, headers=headers)
        except httpx.TimeoutException:
            self._note("recv", f"{target}: no HTTP response within {self.timeout:g} s")
            raise CaseTimeout(f"{method} {path}: no HTTP response within {self.timeout:g}s") from None
        except (httpx.TransportError, OSError) as exc:
            self._note("recv", f"{target}: no HTTP response ({type(exc).__name__}: {exc!s:.200})")
            if self.on_connection_lost is not None:
                await self.on_connection_lost(f"{method} {path}: {type(exc).__name__}: {exc!s:.200}")
            raise _connection_violation(method, path, exc) from None
        text = response.text
        self._note("recv", f"HTTP {response.status_code} {target}" + (f": {body_head(text)}" if text else ""))
        try:
            body = response.json() if text else None
        except ValueError:
            body = None
        return Reply(response.status_code, body, text)

    async def health(self) -> int | None:
        """``GET /health`` status, or ``None`` when the server does not answer. The transcript
        shows the polls whose answer changed (waits poll it every ``POLL_S``)."""
        self._use("GET", "/health")
        try:
            status: int | None = (await self.client.get("/health", timeout=2.0)).status_code
        except (httpx.HTTPError, OSError):
            status = None
        if status != self._last_health:
            self._note("recv", "GET /health: " + (f"HTTP {status}" if status is not None else "no answer")
                       + ("" if self._last_health == "unknown" else f" (was {self._last_health or 'no answer'})"))
            self._last_health = status
        return status

    async def models(self) -> list[str]:
        reply = await self.request("GET", "/v1/models")
        if not reply.ok or not isinstance(reply.body, dict):
            return []
        return [m.get("id") for m in reply.body.get("data") or [] if isinstance(m, dict)]

    # -- OpenAI --------------------------------------------------------------------
    def completion_body(self, prompt: str, max_tokens: int, *, stream: bool, **extra: Any) -> dict[str, Any]:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "stream": stream,
                "temperature": 0.0}
        body.update(extra)
        return body

    def chat_body(self, content: str, max_tokens: int, *, stream: bool, **extra: Any) -> dict[str, Any]:
        body = {"model": self.model, "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "stream": stream, "temperature": 0.0}
        body.update(extra)
        return body

    async def complete(self, prompt: str, max_tokens: int, headers: dict[str, str] | None = None,
                       **extra: Any) -> Reply:
        """A non-streaming ``/v1/completions`` call."""
        return await self.request("POST", "/v1/completions", headers=headers,
                                  json_body=self.completion_body(prompt, max_tokens, stream=False, **extra))

    async def chat(self, content: str, max_tokens: int, headers: dict[str, str] | None = None,
                   **extra: Any) -> Reply:
        return await self.request("POST", "/v1/chat/completions", headers=headers,
                                  json_body=self.chat_body(content, max_tokens, stream=False, **extra))

    async def open_stream(self, path: str, body: dict[str, Any],
                          headers: dict[str, str] | None = None) -> SseStream:
        """POST with ``stream: true`` and return once the response headers arrived."""
        self._use("POST", path)
        return await SseStream.open(self.host, self.port, path, body, headers, self.timeout, self.log)

    async def stream_completion(self, prompt: str, max_tokens: int,
                                headers: dict[str, str] | None = None, **extra: Any) -> SseStream:
        return await self.open_stream("/v1/completions",
                                      self.completion_body(prompt, max_tokens, stream=True, **extra), headers)

    async def stream_chat(self, content: str, max_tokens: int,
                          headers: dict[str, str] | None = None, **extra: Any) -> SseStream:
        return await self.open_stream("/v1/chat/completions",
                                      self.chat_body(content, max_tokens, stream=True, **extra), headers)


@dataclass(frozen=True)
class AbortApi:
    """One shape of explicit-abort endpoint (vLLM 0.33.0: ``vllm/entrypoints/rl/online/api_router.py``,
    ``vllm/entrypoints/scale_out/token_in_token_out/api_router.py``).

    ``ids_key`` carries the ids (external ids, ``ECP-HTTP-6``); abort-all is
    ``all_body`` (``ECP-HTTP-7``: vLLM and vllm-rs: an empty id list, vLLM 0.33's
    only form; FastDeploy: the explicit ``abort_all``).
    """

    path: str
    ids_key: str
    all_body: tuple[tuple[str, Any], ...]

    def ids_body(self, ids: list[str]) -> dict[str, Any]:
        return {self.ids_key: list(ids)}


#: Tried in order by the capability probe.
ABORT_APIS = (
    AbortApi("/abort_requests", "request_ids", (("request_ids", []),)),
    AbortApi("/v1/abort_requests", "req_ids", (("abort_all", True),)),
)


async def abort_by_ids(driver: HttpDriver, api: AbortApi, ids: list[str], *,
                       new_connection: bool = False) -> Reply:
    """``new_connection``: on a connection of its own, closed after the answer (with several API server
    processes on one port, each connection goes to whichever process accepts it)."""
    return await driver.request("POST", api.path, json_body=api.ids_body(ids),
                                headers={"Connection": "close"} if new_connection else None)


async def abort_all(driver: HttpDriver, api: AbortApi, *, new_connection: bool = False) -> Reply:
    """``new_connection``: as for :func:`abort_by_ids`."""
    return await driver.request("POST", api.path, json_body=dict(api.all_body),
                                headers={"Connection": "close"} if new_connection else None)
