"""OpenAI-compatible request bodies, their validation, and OpenAI-style errors.

Bodies decode with msgspec (unknown fields are ignored, as OpenAI clients send
many); a type error becomes a 400 naming the JSON path. :func:`to_sampling`
maps a body onto :class:`ecp.spec.SamplingParams` the way the vLLM 0.33
Python frontend does (``output_kind`` DELTA when streaming, FINAL_ONLY when
not; stop strings listed but matched here, in the frontend).
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from ecp.spec import RequestOutputKind, SamplingParams


class OpenAIError(Exception):
    """An error answered as ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param)


def client_error_to_openai(exc: BaseException, healthy: bool) -> OpenAIError:
    """Map an engine-core client exception by the clause it names (the client's error
    classes are typed ``ecp.spec`` errors carrying ``clause``)."""
    clause = getattr(exc, "clause", None)
    if clause == "ECP-DP-2":
        return OpenAIError(400, str(exc), "invalid_request_error", "X-data-parallel-rank")
    if clause == "ECP-REQ-8":
        return OpenAIError(400, str(exc), "invalid_request_error", "request_id")
    if clause == "ECP-FRAME-3":  # the request built from the body has a value the wire cannot carry
        return OpenAIError(400, f"the request cannot be sent to the engine: {exc}", "invalid_request_error")
    if not healthy:
        return OpenAIError(503, f"engine core is unavailable: {exc}", "service_unavailable")
    return OpenAIError(500, str(exc), "server_error")


#: ERROR output codes that name the client's own input (a 400 naming the field), not a server fault
CLIENT_ERROR_CODES: dict[str, str] = {
    "kv_producer_not_allowed": "kv_transfer_params",  # ECP-SEC-4: the engine connected nowhere
}


def engine_failure_to_openai(code: str, message: str, retryable: bool) -> OpenAIError:
    """An engine's ERROR output (``ECP-OUT-5``): 503 when the engine says a retry may work, 400 for a
    code of :data:`CLIENT_ERROR_CODES`, else 500."""
    if code in CLIENT_ERROR_CODES:
        return OpenAIError(400, f"{code}: {message}", "invalid_request_error", CLIENT_ERROR_CODES[code])
    status = 503 if retryable else 500
    return OpenAIError(status, f"{code}: {message}", "server_error" if status == 500 else "service_unavailable")


def parse_rank(v: str | None) -> int | None:
    """The ``X-data-parallel-rank`` header (``ECP-DP-2``): a non-negative integer, or absent."""
    if v is None or v == "":
        return None
    try:
        rank = int(v)
    except ValueError:
        raise bad_request(f"X-data-parallel-rank must be an integer, got {v!r}", "X-data-parallel-rank") from None
    if rank < 0:
        raise bad_request(f"X-data-parallel-rank must be non-negative, got {rank}", "X-data-parallel-rank")
    return rank


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class _SamplingFields(msgspec.Struct, kw_only=True):
    model: str | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    include_stop_str_in_output: bool = False
    request_id: str | None = None
    priority: int = 0
    kv_transfer_params: dict[str, Any] | None = None
    user: str | None = None


class CompletionRequest(_SamplingFields, kw_only=True):
    #: a string, a list of strings, a token-id list or a list of token-id lists
    prompt: Union[str, list[Any]]
    max_tokens: int | None = 16
    echo: bool = False


class ChatMessage(msgspec.Struct):
    role: str
    content: Union[str, list[dict[str, Any]], None] = None


class ChatCompletionRequest(_SamplingFields, kw_only=True):
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None


def decode_json_object(raw: bytes, *, empty_ok: bool = False) -> dict[str, Any]:
    """Decode a JSON object body or raise a 400."""
    if not raw.strip():
        if empty_ok:
            return {}
        raise bad_request("request body is empty; a JSON object is required")
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise bad_request(f"body is not valid JSON: {exc}") from None
    except RecursionError:  # nesting deeper than the decoder's stack: refused like any bad body
        raise bad_request("body is nested too deeply") from None
    if not isinstance(obj, dict):
        raise bad_request("body must be a JSON object")
    return obj


def convert_body(obj: dict[str, Any], typ: type) -> Any:
    """Typed view of a decoded body; a type error becomes a 400 naming the path."""
    try:
        return msgspec.convert(obj, typ)
    except msgspec.ValidationError as exc:
        raise bad_request(f"invalid request: {exc}") from None
    except RecursionError:
        raise bad_request("invalid request: nested too deeply") from None


def max_tokens_of(req: CompletionRequest | ChatCompletionRequest) -> int | None:
    if isinstance(req, ChatCompletionRequest):
        return req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    return req.max_tokens


def to_sampling(req: CompletionRequest | ChatCompletionRequest, *, max_tokens: int,
                eos_token_id: int | None, seed_offset: int = 0) -> SamplingParams:
    """Map an OpenAI body onto the engine's ``SamplingParams``; raise 400 when
    the values are out of range (``ECP-REQ-3``)."""
    kw: dict[str, Any] = {}
    for name in ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty"):
        v = getattr(req, name)
        if v is not None:
            kw[name] = float(v) if name != "top_k" else int(v)
    if req.seed is not None:
        kw["seed"] = req.seed + seed_offset
    stop_ids = list(req.stop_token_ids or [])
    extra = {"kv_transfer_params": dict(req.kv_transfer_params)} if req.kv_transfer_params else None
    sp = SamplingParams(
        n=1,  # the frontend fans n out into separate engine requests
        stop=req.stop, stop_token_ids=stop_ids, ignore_eos=req.ignore_eos, max_tokens=max_tokens,
        min_tokens=req.min_tokens, include_stop_str_in_output=req.include_stop_str_in_output,
        output_kind=RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY,
        watermarking=False, skip_clone=True, _eos_token_id=eos_token_id,
        _all_stop_token_ids=({eos_token_id} if eos_token_id is not None else set()) | set(stop_ids),
        extra_args=extra, **kw,
    )
    errs = sp.validation_errors()
    if errs:
        raise bad_request("; ".join(errs))
    return sp
