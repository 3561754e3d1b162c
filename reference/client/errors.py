"""Errors raised by the reference client.

Protocol violations by an engine subclass :class:`ecp.spec.errors.RemoteProtocolError`
(the engine sent something forbidden); misuse by the caller subclasses
:class:`ecp.spec.errors.LocalProtocolError` (nothing was sent). Everything
else derives from :class:`ClientError`. Every error names the clause it
enforces (``clause``), so the frontend can report it precisely.
"""

from __future__ import annotations

from typing import Any, Sequence

# HandshakeTimeout is the spec's (one handshake timeout for both roles), re-exported here
from ecp.spec.errors import HandshakeError, HandshakeTimeout, LocalProtocolError, RemoteProtocolError  # noqa: F401


class ClientError(Exception):
    """Base of the client's own (non-wire) errors. ``clause`` may be ``None``."""

    clause: str | None = None

    def __init__(self, message: str, *, clause: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if clause is not None:
            self.clause = clause

    def __str__(self) -> str:
        return f"[{self.clause}] {self.message}" if self.clause else self.message


# --------------------------------------------------------------------------- handshake
class UnexpectedEngineIdentity(HandshakeError):
    """A handshake message or registration came from an identity outside the
    configured ranks (``ECP-HS-11``)."""

    def __init__(self, identity: bytes, expected_ranks: Sequence[int], where: str) -> None:
        super().__init__(
            f"{where} from unexpected engine identity {identity.hex() or '(empty)'}; expected ranks "
            f"{list(expected_ranks)}", clause="ECP-HS-11",
            expected=f"ranks {list(expected_ranks)}", got=identity.hex())
        self.identity = identity
        self.expected_ranks = list(expected_ranks)


class InconsistentEngines(HandshakeError):
    """Engines' ready payloads disagree on something that must match (``ECP-HS-10``)."""

    def __init__(self, what: str, values: dict[int, Any]) -> None:
        super().__init__(f"engines disagree on {what}: {values}", clause="ECP-HS-10",
                         expected=f"equal {what}", got=values)
        self.what = what
        self.values = values


# --------------------------------------------------------------------------- requests
class DuplicateRequestId(LocalProtocolError):
    """``add()`` of an id that is already in flight; no ADD was sent (``ECP-REQ-8``)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"request id {request_id!r} is already in flight", clause="ECP-REQ-8",
                         got=request_id, request_id=request_id)


class InvalidDataParallelRank(LocalProtocolError):
    """A pinned ``data_parallel_rank`` that is not a connected engine (``ECP-DP-2``)."""

    def __init__(self, rank: int, connected_ranks: Sequence[int]) -> None:
        super().__init__(f"data_parallel_rank {rank} is not connected; connected ranks: "
                         f"{list(connected_ranks)}", clause="ECP-DP-2",
                         expected=list(connected_ranks), got=rank)
        self.rank = rank
        self.connected_ranks = list(connected_ranks)


class RequestStreamClosed(RemoteProtocolError):
    """An engine listed an in-flight id in ``finished_requests`` without ever
    sending its terminal output (``ECP-OUT-1``)."""

    def __init__(self, request_id: str, engine_rank: int) -> None:
        super().__init__(f"engine {engine_rank} finished {request_id!r} without a terminal output",
                         clause="ECP-OUT-1", got=request_id, request_id=request_id)
        self.engine_rank = engine_rank


# --------------------------------------------------------------------------- health
class ClientClosed(ClientError):
    """The client was shut down; every stream, waiter and later call gets this."""

    def __init__(self, message: str = "the engine-core client is shut down") -> None:
        super().__init__(message)


class EngineDeadError(RemoteProtocolError):
    """An engine sent ``ENGINE_CORE_DEAD`` (``ECP-OUT-8``, ``ECP-ROB-3``)."""

    def __init__(self, message: str = "an engine core sent ENGINE_CORE_DEAD") -> None:
        super().__init__(message, clause="ECP-OUT-8")


class UnexpectedDPControl(RemoteProtocolError):
    """``wave_complete``/``start_wave`` arrived on the client's output socket (``ECP-OUT-6``)."""

    def __init__(self, engine_index: int) -> None:
        super().__init__(f"engine {engine_index} sent a DP control message (wave_complete/start_wave) "
                         "to a frontend output socket", clause="ECP-OUT-6")
        self.engine_index = engine_index


class EngineDisconnected(RemoteProtocolError):
    """An engine's connection closed while the client was serving (``ECP-ROB-3``)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"an engine disappeared: {detail}", clause="ECP-ROB-3")


class EngineUnresponsive(RemoteProtocolError):
    """An engine with requests in flight went silent and did not answer a liveness
    probe within ``liveness_timeout_s`` (hung, stopped or partitioned; ``ECP-ROB-3``)."""

    def __init__(self, engine_rank: int, timeout_s: float) -> None:
        super().__init__(f"engine {engine_rank} has requests in flight but sent nothing and did not answer a "
                         f"liveness probe (is_sleeping) within {timeout_s:g} s", clause="ECP-ROB-3",
                         expected="an output or a utility reply", got="silence")
        self.engine_rank = engine_rank
        self.timeout_s = timeout_s


# --------------------------------------------------------------------------- utilities
class InconsistentUtilityResults(RemoteProtocolError):
    """Engines answered a consensus method differently (``ECP-UTIL-4``).

    ``values`` maps engine rank → that engine's answer.
    """

    def __init__(self, method: str, values: dict[int, Any]) -> None:
        super().__init__(f"engines returned different {method} results: {values}", clause="ECP-UTIL-4",
                         expected="one value from every engine", got=values)
        self.method = method
        self.values = values


class UtilityCallFailed(ClientError):
    """An engine answered a utility call with ``failure_message`` (``ECP-UTIL-3``).

    ``failures`` maps engine rank → failure message for every engine that failed;
    ``results`` holds the answers of engines that succeeded, so a caller can
    compensate a partially applied mutation (``ECP-UTIL-7``).
    """

    def __init__(self, method: str, failures: dict[int, str], results: dict[int, Any]) -> None:
        first_rank = min(failures)
        super().__init__(f"utility {method} failed on engine {first_rank}: {failures[first_rank]}",
                         clause="ECP-UTIL-3")
        self.method = method
        self.failures = failures
        self.results = results
        self.engine_rank = first_rank
        self.failure_message = failures[first_rank]


class UtilityResultDecode(RemoteProtocolError):
    """A utility result has the wrong type for its method (``ECP-UTIL-9``)."""

    def __init__(self, method: str, engine_rank: int, expected: str, value: Any) -> None:
        super().__init__(f"utility {method} on engine {engine_rank}: expected {expected}, got "
                         f"{type(value).__name__} {value!r:.80}", clause="ECP-UTIL-9",
                         expected=expected, got=type(value).__name__)
        self.method = method
        self.engine_rank = engine_rank
        self.value = value


class UtilityTimeout(ClientError):
    """Not every engine answered a utility call within ``utility_timeout_s``."""

    def __init__(self, method: str, missing_ranks: Sequence[int], timeout_s: float) -> None:
        super().__init__(f"utility {method} unanswered by rank(s) {list(missing_ranks)} after "
                         f"{timeout_s:g} s", clause="ECP-UTIL-7")
        self.method = method
        self.missing_ranks = list(missing_ranks)
