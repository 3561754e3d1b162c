"""The frontend's HTTP surface, as data: every route the frontend role drives.

The ZeroMQ wire is specified by the clause catalogue and the typed structs; the
HTTP side a frontend offers its clients is specified here, in one table
(:data:`ROUTES`), rendered into ``spec/PROTOCOL.md`` (section 14, between
``<!-- http-routes -->`` markers, by ``ecp schema``) and into one JSON Schema
per body (``spec/schema/http_*.json``). Each route names the ``ECP-HTTP-n``
clause that governs it and the vLLM 0.33.0 source it mirrors, so a frontend
author can implement the routes from the text and a conformance case can cite
the clause of every route it uses.

Bodies are msgspec structs only to generate their schemas: they are the JSON a
client sends or receives, not wire messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

import msgspec

# ---------------------------------------------------------------- bodies


class ErrorInfo(msgspec.Struct, omit_defaults=False):
    """The OpenAI error details (vLLM 0.33 ``ErrorInfo``)."""

    message: str
    type: str
    param: str | None = None
    code: int | str | None = None


class ErrorBody(msgspec.Struct):
    """Every error answer: ``{"error": {"message", "type", "param", "code"}}`` (``ECP-HTTP-3``)."""

    error: ErrorInfo


class ModelCard(msgspec.Struct):
    id: str
    object: str = "model"


class ModelList(msgspec.Struct):
    """``GET /v1/models``: the names a frontend serves; requests name one of them (``ECP-HTTP-4``)."""

    data: list[ModelCard]
    object: str = "list"


class AbortRequestsVllm(msgspec.Struct):
    """``POST /abort_requests`` (vLLM 0.33): ids to abort; an empty or missing list aborts every
    request of the receiving process (``ECP-HTTP-7``)."""

    request_ids: list[str] | None = None


class AbortRequestsFastDeploy(msgspec.Struct):
    """``POST /v1/abort_requests`` (FastDeploy): ids to abort, or ``abort_all: true``; neither is a 400."""

    req_ids: list[str] | None = None
    abort_all: bool = False


class IsSleepingAnswer(msgspec.Struct):
    is_sleeping: bool


class SleepAnswer(msgspec.Struct):
    status: str
    level: int


class WakeUpAnswer(msgspec.Struct):
    """``status`` is ``"awake"`` when every tag woke (``wake_up`` answered true), else ``"sleeping"``."""

    status: str
    tags: list[str] | None


class ResetPrefixCacheAnswer(msgspec.Struct):
    """``success`` is the AND of every engine's ``reset_prefix_cache`` result (``ECP-UTIL-5``)."""

    success: bool


class CollectiveRpcRequest(msgspec.Struct):
    """``POST /collective_rpc``: ``args``/``kwargs`` are passed to ``method`` as they are."""

    method: str
    args: list[Any] = []
    kwargs: dict[str, Any] | None = None
    timeout: float | None = None


class CollectiveRpcAnswer(msgspec.Struct):
    """``results``: every engine's result list, concatenated in rank order (``ECP-UTIL-6``)."""

    results: list[Any]


# ---------------------------------------------------------------- routes


@dataclass(frozen=True)
class Route:
    """One HTTP route of the frontend role."""

    method: str
    path: str
    clause: str
    #: whose form it is, and when it exists
    form: str
    request: str
    response: str
    #: the statuses a client must handle, beyond the error answers of ECP-HTTP-2
    statuses: str
    #: the vLLM 0.33.0 source the route mirrors (under site-packages/vllm/)
    source: str
    #: for an abort route: which ids it takes and what "all" is
    ids: str = ""
    #: whether every frontend serves it (the others are found by probing; cases needing one are UNSUPPORTED)
    required: bool = False
    body: type | None = None
    answer: type | None = None

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"


_DEV = "vLLM dev endpoint (`VLLM_SERVER_DEV_MODE=1`)"

ROUTES: tuple[Route, ...] = (
    Route("GET", "/health", "ECP-HTTP-5", "vLLM", "no body", "no body",
          "200 while the frontend serves; 503 (any non-200) once it is unhealthy (ECP-ROB-3)",
          "entrypoints/serve/instrumentator/health.py", required=True),
    Route("GET", "/v1/models", "ECP-HTTP-4", "OpenAI", "no body", "`{object: \"list\", data: [{id, …}]}`",
          "200", "entrypoints/openai/models/api_router.py", required=True, answer=ModelList),
    Route("POST", "/v1/completions", "ECP-HTTP-1", "OpenAI",
          "`{model, prompt, max_tokens, stream, …}`; headers `X-Request-Id`, `X-data-parallel-rank`",
          "completion object with `id` `cmpl-<base>`; with `stream: true` SSE `data:` chunks then `data: [DONE]`",
          "200; 400 invalid body or prompt too long (ECP-HTTP-8), pinned rank not served (ECP-DP-2); "
          "404 unknown model",
          "entrypoints/openai/completion/api_router.py, entrypoints/serve/engine/serving.py", required=True),
    Route("POST", "/v1/chat/completions", "ECP-HTTP-1", "OpenAI",
          "`{model, messages, max_tokens, stream, …}`; headers as for completions",
          "chat completion with `id` `chatcmpl-<base>`; SSE as for completions",
          "as for completions", "entrypoints/openai/chat_completion/api_router.py"),
    Route("POST", "/abort_requests", "ECP-HTTP-7", _DEV,
          "`{request_ids: [str]}`", "200 `{status: \"aborted\", aborted: int, …}`",
          "200; 400 body not a JSON object",
          "entrypoints/rl/online/api_router.py",
          ids="external ids (ECP-HTTP-6); `[]` or no `request_ids` = every request of the receiving process",
          body=AbortRequestsVllm),
    Route("POST", "/v1/abort_requests", "ECP-HTTP-7", "FastDeploy (ecp serve)",
          "`{req_ids: [str]}` or `{abort_all: true}`", "200 `{aborted: [id], …}`",
          "200; 400 neither `req_ids` nor `abort_all: true`", "not in vLLM 0.33 (FastDeploy's API server)",
          ids="external ids (ECP-HTTP-6); every request only with `abort_all: true`",
          body=AbortRequestsFastDeploy),
    Route("GET", "/is_sleeping", "ECP-HTTP-9", _DEV, "no body", "`{is_sleeping: bool}`",
          "200; an error answer when the engines disagree (ECP-UTIL-4)",
          "entrypoints/serve/dev/sleep/api_router.py", answer=IsSleepingAnswer),
    Route("POST", "/sleep", "ECP-HTTP-9", _DEV, "query `level` (0..2, default 1), `mode` (abort|wait|keep)",
          "`{status: \"sleeping\", level}`", "200; 422/400 bad query",
          "entrypoints/serve/dev/sleep/api_router.py", answer=SleepAnswer),
    Route("POST", "/wake_up", "ECP-HTTP-9", _DEV, "query `tags` (repeated; none = every tag)",
          "`{status: \"awake\"|\"sleeping\", tags}`", "200",
          "entrypoints/serve/dev/sleep/api_router.py", answer=WakeUpAnswer),
    Route("POST", "/reset_prefix_cache", "ECP-HTTP-10", _DEV,
          "query `reset_running_requests`, `reset_external` (bool, default false)", "`{success: bool}`", "200",
          "entrypoints/serve/dev/cache/api_router.py", answer=ResetPrefixCacheAnswer),
    Route("POST", "/collective_rpc", "ECP-HTTP-11", _DEV, "`{method, args?, kwargs?, timeout?}`",
          "`{results: [any]}` (non-JSON results as strings)", "200; 400 no `method` or body not an object",
          "entrypoints/serve/dev/rpc/api_router.py", body=CollectiveRpcRequest, answer=CollectiveRpcAnswer),
)

BY_KEY: dict[str, Route] = {r.key: r for r in ROUTES}
assert len(BY_KEY) == len(ROUTES), "duplicate route"

#: the error answer of every route (``ECP-HTTP-3``)
ERROR_BODY = ErrorBody


def route(method: str, path: str) -> Route | None:
    """The route ``method path`` (query string ignored), or ``None`` for one the table does not list."""
    return BY_KEY.get(f"{method.upper()} {path.split('?', 1)[0]}")


def uncited(used: Iterable[str], cited: Iterable[str]) -> list[str]:
    """Of the routes ``used`` (``"METHOD /path"``), those whose clause is not among ``cited``, or that
    the table does not list, each with why: what a conformance case relies on without citing it."""
    cited = set(cited)
    out = []
    for key in sorted(set(used)):
        method, _, path = key.partition(" ")
        r = route(method, path)
        if r is None:
            out.append(f"{key} (not in the HTTP route table)")
        elif r.clause not in cited:
            out.append(f"{key} ({r.clause})")
    return out


def schema_types() -> dict[str, tuple[type, str]]:
    """Schema name -> (body type, description), for ``spec/schema/http_*.json``."""
    out: dict[str, tuple[type, str]] = {"http_error": (ErrorBody, "every HTTP error answer (ECP-HTTP-3)")}
    for r in ROUTES:
        stem = r.path.strip("/").replace("/", "_")
        if r.body is not None:
            out[f"http_{stem}_request"] = (r.body, f"{r.key} request body ({r.clause})")
        if r.answer is not None:
            out[f"http_{stem}_response"] = (r.answer, f"{r.key} 200 answer ({r.clause})")
    return out


def render_routes() -> str:
    """The route table of PROTOCOL.md section 14."""
    rows = ["| Route | Clause | Form | Request | 200 answer | Statuses | Abort ids | vLLM 0.33 source |",
            "|---|---|---|---|---|---|---|---|"]
    for r in ROUTES:
        cells = [f"`{r.key}`" + (" (required)" if r.required else ""), r.clause, r.form, r.request, r.response,
                 r.statuses, r.ids or "–", re.sub(r"(entrypoints/\S+?\.py)", r"`\1`", r.source)]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"
