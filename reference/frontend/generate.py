"""The generate routes of ``ecp serve`` (``POST /v1/completions``, ``POST /v1/chat/completions``).

They carry nearly all of the server's traffic, so they are served at the ASGI
level, ahead of Starlette's routing, request object and middleware (which
serve every other route, :mod:`.app`): every token of a streamed response then
passes through as few coroutines as possible on its way to the socket.

One request is one handler coroutine (parse, prepare, ADD, first delta,
response) and one watch (:class:`DisconnectWatch`, no task of its own) that
cancels it if the client disconnects, at any point; the choices' ``close`` then auto-aborts them (``ECP-ABORT-7``).
A streamed response answers 200 only once the first delta is there, so a
request the engine rejects before admission still gets an HTTP error (and the
rejection notice); later failures become an SSE error event.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any, Awaitable, Callable

import msgspec

from . import ids as idconv
from .choice import EngineRequestFailed
from .chunks import SSE_DONE, SseChunks, sse
from .driven import Driven
from .faults import FrontendFaults
from .limits import CLOSE, MAX_BODY_BYTES, MAX_CONTROL_BODY_BYTES, BodyRefused, read_body, replay
from .protocol import (
    ChatCompletionRequest, CompletionRequest, OpenAIError, client_error_to_openai, convert_body,
    bad_request, decode_json_object, engine_failure_to_openai, parse_rank,
)
from .serving import ChoiceRun, Deltas, Frontend, Prepared

log = logging.getLogger("ecp.serve")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

#: path -> body type, for ``POST`` only (other methods on these paths are Starlette's: 405)
GENERATE_ROUTES: dict[str, type] = {"/v1/completions": CompletionRequest,
                                    "/v1/chat/completions": ChatCompletionRequest}

_json = msgspec.json.Encoder()
_BODY_DECODERS = {typ: msgspec.json.Decoder(typ).decode for typ in GENERATE_ROUTES.values()}
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")]
#: Bound on the rejection notice; its failure is only logged (spec/PROTOCOL.md ECP-REJECT-3).
NOTIFY_TIMEOUT_S = 10.0
#: ECP-SEC-5: the 400 for kv_transfer_params from a client the operator does not trust
KV_PARAMS_UNTRUSTED = ("kv_transfer_params are accepted only from trusted clients: this server was not started "
                       "with --trust-request-kv-params, and the request lacks the trusted proxy's header "
                       "(--kv-params-trust-header)")


async def send_json(send: Send, status: int, obj: Any, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = _json.encode(obj)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json"),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class Generate:
    """The generate routes over one :class:`Frontend`."""

    def __init__(self, frontend: Frontend, faults: FrontendFaults) -> None:
        self.frontend = frontend
        self.client = frontend.client
        self.faults = faults
        # ECP-REJECT-3: rejections are announced exactly when a KV connector is configured
        # (the fault layer may bend that too)
        self.notify_rejections = faults.notify_rejections(frontend.config.kv_connector is not None)
        # ECP-SEC-5: whose kv_transfer_params reach the engine (the fault layer may trust everyone)
        self.trust_kv_params = faults.trust_kv_params(frontend.config.trust_request_kv_params)
        trust_header = frontend.config.kv_params_trust_header
        self.trust_header: tuple[bytes, bytes] | None = None
        if trust_header:
            name, _, value = trust_header.partition("=")
            self.trust_header = (name.strip().lower().encode("latin-1"), value.encode("latin-1"))

    def kv_params_trusted(self, scope: dict[str, Any]) -> bool:
        """``ECP-SEC-5``: whether this request's ``kv_transfer_params`` may reach an engine: the operator
        trusts every client, or the request carries the trusted proxy's header with its value."""
        if self.trust_kv_params:
            return True
        if self.trust_header is None:
            return False
        name, value = self.trust_header
        for key, got in scope["headers"]:
            if key == name and hmac.compare_digest(got, value):
                return True
        return False

    async def __call__(self, scope: dict[str, Any], raw: bytes, receive: Receive, send: Send, typ: type) -> None:
        """Answer one generate request whose body ``raw`` was read (:class:`ServeASGI`);
        ``receive`` then only says when the client leaves."""
        task = asyncio.current_task()
        assert task is not None
        watcher = DisconnectWatch(receive, task.cancel)
        try:
            await self._respond(scope, raw, send, typ)
        except asyncio.CancelledError:
            if not watcher.dropped:
                raise
            # the cancellation was ours: the client left, the request ends here
            # (Python >= 3.11 counts cancellations; 3.10 has no uncancel and needs none)
            uncancel = getattr(task, "uncancel", None)
            if uncancel is not None:
                uncancel()
        finally:
            watcher.close()

    def client_error(self, exc: BaseException) -> OpenAIError:
        if isinstance(exc, OpenAIError):
            return exc
        if isinstance(exc, EngineRequestFailed):
            return engine_failure_to_openai(exc.code, exc.message, exc.retryable)
        return client_error_to_openai(exc, self.client.healthy)

    async def _respond(self, scope: dict[str, Any], raw: bytes, send: Send, typ: type) -> None:
        kind = "chat" if typ is ChatCompletionRequest else "completion"
        params: Any = None  # the body's kv_transfer_params, for the rejection notice
        rank: int | None = None
        header_id = header(scope, b"x-request-id")
        base = idconv.base_request_id(header_id, None)
        try:
            try:  # a well-formed body decodes straight into its type
                body = _BODY_DECODERS[typ](raw)
                body_id, params = body.request_id, body.kv_transfer_params
            except msgspec.DecodeError:  # else the untyped way, for the precise 400
                body = None
                obj = decode_json_object(raw)
                body_id = obj.get("request_id") if isinstance(obj.get("request_id"), str) else None
                params = obj.get("kv_transfer_params")
            base = idconv.base_request_id(header_id, body_id)
            if params is not None and not self.kv_params_trusted(scope):
                # ECP-SEC-5: an untrusted client does not choose where an engine connects; refused
                # before anything reaches an engine, and not announced (ECP-REJECT-3 gates on params
                # the frontend accepted)
                params = None
                raise bad_request(KV_PARAMS_UNTRUSTED, "kv_transfer_params")
            rank = parse_rank(header(scope, b"x-data-parallel-rank"))
            if body is None:
                body = convert_body(obj, typ)
            prepared = self.frontend.prepare(body, base_id=base, data_parallel_rank=rank)
            try:
                deltas = await self.frontend.start(prepared)
            except Exception as exc:
                raise self.client_error(exc) from None
            try:
                if prepared.stream:
                    await self._stream(prepared, deltas, send)
                else:
                    await send_json(send, 200, await self._collect(prepared, deltas))
            finally:
                deltas.close()
        except OpenAIError as err:
            if err.param == "kv_transfer_params":  # params refused (here or by the engine): nothing to free
                params = None
            announced = await self._notify_rejection(params, idconv.response_id(kind, base), rank)
            # (the fault layer may bend the answer: reference/frontend/faults.py)
            await send_json(send, *self.faults.rejection_answer(err.status, err.body(), announced))

    async def _collect(self, p: Prepared, deltas: Deltas) -> dict[str, Any]:
        try:
            while await deltas.next_batch():
                pass
        except Exception as exc:
            raise self.client_error(exc) from None
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

    async def _stream(self, p: Prepared, deltas: Deltas, send: Send) -> None:
        """One write per batch of available deltas; ``[DONE]`` always last. Nothing is held
        back: what is available is written at once. The batch that finishes every choice
        leaves together with the usage chunk, ``[DONE]`` and the end of the response, as
        one write. A one-choice response is written from the client's output loop
        (:class:`Pusher`); several choices are read by this task."""
        chunks = SseChunks(p.kind, p.response_id, p.created, p.model)
        delta = chunks.delta

        def render(batch: list[Any]) -> bytes:
            return b"".join([delta(d) for d in batch]) if len(batch) > 1 else delta(batch[0])

        def last(exc: BaseException | None) -> bytes:
            """What ends the response: the usage chunk (or the error), then ``[DONE]``."""
            if exc is not None:  # engine death, ERROR output mid-stream, client failure
                return sse(self.client_error(exc).body()) + SSE_DONE
            if p.include_usage:
                return chunks.usage(sum(len(x) for x in p.prompts),
                                    sum(len(c.token_ids) for c in p.choices)) + SSE_DONE
            return SSE_DONE

        start = {"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS}
        pending = chunks.role([c.index for c in p.choices]) if p.kind == "chat" else b""
        if isinstance(deltas, ChoiceRun):
            pusher = Pusher(deltas, render, last, send, start, pending)
            try:
                await pusher.run()
            except FailedBeforeStart as failed:  # before the 200: an HTTP error
                raise self.client_error(failed.__cause__) from None
            finally:
                pusher.stop()
            return
        try:
            batch = await deltas.next_batch()
        except Exception as exc:  # before the 200: an HTTP error
            raise self.client_error(exc) from None
        await send(start)
        error: BaseException | None = None
        try:
            while batch:
                pending += render(batch)
                # once every choice finished nothing more can come: these deltas wait for the end
                # of the stream (the choices' cleanup, which next_batch runs; no new output)
                if not deltas.finished:
                    await send({"type": "http.response.body", "body": pending, "more_body": True})
                    pending = b""
                batch = await deltas.next_batch()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
        await send({"type": "http.response.body", "body": pending + last(error), "more_body": False})

    async def _notify_rejection(self, params: Any, request_id: str, rank: int | None) -> bool:
        """``ECP-REJECT-3``: with a KV connector configured, a rejected request whose
        ``kv_transfer_params.do_remote_prefill`` is truthy is announced to the
        engine so the prefill node frees its blocks. The HTTP client only ever
        sees the original error (``ECP-REJECT-4``). Returns whether it was announced."""
        if not self.notify_rejections:
            return False
        if not isinstance(params, dict) or not params.get("do_remote_prefill"):
            return False
        try:
            await asyncio.wait_for(
                self.client.notify_kv_transfer_request_rejected(request_id, dict(params), data_parallel_rank=rank),
                NOTIFY_TIMEOUT_S)
        except Exception as exc:  # only logged, as in vLLM
            log.warning("rejection notice for %s failed: %s", request_id, exc)
            return False
        return True


class FailedBeforeStart(Exception):
    """The choice failed before anything of its response was sent: the handler answers with an
    HTTP error instead of a 200 (``__cause__`` is the failure)."""


class Pusher:
    """Writes one choice's response from the engine-core client's output loop.

    The choice's stream is listened to (``RequestStream.listen``): once per batch of
    output frames the client calls :meth:`on_ready`, which folds what arrived and writes it
    at once, with no task woken per token. With ``start`` (the ASGI response start), the
    first batch is written after it, ``head`` before its deltas: the first token leaves from
    the output loop that read it too, and a choice that fails before that makes :meth:`run`
    raise :class:`FailedBeforeStart` with nothing sent. ASGI's ``send`` is a coroutine; it is
    driven here (:class:`~.driven.Driven`) and normally finishes without suspending (the
    transport takes the bytes). When it does suspend (the client reads slowly: the server
    applies flow control), it is resumed when what it waits for is done, and later bytes
    queue behind it, so the response keeps its order. :meth:`run` returns once the last
    write has finished.
    """

    def __init__(self, run: ChoiceRun, render: Callable[[list[Any]], bytes],
                 last: Callable[[BaseException | None], bytes], send: Send,
                 start: dict[str, Any] | None = None, head: bytes = b"") -> None:
        self.choice_run = run
        self.render = render
        self.last = last
        self.send = send
        self.start = start                   # the response start, until the first batch sends it
        self.head = head                     # bytes the first batch's deltas follow
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writing: Driven | None = None  # a send that waits for the transport
        self.queued = b""                    # bytes that wait behind it
        self.ending = False                  # the last bytes are written or queued

    async def run(self) -> None:
        self.choice_run.stream.listen(self.on_ready)
        await self.done

    def stop(self) -> None:
        """Stop listening; a write still waiting for the transport is abandoned (the client left)."""
        self.choice_run.stream.listen(None)
        writing, self.writing = self.writing, None
        if writing is not None:
            writing.close()

    def on_ready(self) -> None:
        # Poll until nothing is left: a batch can come with the request's failure behind it
        # (ChoiceRun.poll shows the deltas before an ERROR output first, and raises on the
        # next poll), and no further call would come for it once the stream has ended.
        while not (self.ending or self.done.done()):
            try:
                batch = self.choice_run.poll()
            except Exception as exc:
                if self.start is not None:  # nothing sent yet: the handler answers with an HTTP error
                    self.choice_run.stream.listen(None)
                    failed = FailedBeforeStart()
                    failed.__cause__ = exc
                    self.done.set_exception(failed)
                else:
                    self._end(self.last(exc))
                return
            if batch is None:
                return
            head = b""
            if self.start is not None:
                start, self.start = self.start, None
                head, self.head = self.head, b""
                self._send(start)
            if batch and not self.choice_run.finished:
                self._write(head + self.render(batch))
            else:
                self._end(head + (self.render(batch) if batch else b"") + self.last(None))

    def _end(self, data: bytes) -> None:
        self.ending = True
        self.choice_run.stream.listen(None)
        self._write(data)

    def _write(self, data: bytes) -> None:
        if self.writing is not None:
            self.queued += data
            return
        self._send({"type": "http.response.body", "body": data, "more_body": not self.ending})

    def _send(self, message: dict[str, Any]) -> None:
        writing = Driven(self.send(message), self._written)
        if writing.running:  # (a send that finished at once has already called _written)
            self.writing = writing

    def _written(self, _result: Any, exc: BaseException | None) -> None:
        self.writing = None
        if exc is not None:  # the send failed: nothing more can be written
            if not self.done.done():
                self.done.set_exception(exc)
        elif self.queued:
            data, self.queued = self.queued, b""
            self._write(data)
        elif self.ending and not self.done.done():
            self.done.set_result(None)


class DisconnectWatch:
    """Calls ``on_disconnect`` once if ASGI's ``receive`` says ``http.disconnect`` before
    :meth:`close`, i.e. while the response is not complete (after it, ``disconnect`` is what
    ``receive`` answers anyway). It waits in ``receive`` without a task of its own
    (:class:`~.driven.Driven`): one per request, from the body read to the last byte."""

    __slots__ = ("_on_disconnect", "_receive", "_waiting", "dropped")

    def __init__(self, receive: Receive, on_disconnect: Callable[[], Any]) -> None:
        self._receive = receive
        self._on_disconnect = on_disconnect
        self.dropped = False  #: the client left while the response was not complete
        self._waiting: Driven | None = None
        self._wait()

    def close(self) -> None:
        """The response ended (or the request failed): stop watching."""
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.close()

    def _wait(self) -> None:
        waiting = Driven(self._receive(), self._received)
        if waiting.running:
            self._waiting = waiting

    def _received(self, message: Any, exc: BaseException | None) -> None:
        self._waiting = None
        if exc is not None:  # the server's receive failed: nothing more will come from it
            log.debug("disconnect watch ended: %r", exc)
            return
        if message["type"] == "http.disconnect":
            self.dropped = True
            self._on_disconnect()
            return
        self._wait()  # more body than was read (not for a read body): keep watching


class ServeASGI:
    """The whole HTTP surface: the generate routes here, every other request to Starlette."""

    def __init__(self, generate: Generate, app: Any) -> None:
        self.generate = generate
        self.app = app

    @property
    def state(self) -> Any:  # (tests reach the ServeApp as app.state.serve, as on a Starlette app)
        return self.app.state

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        typ = GENERATE_ROUTES.get(scope["path"]) if scope["method"] == "POST" else None
        # every body is read here, bounded in size and time (limits.py), before any route sees it
        try:
            raw = await read_body(receive, MAX_BODY_BYTES if typ is not None else MAX_CONTROL_BODY_BYTES,
                                  header(scope, b"content-length"))
        except OpenAIError as err:
            await send_json(send, err.status, err.body(), CLOSE if isinstance(err, BodyRefused) else ())
            return
        if raw is None:  # the client left before its body was complete
            return
        if typ is not None:
            await self.generate(scope, raw, receive, send, typ)
        else:
            await self.app(scope, replay(raw, receive), send)
