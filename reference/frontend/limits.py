"""What one HTTP request may make ``ecp serve`` hold: bodies, choices, abort lists.

Every bound here is checked before anything is built from the request, and
answered with the OpenAI error object (:class:`~.protocol.OpenAIError`):

* a body larger than its route's limit: **413** (read no further than the
  limit; a ``Content-Length`` above it is refused before reading), with
  ``Connection: close`` so the rest of the body is not parsed;
* a body that does not arrive within :data:`BODY_TIMEOUT_S`: **408**, also
  closing the connection (a client sending a byte a second holds nothing
  longer than that);
* more choices than :data:`MAX_CHOICES` (prompts × ``n``) or more ids than
  :data:`MAX_ABORT_IDS` in an abort call: **400** naming the parameter.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from .protocol import OpenAIError, bad_request

#: Bytes a completion or chat body may have: a prompt batch of token ids at the longest
#: context fits many times over.
MAX_BODY_BYTES = 16 << 20
#: Bytes the body of any other route may have (abort lists, collective_rpc arguments).
MAX_CONTROL_BODY_BYTES = 1 << 20
#: Seconds a client has to send its whole body once the headers are in.
BODY_TIMEOUT_S = 30.0
#: Engine requests one HTTP request may start (prompts × n); OpenAI's own bound on n is 128.
MAX_CHOICES = 256
#: Ids one abort call may name.
MAX_ABORT_IDS = 10_000

#: Headers of an answer after which the connection must not be reused.
CLOSE = [(b"connection", b"close")]

Receive = Callable[[], Awaitable[dict[str, Any]]]


class BodyRefused(OpenAIError):
    """413 or 408: the body is not read to its end, so the connection is closed after the answer."""


def _too_large(limit: int) -> BodyRefused:
    return BodyRefused(413, f"request body is larger than {limit} bytes", "invalid_request_error")


async def read_body(receive: Receive, limit: int, content_length: str | None) -> bytes | None:
    """The whole request body, at most ``limit`` bytes, within :data:`BODY_TIMEOUT_S`; ``None``
    when the client left first. Raises :class:`BodyRefused` (413, 408) or a 400 for a malformed
    ``Content-Length`` (the HTTP parser normally refuses those before)."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise bad_request(f"Content-Length is not an integer: {content_length!r}") from None
        if declared > limit:
            raise _too_large(limit)

    async def read() -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    # a timer that cancels this task, not wait_for: no task per request on the hot path
    timeout_s = BODY_TIMEOUT_S  # read at each call, so that a test may shorten it
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(timeout_s, expire)
    try:
        return await read()
    except asyncio.CancelledError:
        if not expired:
            raise
        uncancel = getattr(task, "uncancel", None)  # Python >= 3.11 counts cancellations
        if uncancel is not None:
            uncancel()
        raise BodyRefused(408, f"request body not received within {timeout_s:g} s", "invalid_request_error") from None
    finally:
        timer.cancel()


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (already read) once, then what ``receive`` gives
    (the disconnect), for an app that reads the body itself."""
    sent = False

    async def again() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def check_choices(prompts: int, n: int) -> None:
    """400 when ``prompts`` × ``n`` engine requests exceed :data:`MAX_CHOICES`."""
    if n > MAX_CHOICES or prompts * n > MAX_CHOICES:
        raise bad_request(f"a request may start at most {MAX_CHOICES} choices (prompts x n); "
                          f"got {prompts} x {n}", "n")


def abort_ids(obj: dict[str, Any], key: str) -> list[str] | None:
    """The ids an abort body names under ``key`` (``None`` when absent), each once in the order
    first named; 400 unless a list of at most :data:`MAX_ABORT_IDS` strings."""
    ids = obj.get(key)
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise bad_request(f"{key} must be a list of strings", key)
    if len(ids) > MAX_ABORT_IDS:
        raise bad_request(f"{key} may name at most {MAX_ABORT_IDS} ids, got {len(ids)}", key)
    return list(dict.fromkeys(ids))
