"""Deliberate faults of the reference client (``ecp serve --bug NAME``, ``ClientConfig.bugs``).

The client implements the protocol correctly; each fault here bends it at one
seam, chosen when the client is built, so no branch of ``client.py``,
``aggregation.py`` or ``abort_coalescer.py`` knows about faults:

- the auto-abort queue (``abort-one-per-request``: a coalescer that drains one
  id at a time, so every id gets its own ABORT message);
- the utility aggregation table (``first-engine-is-sleeping``,
  ``reset-prefix-cache-any``: which engines a call goes to, how replies combine);
- the handler of output frames (``ignore-engine-dead``: the sentinel is dropped
  before the client sees it; ``error-output-as-stop``: an ERROR terminal output
  is rewritten as a plain stop; ``unknown-output-fatal``,
  ``reserved-call-id-fatal``: an output for an untracked id, or a utility reply
  with a reserved negative call id, fails the client instead of being dropped).

Without faults every hook hands back what it was given, so a correct client
pays nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

import msgspec

from ecp.spec import (
    ENGINE_CORE_DEAD, EngineCoreOutputs, FinishReason, ProtocolError, RemoteProtocolError, decode_outputs,
    encode_outputs,
)

from ..faults import Fault, table
from .abort_coalescer import AbortCoalescer
from .aggregation import Rule, UtilityAggregation

log = logging.getLogger("ecp.client")

ABORT_ONE_PER_REQUEST = "abort-one-per-request"
FIRST_ENGINE_IS_SLEEPING = "first-engine-is-sleeping"
RESET_PREFIX_CACHE_ANY = "reset-prefix-cache-any"
IGNORE_ENGINE_DEAD = "ignore-engine-dead"
ERROR_OUTPUT_AS_STOP = "error-output-as-stop"
UNKNOWN_OUTPUT_FATAL = "unknown-output-fatal"
RESERVED_CALL_ID_FATAL = "reserved-call-id-fatal"

FAULTS: dict[str, Fault] = table(
    Fault(ABORT_ONE_PER_REQUEST, "ECP-ABORT-5", "no coalescing: one ABORT message per auto-aborted id"),
    Fault(FIRST_ENGINE_IS_SLEEPING, "ECP-UTIL-4",
          "consensus methods (is_sleeping ...) ask only the first engine (vLLM's Python DP behaviour)"),
    Fault(RESET_PREFIX_CACHE_ANY, "ECP-UTIL-5", "reset_prefix_cache aggregates with OR instead of AND"),
    Fault(IGNORE_ENGINE_DEAD, "ECP-ROB-3", "the ENGINE_CORE_DEAD sentinel is ignored instead of failing the client"),
    Fault(ERROR_OUTPUT_AS_STOP, "ECP-OUT-5",
          "an ERROR terminal output reaches the request as finish_reason stop, its RequestError lost"),
    Fault(UNKNOWN_OUTPUT_FATAL, "ECP-OUT-9",
          "an output for a request id the client does not track fails the client instead of being dropped"),
    Fault(RESERVED_CALL_ID_FATAL, "ECP-UTIL-12",
          "a utility reply with a reserved negative call id (-1, -2) fails the client instead of being dropped"),
)


class ClientFaults:
    """The faults a client runs with. ``names`` may hold other roles' faults (the
    frontend passes its whole ``--bug`` set); only this table's are kept."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n for n in names if n in FAULTS)

    def __bool__(self) -> bool:
        return bool(self.names)

    def coalescer(self, coalescer: AbortCoalescer) -> AbortCoalescer:
        """The auto-abort queue the client uses instead of ``coalescer``."""
        return _OneIdPerDrain() if ABORT_ONE_PER_REQUEST in self.names else coalescer

    def aggregation(self, aggregation: UtilityAggregation) -> UtilityAggregation:
        """The aggregation table the client uses instead of ``aggregation``."""
        bent = self.names & {FIRST_ENGINE_IS_SLEEPING, RESET_PREFIX_CACHE_ANY}
        return _BentAggregation(bent, aggregation.rules) if bent else aggregation

    def output_handler(self, handler: Callable[[list[bytes]], None]) -> Callable[[list[bytes]], None]:
        """The handler of every output message the client uses instead of ``handler``."""
        bent = self.names & {ERROR_OUTPUT_AS_STOP, UNKNOWN_OUTPUT_FATAL, RESERVED_CALL_ID_FATAL}
        if bent:
            handler = _MessageFaults(bent, handler)
        if IGNORE_ENGINE_DEAD not in self.names:
            return handler

        def ignoring_engine_dead(frames: list[bytes]) -> None:
            if len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD:
                log.warning("ignoring ENGINE_CORE_DEAD (fault %s)", IGNORE_ENGINE_DEAD)
                return
            handler(frames)

        return ignoring_engine_dead


class _MessageFaults:
    """Decodes each output message once more and bends it before the client's own handler.

    ``handler`` is the client's bound ``_on_output_frames``: the faults read the client's
    request registry and pending utility calls through it, and fail it the way a client
    that got the rule wrong would (through its own ``_fail``).
    """

    def __init__(self, names: frozenset[str], handler: Callable[[list[bytes]], None]) -> None:
        self.names = names
        self.handler = handler
        self.client: Any = getattr(handler, "__self__", None)

    def __call__(self, frames: list[bytes]) -> None:
        try:
            msg = decode_outputs(frames)
        except ProtocolError:
            msg = None
        if not isinstance(msg, EngineCoreOutputs):
            self.handler(frames)
            return
        client = self.client
        if UNKNOWN_OUTPUT_FATAL in self.names and client is not None:
            unknown = [o.request_id for o in msg.outputs if client._registry.get(o.request_id) is None]
            if unknown:
                client._fail(RemoteProtocolError(f"an output for request {unknown[0]!r}, which this client "
                                                 f"does not track (fault {UNKNOWN_OUTPUT_FATAL})",
                                                 clause="ECP-OUT-9", request_id=unknown[0]))
                return
        reply = msg.utility_output
        if RESERVED_CALL_ID_FATAL in self.names and client is not None and reply is not None \
                and reply.call_id < 0:
            client._fail(RemoteProtocolError(f"a utility reply with call id {reply.call_id}, which this "
                                             f"client never issued (fault {RESERVED_CALL_ID_FATAL})",
                                             clause="ECP-UTIL-12"))
            return
        if ERROR_OUTPUT_AS_STOP in self.names and any(o.finish_reason is FinishReason.ERROR for o in msg.outputs):
            outputs = [msgspec.structs.replace(o, finish_reason=FinishReason.STOP, error=None)
                       if o.finish_reason is FinishReason.ERROR else o for o in msg.outputs]
            frames = encode_outputs(msgspec.structs.replace(msg, outputs=outputs))
        self.handler(frames)


class _OneIdPerDrain(AbortCoalescer):
    def drain(self, take_owner: Callable[[str, Any], int | None], max_items: int = 1) -> dict[int, list[str]]:
        return super().drain(take_owner, max_items=1)


class _BentAggregation(UtilityAggregation):
    def __init__(self, faults: frozenset[str], rules: Mapping[str, Any]) -> None:
        super().__init__(rules)
        self.faults = faults

    def targets(self, method: str, ranks: tuple[int, ...]) -> tuple[int, ...]:
        if FIRST_ENGINE_IS_SLEEPING in self.faults and self.rule(method).rule is Rule.CONSENSUS:
            return ranks[:1]
        return super().targets(method, ranks)

    def combine(self, method: str, values: Mapping[int, Any]) -> Any:
        if RESET_PREFIX_CACHE_ANY in self.faults and method == "reset_prefix_cache" and values:
            return any(values.values())
        return super().combine(method, values)
