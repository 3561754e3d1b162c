"""What the frontend uses of an engine-core client (:class:`EngineClient`) and of one request's
stream (:class:`OutputStream`), and nothing more.

``ecp serve`` runs on :class:`ecp.reference.client.EngineCoreClient`; the HTTP-layer tests run on
an in-memory stand-in. Whatever the frontend is given must have every member below and take the
arguments the frontend passes (positionally, except the keyword-only ones).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ecp.spec import EngineCoreOutput, EngineCoreReadyResponse, EngineCoreRequest


@runtime_checkable
class OutputStream(Protocol):
    """One request's outputs, as the frontend reads them (``RequestStream``'s push and pull mode)."""

    @property
    def finished(self) -> bool:
        """No more outputs can arrive."""

    async def wait(self) -> None:
        """Until an output is queued or the stream has ended."""

    def take_nowait(self) -> list[EngineCoreOutput]:
        """Every output received and not yet taken; raises the stream's error once they are taken."""

    def listen(self, callback: Any) -> None:
        """Push mode: call ``callback()`` whenever outputs arrived or the stream ended (``None`` stops)."""

    async def aclose(self, *, cause: str = "dropped_stream") -> None:
        """Stop consuming; a request still running is auto-aborted with ``cause``."""


@runtime_checkable
class EngineClient(Protocol):
    """The engine-core client as the frontend uses it: requests, explicit aborts, the rejection
    notice, the utility calls of the dev routes, and its health."""

    @property
    def healthy(self) -> bool:
        """False once the client failed (``/health`` answers 503)."""

    @property
    def error(self) -> BaseException | None:
        """The client's first fatal error, or ``None``."""

    @property
    def max_model_len(self) -> int | None:
        """The smallest ``max_model_len`` of the engines (``ECP-HS-9``)."""

    @property
    def ready_responses(self) -> Mapping[int, EngineCoreReadyResponse | None]:
        """Each engine's ready payload by rank."""

    async def add(self, request: EngineCoreRequest) -> OutputStream:
        """Send ADD; the request's stream."""

    async def abort(self, request_ids: Iterable[str]) -> Any:
        """Abort requests explicitly (``ECP-ABORT-8``)."""

    async def notify_kv_transfer_request_rejected(self, request_id: str, kv_transfer_params: dict[str, Any], *,
                                                  data_parallel_rank: int | None = None) -> Any:
        """Announce a rejected request to an engine (``ECP-REJECT-2``)."""

    async def call_utility(self, method: str, *args: Any, each: bool = False) -> Any:
        """Call a utility method on every engine and aggregate; with ``each``, ``(result, {rank: value})``."""

    async def is_sleeping(self) -> bool: ...

    async def sleep(self, level: int, mode: str) -> None: ...

    async def wake_up(self, tags: Sequence[str] | None) -> bool: ...

    async def pause_generation(self, mode: str, clear_cache: bool) -> None: ...

    async def resume_scheduler(self) -> None: ...

    async def is_scheduler_paused(self) -> bool: ...

    async def collective_rpc(self, method: str, timeout: float | None, args: Sequence[Any],
                             kwargs: dict[str, Any] | None) -> list[Any]: ...
