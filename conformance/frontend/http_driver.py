"""Drives the frontend under test over HTTP (httpx): OpenAI completions and
chat (streaming or not), the vLLM dev endpoints, the abort endpoints, health.

Streams are :class:`SseStream` objects opened up to the response headers; a
case reads events from them, or *drops* them (closes the connection without
reading on, which is what a departing client does) to trigger the frontend's
auto-abort.
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field
from typing import Any

import httpx

DONE = "[DONE]"


@dataclass
class StreamEnd:
    """How a stream ended.

    Attributes:
        events: every JSON event received (``data: {...}``).
        done: ``data: [DONE]`` was received.
        transport_error: the connection failed or was cut before ``[DONE]``.
        timed_out: nothing ended it within the time allowed.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    transport_error: str | None = None
    timed_out: bool = False

    @property
    def finish_reasons(self) -> list[str]:
        return [c.get("finish_reason") for e in self.events for c in e.get("choices") or []
                if c.get("finish_reason")]

    @property
    def error_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if "error" in e]

    @property
    def ended_with_error(self) -> bool:
        """An error event, or a stream cut without ``[DONE]``: what a dead engine must cause."""
        return bool(self.error_events) or "error" in self.finish_reasons or (
            not self.done and not self.timed_out)


class SseStream:
    """One open streaming response (server-sent events)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.status_code = response.status_code
        self.events: list[dict[str, Any]] = []
        self.done = False
        self.closed = False
        self._lines = response.aiter_lines()

    @property
    def response_id(self) -> str | None:
        for event in self.events:
            if isinstance(event.get("id"), str):
                return event["id"]
        return None

    async def next_event(self, timeout: float) -> dict[str, Any] | str | None:
        """The next JSON event, ``"[DONE]"``, or ``None`` at the end of the body."""
        async def read() -> dict[str, Any] | str | None:
            async for line in self._lines:
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == DONE:
                    self.done = True
                    return DONE
                try:
                    event = json.loads(data)
                except ValueError:
                    event = {"unparsable": data}
                self.events.append(event)
                return event
            return None

        return await asyncio.wait_for(read(), timeout)

    async def first_token(self, timeout: float) -> dict[str, Any]:
        """Read until an event that carries a choice (the first token); raise if the stream ends."""
        while True:
            event = await self.next_event(timeout)
            if event is None or event == DONE:
                raise EOFError("stream ended before its first token")
            if event.get("choices") or "error" in event:
                return event

    async def read_to_end(self, timeout: float) -> StreamEnd:
        """Read every remaining event until ``[DONE]``, the end of the body, or ``timeout``."""
        end = StreamEnd()

        async def drain() -> None:
            while True:
                event = await self.next_event(timeout)
                if event is None or event == DONE:
                    return

        try:
            await asyncio.wait_for(drain(), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            end.timed_out = True
        except (httpx.HTTPError, OSError) as exc:
            end.transport_error = f"{type(exc).__name__}: {exc}"
        end.events = list(self.events)
        end.done = self.done
        await self.drop()
        return end

    async def drop(self) -> None:
        """Close the connection without reading on (a departing client)."""
        if not self.closed:
            self.closed = True
            try:
                await self.response.aclose()
            except (httpx.HTTPError, OSError):
                pass


async def drop_all(streams: list[SseStream]) -> None:
    """Drop every stream *at once*, as a crowd of departing clients would.

    The sockets are shut down synchronously in one pass (no await between
    them), so the frontend sees all the disconnects in the same instant;
    then the httpx responses are closed.
    """
    for stream in streams:
        network = stream.response.extensions.get("network_stream")
        raw = network.get_extra_info("socket") if network is not None else None
        if raw is not None:
            try:
                raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    await asyncio.gather(*(s.drop() for s in streams))


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
        self.model: str = "default"
        self.client = httpx.AsyncClient(
            base_url=base_url, timeout=httpx.Timeout(timeout),
            # Every open stream is its own HTTP/1.1 connection; a burst case opens thousands.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- plain requests ------------------------------------------------------------
    async def request(self, method: str, path: str, *, json_body: Any = None,
                      params: Any = None, headers: dict[str, str] | None = None) -> Reply:
        response = await self.client.request(method, path, json=json_body, params=params, headers=headers)
        text = response.text
        try:
            body = response.json() if text else None
        except ValueError:
            body = None
        return Reply(response.status_code, body, text)

    async def health(self) -> int | None:
        """``GET /health`` status, or ``None`` when the server does not answer."""
        try:
            return (await self.client.get("/health", timeout=2.0)).status_code
        except (httpx.HTTPError, OSError):
            return None

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
        request = self.client.build_request("POST", path, json=body, headers=headers)
        response = await self.client.send(request, stream=True)
        return SseStream(response)

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
    """One shape of explicit-abort endpoint (FACTS section 11).

    ``ids_key`` carries the ids; abort-all is ``all_body`` (vLLM and vllm-rs:
    an empty id list; FastDeploy: ``abort_all``).
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


async def abort_by_ids(driver: HttpDriver, api: AbortApi, ids: list[str]) -> Reply:
    return await driver.request("POST", api.path, json_body=api.ids_body(ids))


async def abort_all(driver: HttpDriver, api: AbortApi) -> Reply:
    return await driver.request("POST", api.path, json_body=dict(api.all_body))
