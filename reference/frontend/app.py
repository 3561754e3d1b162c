"""The HTTP layer of ``ecp serve``: a Starlette app over :class:`~.serving.Frontend`.

Routes (those of vLLM 0.33's API server): OpenAI ``/v1/completions``, ``/v1/chat/completions``,
``/v1/models``; ``/health`` (503 while the client is unhealthy, never 3xx),
``/version``, ``/load``, ``/metrics``; vLLM's ``/abort_requests`` and
FastDeploy's ``/v1/abort_requests``; with dev mode, vLLM's dev routes
(``/is_sleeping``, ``/sleep``, ``/wake_up``, ``/reset_prefix_cache``, …).
Without dev mode those paths are not registered, so they answer 404 like vLLM.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ecp.spec import VLLM_VERSION

from . import ids as idconv
from .choice import ChoiceDelta, EngineRequestFailed
from .protocol import (
    ChatCompletionRequest, CompletionRequest, OpenAIError, bad_request, convert_body, decode_json_object,
)
from .faults import FrontendFaults
from .serving import DeltaStream, Frontend, Prepared

log = logging.getLogger("ecp.serve")

_json = msgspec.json.Encoder()
#: Bound on the rejection notice; its failure is only logged (spec/PROTOCOL.md ECP-REJECT-3).
NOTIFY_TIMEOUT_S = 10.0


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(_json.encode(obj), status_code=status, media_type="application/json")


def error_response(err: OpenAIError) -> Response:
    return json_response(err.body(), err.status)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """Unknown routes (404) and wrong methods (405) answer OpenAI-style JSON like every other error."""
    response = error_response(OpenAIError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}"))
    response.headers.update(exc.headers or {})  # 405 carries Allow
    return response


def client_error_to_openai(exc: BaseException, healthy: bool) -> OpenAIError:
    """Map a client exception by the clause it names (the client's error classes
    are typed ``ecp.spec`` errors carrying ``clause``)."""
    clause = getattr(exc, "clause", None)
    if clause == "ECP-DP-2":
        return OpenAIError(400, str(exc), "invalid_request_error", "X-data-parallel-rank")
    if clause == "ECP-REQ-8":
        return OpenAIError(400, str(exc), "invalid_request_error", "request_id")
    if not healthy:
        return OpenAIError(503, f"engine core is unavailable: {exc}", "service_unavailable")
    return OpenAIError(500, str(exc), "server_error")


def engine_failure_to_openai(exc: EngineRequestFailed) -> OpenAIError:
    status = 503 if exc.retryable else 500
    return OpenAIError(status, f"{exc.code}: {exc.message}", "server_error" if status == 500
                       else "service_unavailable")


def _sse(obj: Any) -> bytes:
    return b"data: " + _json.encode(obj) + b"\n\n"


_SSE_DONE = b"data: [DONE]\n\n"


class _Disconnected(Exception):
    pass


async def _wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def run_with_cancellation(request: Request, work: Awaitable[Any]) -> Any:
    """Race a non-streaming handler against the client's disconnect (vLLM's
    ``with_cancellation``): a disconnect cancels the work, whose ``finally``
    blocks auto-abort the engine requests."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise _Disconnected


class ServeApp:
    """Holds the :class:`Frontend` and builds the Starlette routes."""

    def __init__(self, frontend: Frontend, peers: Any = None) -> None:
        """``peers``: the other API server processes of one ``ecp serve --api-server-count N``
        (:class:`~.peers.PeerLink`), or ``None`` when this process is the only one."""
        self.frontend = frontend
        self.peers = peers
        self.client = frontend.client
        self.started = time.time()
        cfg = frontend.config
        # ECP-REJECT-3: rejections are announced exactly when a KV connector is configured
        # (the --bug faults may bend that: reference/frontend/faults.py)
        self._notify_rejections = FrontendFaults(cfg.bugs).notify_rejections(cfg.kv_connector is not None)

    # ------------------------------------------------------------------ plumbing
    def build(self) -> Starlette:
        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/ping", self.health, methods=["GET", "POST"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/load", self.load, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/abort_requests", self.abort_requests_vllm, methods=["POST"]),
            # vLLM 0.33 also registers this path, always (`vllm/entrypoints/scale_out/token_in_token_out/api_router.py`): same body, same answer
            Route("/inference/v1/abort_requests", self.abort_requests_vllm, methods=["POST"]),
            Route("/v1/abort_requests", self.abort_requests_fastdeploy, methods=["POST"]),
        ]
        if self.frontend.config.dev_mode:
            routes += [
                Route("/is_sleeping", self.is_sleeping, methods=["GET"]),
                Route("/sleep", self.sleep, methods=["POST"]),
                Route("/wake_up", self.wake_up, methods=["POST"]),
                Route("/reset_prefix_cache", self.reset_prefix_cache, methods=["POST"]),
                Route("/reset_mm_cache", self.reset_mm_cache, methods=["POST"]),
                Route("/reset_encoder_cache", self.reset_encoder_cache, methods=["POST"]),
                Route("/pause", self.pause, methods=["POST"]),
                Route("/resume", self.resume, methods=["POST"]),
                Route("/is_paused", self.is_paused, methods=["GET"]),
                Route("/collective_rpc", self.collective_rpc, methods=["POST"]),
            ]
        app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
        app.state.serve = self
        return app

    # ------------------------------------------------------------------ generation
    async def completions(self, request: Request) -> Response:
        return await self._generate(request, CompletionRequest)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, ChatCompletionRequest)

    async def _generate(self, request: Request, typ: type) -> Response:
        raw = await request.body()
        kind = "chat" if typ is ChatCompletionRequest else "completion"
        obj: dict[str, Any] = {}
        rank: int | None = None
        base = idconv.base_request_id(request.headers.get("x-request-id"), None)
        try:
            obj = decode_json_object(raw)
            body_id = obj.get("request_id") if isinstance(obj.get("request_id"), str) else None
            base = idconv.base_request_id(request.headers.get("x-request-id"), body_id)
            rank = _parse_rank(request.headers.get("x-data-parallel-rank"))
            body = convert_body(obj, typ)
            prepared = self.frontend.prepare(body, base_id=base, data_parallel_rank=rank)
            if prepared.stream:
                return await run_with_cancellation(request, self._start_stream(prepared))
            return json_response(await run_with_cancellation(request, self._collect(prepared)))
        except OpenAIError as err:
            await self._notify_rejection(obj, idconv.response_id(kind, base), rank)
            return error_response(err)
        except _Disconnected:
            return Response(status_code=499)

    def _client_error(self, exc: BaseException) -> OpenAIError:
        if isinstance(exc, OpenAIError):
            return exc
        if isinstance(exc, EngineRequestFailed):
            return engine_failure_to_openai(exc)
        return client_error_to_openai(exc, bool(getattr(self.client, "healthy", True)))

    async def _collect(self, p: Prepared) -> dict[str, Any]:
        deltas = self.frontend.run(p)
        try:
            async for _ in deltas:
                pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._client_error(exc) from None
        finally:
            deltas.close()
        completion_tokens = sum(len(c.token_ids) for c in p.choices)
        prompt_tokens = sum(len(x) for x in p.prompts)
        per_prompt = len(p.choices) // len(p.prompts)
        choices = []
        for c in p.choices:
            if p.kind == "chat":
                choices.append({"index": c.index, "message": {"role": "assistant", "content": c.text},
                                "logprobs": None, "finish_reason": c.finish_reason, "stop_reason": c.stop_reason})
            else:
                text = (p.echo_texts[c.index // per_prompt] if p.echo_texts else "") + c.text
                choices.append({"index": c.index, "text": text, "logprobs": None,
                                "finish_reason": c.finish_reason, "stop_reason": c.stop_reason})
        body = {"id": p.response_id, "object": "chat.completion" if p.kind == "chat" else "text_completion",
                "created": p.created, "model": p.model, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}
        kv = [c.kv_transfer_params for c in p.choices if c.kv_transfer_params]
        if kv:
            body["kv_transfer_params"] = kv[0]
        return body

    async def _start_stream(self, p: Prepared) -> Response:
        """Wait for the first delta before answering 200, so a request the
        engine rejects before admission still gets an HTTP error (and the
        rejection notice); later failures become an SSE error event."""
        deltas = self.frontend.run(p)
        try:
            first = await deltas.next_batch()
        except BaseException as exc:
            deltas.close()
            if isinstance(exc, Exception):
                raise self._client_error(exc) from None
            raise
        return _SSEResponse(self._sse_body(p, deltas, first), deltas)

    def _chunk(self, p: Prepared, d: ChoiceDelta) -> dict[str, Any]:
        if p.kind == "chat":
            choice = {"index": d.index, "delta": {"content": d.text} if d.text or not d.finish_reason else {},
                      "logprobs": None, "finish_reason": d.finish_reason, "stop_reason": d.stop_reason}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": d.index, "text": d.text, "logprobs": None, "finish_reason": d.finish_reason,
                      "stop_reason": d.stop_reason}
            obj = "text_completion"
        return {"id": p.response_id, "object": obj, "created": p.created, "model": p.model, "choices": [choice]}

    async def _sse_body(self, p: Prepared, deltas: DeltaStream, first: list[ChoiceDelta]) -> AsyncIterator[bytes]:
        """One write per batch of available deltas; ``[DONE]`` always last. Nothing is held
        back: what is available is written at once. The batch that finishes every choice
        leaves together with the usage chunk, ``[DONE]`` and the end of the response, as
        one write (:class:`_Last`)."""
        pending = b""
        try:
            if p.kind == "chat":
                pending = b"".join(_sse({"id": p.response_id, "object": "chat.completion.chunk",
                                         "created": p.created, "model": p.model, "choices": [{
                                             "index": c.index, "delta": {"role": "assistant", "content": ""},
                                             "logprobs": None, "finish_reason": None}]}) for c in p.choices)
            batch = first
            while batch:
                pending += b"".join(_sse(self._chunk(p, d)) for d in batch)
                # once every choice finished nothing more can come: these deltas wait for the end
                # of the stream (the choices' cleanup, which next_batch runs; no new output)
                if not all(c.finished for c in p.choices):
                    yield pending
                    pending = b""
                batch = await deltas.next_batch()
            if p.include_usage:
                completion = sum(len(c.token_ids) for c in p.choices)
                prompt = sum(len(x) for x in p.prompts)
                pending += _sse({"id": p.response_id, "object": "chat.completion.chunk" if p.kind == "chat"
                                 else "text_completion", "created": p.created, "model": p.model, "choices": [],
                                 "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                           "total_tokens": prompt + completion}})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # engine death, ERROR output mid-stream, client failure
            pending += _sse(self._client_error(exc).body())
        finally:
            deltas.close()
        yield _Last(pending + _SSE_DONE)

    async def _notify_rejection(self, obj: dict[str, Any], request_id: str, rank: int | None) -> None:
        """``ECP-REJECT-3``: with a KV connector configured, a rejected request whose
        ``kv_transfer_params.do_remote_prefill`` is truthy is announced to the
        engine so the prefill node frees its blocks. The HTTP client only ever
        sees the original error (``ECP-REJECT-4``)."""
        if not self._notify_rejections:
            return
        params = obj.get("kv_transfer_params") if isinstance(obj, dict) else None
        if not isinstance(params, dict) or not params.get("do_remote_prefill"):
            return
        try:
            await asyncio.wait_for(
                self.client.notify_kv_transfer_request_rejected(request_id, dict(params), data_parallel_rank=rank),
                NOTIFY_TIMEOUT_S)
        except Exception as exc:  # only logged, as in vLLM
            log.warning("rejection notice for %s failed: %s", request_id, exc)

    # ------------------------------------------------------------------ info routes
    async def models(self, request: Request) -> Response:
        cfg = self.frontend.config
        return json_response({"object": "list", "data": [{
            "id": cfg.model_name, "object": "model", "created": int(self.started), "owned_by": "ecp",
            "root": cfg.model_name, "parent": None, "max_model_len": cfg.max_model_len}]})

    async def health(self, request: Request) -> Response:
        if getattr(self.client, "healthy", True):
            return Response(status_code=200)
        err = getattr(self.client, "error", None)
        return json_response(OpenAIError(503, f"engine core is unhealthy: {err}", "service_unavailable").body(),
                             503)

    async def version(self, request: Request) -> Response:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ecp_version = version("engine-core-protocol")
        except PackageNotFoundError:  # pragma: no cover - running from a checkout
            ecp_version = "unknown"
        return json_response({"version": VLLM_VERSION, "ecp_version": ecp_version})

    async def load(self, request: Request) -> Response:
        load = len(self.frontend.index)
        if self.peers is not None:
            try:
                load += await self.peers.load()
            except Exception as exc:
                return error_response(OpenAIError(500, str(exc), "server_error"))
        return json_response({"server_load": load})

    async def metrics(self, request: Request) -> Response:
        m = self.frontend.metrics
        return Response(m.render(), media_type=m.content_type)

    # ------------------------------------------------------------------ abort APIs
    async def _abort(self, ids: list[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
        """Abort here and, with several API server processes, in every other one: each
        request's own process finalises it and sends its ABORT (``ECP-ABORT-8``). An id
        is not found only if no process knows it."""
        results, not_found = await self.frontend.abort(ids)
        if self.peers is None:
            return results, not_found
        more, unknown_elsewhere = await self.peers.abort(ids)
        missing = set(unknown_elsewhere)
        return results + more, [i for i in not_found if i in missing]

    async def abort_requests_vllm(self, request: Request) -> Response:
        """vLLM: ``{"request_ids": [...]}``; missing or empty = every request."""
        try:
            obj = decode_json_object(await request.body(), empty_ok=True)
            ids = obj.get("request_ids")
            if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
                raise bad_request("request_ids must be a list of strings", "request_ids")
        except OpenAIError as err:
            return error_response(err)
        try:
            results, not_found = await self._abort(ids or None)
        except Exception as exc:  # the client is closed or dead: its streams already ended
            return error_response(self._client_error(exc))
        return json_response({"status": "aborted", "aborted": len(results), "results": results,
                              "not_found": not_found})

    async def abort_requests_fastdeploy(self, request: Request) -> Response:
        """FastDeploy: ``{"req_ids": [...]}`` and/or ``{"abort_all": true}``."""
        try:
            obj = decode_json_object(await request.body(), empty_ok=True)
        except OpenAIError as err:
            return error_response(err)
        ids = obj.get("req_ids")
        abort_all = obj.get("abort_all") is True
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            return error_response(bad_request("req_ids must be a list of strings", "req_ids"))
        if not abort_all and not ids:
            return json_response({"error": "must provide abort_all=true or req_ids"}, 400)
        try:
            results, not_found = await self._abort(None if abort_all else ids)
        except Exception as exc:  # the client is closed or dead: its streams already ended
            return error_response(self._client_error(exc))
        return json_response({"aborted": [r["request_id"] for r in results], "results": results,
                              "not_found": not_found})

    # ------------------------------------------------------------------ dev routes
    async def _utility(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run a utility call; engine disagreement and failures become 500s that
        carry the per-engine values (``ECP-UTIL-4``, ``ECP-UTIL-3``)."""
        try:
            return await call()
        except Exception as exc:
            err = OpenAIError(500, str(exc), "server_error")
            body = err.body()
            for attr in ("values", "failures", "results"):
                v = getattr(exc, attr, None)
                if isinstance(v, dict):
                    body["error"][attr] = {str(k): _jsonable(x) for k, x in v.items()}
            body["error"]["clause"] = getattr(exc, "clause", None)
            raise _UtilityHTTPError(json_response(body, 500)) from None

    async def _dev(self, request: Request, handler: Callable[[], Awaitable[Response]]) -> Response:
        try:
            return await handler()
        except _UtilityHTTPError as exc:
            return exc.response
        except OpenAIError as err:
            return error_response(err)

    async def is_sleeping(self, request: Request) -> Response:
        async def h() -> Response:
            return json_response({"is_sleeping": bool(await self._utility(self.client.is_sleeping))})
        return await self._dev(request, h)

    async def sleep(self, request: Request) -> Response:
        async def h() -> Response:
            q = request.query_params
            try:
                level = int(q.get("level", "1"))
            except ValueError:
                raise bad_request(f"level must be an integer, got {q.get('level')!r}", "level") from None
            if level not in (0, 1, 2):
                raise bad_request(f"level must be 0, 1 or 2, got {level}", "level")
            mode = q.get("mode", "abort")
            if mode not in ("abort", "wait", "keep"):
                raise bad_request(f"mode must be abort, wait or keep, got {mode!r}", "mode")
            await self._utility(lambda: self.client.sleep(level, mode))
            return json_response({"status": "sleeping", "level": level})
        return await self._dev(request, h)

    async def wake_up(self, request: Request) -> Response:
        async def h() -> Response:
            tags = request.query_params.getlist("tags") or None
            awake = await self._utility(lambda: self.client.wake_up(tags))
            return json_response({"status": "sleeping" if awake is False else "awake", "tags": tags})
        return await self._dev(request, h)

    async def reset_prefix_cache(self, request: Request) -> Response:
        async def h() -> Response:
            q = request.query_params
            running = _parse_bool(q.get("reset_running_requests"), "reset_running_requests")
            external = _parse_bool(q.get("reset_external"), "reset_external")
            ok = await self._utility(lambda: self.client.reset_prefix_cache(running, external))
            return json_response({"success": bool(ok)})
        return await self._dev(request, h)

    async def reset_mm_cache(self, request: Request) -> Response:
        async def h() -> Response:
            await self._utility(lambda: self.client.call_utility("reset_mm_cache"))
            return json_response({"success": True})
        return await self._dev(request, h)

    async def reset_encoder_cache(self, request: Request) -> Response:
        async def h() -> Response:
            await self._utility(lambda: self.client.call_utility("reset_encoder_cache"))
            return json_response({"success": True})
        return await self._dev(request, h)

    async def pause(self, request: Request) -> Response:
        async def h() -> Response:
            q = request.query_params
            mode = q.get("mode", "abort")
            if mode not in ("abort", "wait", "keep"):
                raise bad_request(f"mode must be abort, wait or keep, got {mode!r}", "mode")
            clear = _parse_bool(q.get("clear_cache"), "clear_cache", default=True)
            await self._utility(lambda: self.client.pause_generation(mode, clear))
            return json_response({"status": "paused"})
        return await self._dev(request, h)

    async def resume(self, request: Request) -> Response:
        async def h() -> Response:
            await self._utility(self.client.resume_scheduler)
            return json_response({"status": "resumed"})
        return await self._dev(request, h)

    async def is_paused(self, request: Request) -> Response:
        async def h() -> Response:
            return json_response({"is_paused": bool(await self._utility(self.client.is_scheduler_paused))})
        return await self._dev(request, h)

    async def collective_rpc(self, request: Request) -> Response:
        async def h() -> Response:
            obj = decode_json_object(await request.body())
            method = obj.get("method")
            if not isinstance(method, str) or not method:
                raise bad_request("method is required", "method")
            args = obj.get("args") or []
            kwargs = obj.get("kwargs")
            timeout = obj.get("timeout")
            results = await self._utility(
                lambda: self.client.collective_rpc(method, timeout, list(args), kwargs))
            return json_response({"results": _jsonable(results)})
        return await self._dev(request, h)


class _Last(bytes):
    """A stream's final chunk: :class:`_SSEResponse` sends it with the end of the response."""


class _SSEResponse(StreamingResponse):
    """The SSE response of a generate route.

    * It closes its :class:`DeltaStream` however it ends, including a disconnect
      before the body iterator ever started.
    * A client that goes away cancels the streaming (the choices then auto-abort,
      ``dropped_stream``): one plain watcher task per response, where Starlette's
      ``StreamingResponse`` opens a task group with cancel scopes.
    * Its :class:`_Last` chunk carries the end of the chunked body too (one write,
      not two).
    """

    def __init__(self, body: AsyncIterator[bytes], deltas: DeltaStream) -> None:
        super().__init__(body, media_type="text/event-stream")
        self._deltas = deltas

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        state = {"streaming": True, "dropped": False}

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if state["streaming"]:  # after the response ended, "disconnect" is what receive() says
                state["dropped"] = True
                task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not state["dropped"]:
                raise
            # the cancellation was ours: the client left, the response ends here
            # (Python >= 3.11 counts cancellations; 3.10 has no uncancel and needs none)
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None:
                uncancel()
        finally:
            state["streaming"] = False
            watcher.cancel()
            self._deltas.close()

    async def stream_response(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        ended = False
        async for chunk in self.body_iterator:
            ended = isinstance(chunk, _Last)
            await send({"type": "http.response.body", "body": bytes(chunk), "more_body": not ended})
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _UtilityHTTPError(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _jsonable(v: Any) -> Any:
    return msgspec.to_builtins(v, str_keys=True, enc_hook=repr)


def _parse_bool(v: str | None, name: str, default: bool = False) -> bool:
    if v is None or v == "":
        return default
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise bad_request(f"{name} must be a boolean, got {v!r}", name)


def _parse_rank(v: str | None) -> int | None:
    if v is None or v == "":
        return None
    try:
        rank = int(v)
    except ValueError:
        raise bad_request(f"X-data-parallel-rank must be an integer, got {v!r}", "X-data-parallel-rank") from None
    if rank < 0:
        raise bad_request(f"X-data-parallel-rank must be non-negative, got {rank}", "X-data-parallel-rank")
    return rank
