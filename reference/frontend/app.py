"""The HTTP layer of ``ecp serve`` over :class:`~.serving.Frontend`.

Routes (those of vLLM 0.33's API server): OpenAI ``/v1/completions`` and ``/v1/chat/completions``
(served at the ASGI level, :mod:`.generate`), and in a Starlette app ``/v1/models``; ``/health`` (503 while the client is unhealthy, never 3xx),
``/version``, ``/load``, ``/metrics``; vLLM's ``/abort_requests`` and
FastDeploy's ``/v1/abort_requests``; with dev mode, vLLM's dev routes
(``/is_sleeping``, ``/sleep``, ``/wake_up``, ``/reset_prefix_cache``, …).
Without dev mode those paths are not registered, so they answer 404 like vLLM.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


from ..client.errors import UtilityCallFailed
from ..client.release import NotInRelease
from .faults import FrontendFaults
from .generate import GENERATE_ROUTES, Generate, ServeASGI
from .limits import abort_ids
from .protocol import OpenAIError, bad_request, decode_json_object
from .serving import Frontend

log = logging.getLogger("ecp.serve")

_json = msgspec.json.Encoder()


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(_json.encode(obj), status_code=status, media_type="application/json")


def error_response(err: OpenAIError) -> Response:
    return json_response(err.body(), err.status)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """Unknown routes (404) and wrong methods (405) answer OpenAI-style JSON like every other error."""
    response = error_response(OpenAIError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}"))
    response.headers.update(exc.headers or {})  # 405 carries Allow
    return response


class ServeApp:
    """Holds the :class:`Frontend` and builds the Starlette routes."""

    def __init__(self, frontend: Frontend, peers: Any = None) -> None:
        """``peers``: the other API server processes of one ``ecp serve --api-server-count N``
        (:class:`~.peers.PeerLink`), or ``None`` when this process is the only one."""
        self.frontend = frontend
        self.peers = peers
        self.client = frontend.client
        self.started = time.time()
        self.generate = Generate(frontend, FrontendFaults(frontend.config.bugs))

    # ------------------------------------------------------------------ plumbing
    def build(self) -> ServeASGI:
        """The ASGI app: the generate routes (:class:`~.generate.Generate`) ahead of a Starlette
        app with every other route. Starlette also knows the generate paths, so that another
        method on them answers 405 like every route."""
        routes = [
            *(Route(path, self._generate_elsewhere, methods=["POST"]) for path in GENERATE_ROUTES),
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
        return ServeASGI(self.generate, app)

    async def _generate_elsewhere(self, request: Request) -> Response:  # pragma: no cover - routed ahead
        raise RuntimeError("POST to a generate route reached Starlette: ServeASGI routes it first")

    def _client_error(self, exc: BaseException) -> OpenAIError:
        """A client failure as the OpenAI error the abort routes answer (the generate routes' mapping)."""
        return self.generate.client_error(exc)

    # ------------------------------------------------------------------ info routes
    async def models(self, request: Request) -> Response:
        cfg = self.frontend.config
        return json_response({"object": "list", "data": [{
            "id": cfg.model_name, "object": "model", "created": int(self.started), "owned_by": "ecp",
            "root": cfg.model_name, "parent": None, "max_model_len": cfg.max_model_len}]})

    async def health(self, request: Request) -> Response:
        if self.client.healthy:
            return Response(status_code=200)
        err = self.client.error
        return json_response(OpenAIError(503, f"engine core is unhealthy: {err}", "service_unavailable").body(),
                             503)

    async def version(self, request: Request) -> Response:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ecp_version = version("engine-core-protocol")
        except PackageNotFoundError:  # pragma: no cover - running from a checkout
            ecp_version = "unknown"
        return json_response({"version": self.frontend.config.vllm_version, "ecp_version": ecp_version})

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
            ids = abort_ids(decode_json_object(await request.body(), empty_ok=True), "request_ids")
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
            ids = abort_ids(obj, "req_ids")
            abort_all = obj.get("abort_all") is True
            if not abort_all and not ids:
                raise bad_request("must provide abort_all=true or req_ids", "req_ids")
        except OpenAIError as err:
            return error_response(err)
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
        except OpenAIError:  # the route's own answer (a 4xx decided from the failure)
            raise
        except NotInRelease as exc:
            # the engines' release lacks the method or its arguments: nothing was sent (ecp serve --vllm)
            raise _UtilityHTTPError(json_response(
                {"error": {"message": exc.message, "type": "not_implemented", "param": None, "code": 501,
                           "clause": exc.clause}}, 501)) from None
        except Exception as exc:
            raise _UtilityHTTPError(self._utility_error(exc)) from None

    @staticmethod
    def _utility_error(exc: BaseException) -> Response:
        """A failed utility call as a 500 carrying the per-engine values."""
        body = OpenAIError(500, str(exc), "server_error").body()
        for attr in ("values", "failures", "results"):
            v = getattr(exc, attr, None)
            if isinstance(v, dict):
                body["error"][attr] = {str(k): _jsonable(x) for k, x in v.items()}
        body["error"]["clause"] = getattr(exc, "clause", None)
        return json_response(body, 500)

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
            # with each engine's answer, so that a failure names its engine
            ok, per_engine = await self._utility(lambda: self.client.call_utility(
                "reset_prefix_cache", running, external, each=True))
            return json_response({"success": bool(ok),
                                  "engines": {str(rank): bool(v) for rank, v in per_engine.items()}})
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
            if not isinstance(args, list):
                raise bad_request("args must be a list", "args")
            if kwargs is not None and not isinstance(kwargs, dict):
                raise bad_request("kwargs must be an object", "kwargs")
            if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                        or not 0 < timeout <= 3600):
                raise bad_request("timeout must be a number of seconds in (0, 3600]", "timeout")
            async def call() -> Any:
                try:
                    return await self.client.collective_rpc(method, timeout, list(args), kwargs)
                except UtilityCallFailed as exc:
                    # every engine's worker lacks the method: the client named it wrongly, a 400
                    # (vLLM's workers, and the reference engine's, fail with an AttributeError message)
                    marker = f"has no attribute {method!r}"
                    if exc.failures and all(marker in str(m) for m in exc.failures.values()):
                        raise bad_request(f"collective_rpc: no engine's worker has a method {method!r} "
                                          f"({exc.failures[min(exc.failures)]})", "method") from None
                    raise
            results = await self._utility(call)
            return json_response({"results": _jsonable(results)})
        return await self._dev(request, h)


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
