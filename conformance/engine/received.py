"""What the engines sent after the handshake, indexed for the cases: outputs per request, utility
replies per call id, every outputs message as received, what reached the coordinator.

Every message is decoded and judged once, by the harness's protocol machine (recording mode);
this index keeps the machine's events. An undecodable message, a token id outside the
vocabulary and ENGINE_CORE_DEAD end the case at once (:class:`CaseFailure`, :class:`FailedClosed`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from ecp.spec import ENGINE_DEAD, EngineCoreOutput, EngineCoreOutputs, ProtocolError, UtilityOutput
from ecp.spec.machine import EngineDead, Outputs

from ..outcomes import CaseFailure, FailedClosed

#: where an outputs message carries its utility reply (a decode error there is ``ECP-UTIL-2``'s)
_UTILITY_OUTPUT_PATH = f"$[{EngineCoreOutputs.__struct_fields__.index('utility_output')}]"


def recorded_error(machine: Any, before: int) -> ProtocolError | None:
    """The first rule ``machine`` recorded since it held ``before`` violations (why a message gave no event)."""
    recorded = machine.violations[before:]
    return recorded[0].error if recorded else None


def decoded(machine: Any, events: list, before: int | None = None) -> Callable[[], Any]:
    """What the transcript shows for a message the machine read: its payload, or the error."""
    def shown() -> Any:
        for event in events:
            for name in ("outputs", "hello", "ready", "response", "init"):
                if hasattr(event, name):
                    return getattr(event, name)
            return event
        error = recorded_error(machine, before) if before is not None else None
        if error is not None:
            raise error
        return None
    return shown


@dataclass
class Seen:
    """One request output as the harness received it."""

    client: int
    engine_index: int
    output: EngineCoreOutput
    finished_requests: set[str] | None
    t: float


@dataclass
class Reply:
    client: int
    engine_index: int
    utility: UtilityOutput
    t: float


class ReceivedOutputs:
    """The index, as a part of :class:`~.harness_frontend.HarnessFrontend` (it uses the frontend's
    ``machine`` and ``transcript``)."""

    machine: Any
    transcript: Any

    def __init__(self) -> None:
        #: ENGINE_CORE_DEAD arrived: the engine is gone even where no process can be watched (--attach)
        self.engine_dead = False
        #: False: ENGINE_CORE_DEAD is kept in :attr:`messages` as ``(client, ENGINE_DEAD)`` instead of
        #: raising FailedClosed (a test that expects the engine to die inspects it afterwards)
        self.raise_on_engine_dead = True
        #: the vocabulary size of the engine's model, when the run was told it (``ECP-OUT-3``)
        self.vocab_size: int | None = None
        self.forget_received()
        self._last_output_at = 0.0
        #: (request id, when) of the first ADD sent, and seconds until its first output (the peer's pace)
        self._first_add: tuple[str, float] | None = None
        self.first_answer_s: float | None = None

    def forget_received(self) -> None:
        """Drop the output messages, utility replies and coordinator messages received so far, and
        the views of them, for a caller that plays an unrelated run on this launch next and judges
        only what comes after; the protocol machine keeps its state and its violations."""
        self.messages: list[tuple[int, EngineCoreOutputs]] = []
        #: every output message as received: (client, frames), for the cases that check the encoding
        self.raw_outputs: list[tuple[int, list[bytes]]] = []
        self.by_request: dict[str, list[Seen]] = {}
        self.replies: dict[int, list[Reply]] = {}
        self.coordinator_messages: list[EngineCoreOutputs] = []
        #: DP control messages (wave_complete/start_wave) that arrived on a client output socket
        self.dp_control_on_outputs: list[tuple[int, EngineCoreOutputs]] = []

    # ------------------------------------------------------------------ views
    def seen(self, rid: str) -> list[Seen]:
        return self.by_request.get(rid, [])

    def tokens(self, rid: str) -> list[int]:
        return [t for s in self.seen(rid) for t in s.output.new_token_ids]

    def terminals(self, rid: str) -> list[Seen]:
        return [s for s in self.seen(rid) if s.output.finish_reason is not None]

    # ------------------------------------------------------------------ receiving
    def _on_output(self, client: int, frames: list[bytes]) -> None:
        socket = f"output[{client}]"
        before = len(self.machine.violations)
        events = self.machine.receive(socket, frames)  # decoded and judged once, by the machine
        self.transcript.record("recv", socket, frames, decoded(self.machine, events, before))
        self.raw_outputs.append((client, frames))
        if not events:
            exc = recorded_error(self.machine, before)
            # a malformed utility reply breaks the utility clauses, not framing
            clause = "ECP-UTIL-2" if (getattr(exc, "field_path", None) or "").startswith(_UTILITY_OUTPUT_PATH) \
                else getattr(exc, "clause", "ECP-FRAME-2")
            raise CaseFailure(f"undecodable output message on {socket}: {exc}", clause=clause) from None
        [event] = events
        self._last_output_at = time.monotonic()
        if isinstance(event, EngineDead):
            self.engine_dead = True
            if not self.raise_on_engine_dead:
                self.messages.append((client, ENGINE_DEAD))
                return
            raise FailedClosed(f"the engine sent ENGINE_CORE_DEAD on {socket}")
        msg = event.outputs
        now = time.monotonic()
        self.messages.append((client, msg))
        if msg.is_dp_control:
            self.dp_control_on_outputs.append((client, msg))
        vocab = self.vocab_size
        for out in msg.outputs:
            if out.new_token_ids and (min(out.new_token_ids) < 0
                                      or (vocab is not None and max(out.new_token_ids) >= vocab)):
                bad = [t for t in out.new_token_ids if t < 0 or (vocab is not None and t >= vocab)]
                raise CaseFailure(f"rank {msg.engine_index} sent token id(s) {bad[:5]} for {out.request_id} on "
                                  f"{socket}; a token id t is 0 <= t < V"
                                  + (f" (V = {vocab}, --engine-vocab-size)" if vocab is not None else ""),
                                  clause="ECP-OUT-3")
            self.by_request.setdefault(out.request_id, []).append(
                Seen(client, msg.engine_index, out, msg.finished_requests, now))
            if self.first_answer_s is None and self._first_add is not None and out.request_id == self._first_add[0]:
                self.first_answer_s = now - self._first_add[1]
        if msg.utility_output is not None:
            self.replies.setdefault(msg.utility_output.call_id, []).append(
                Reply(client, msg.engine_index, msg.utility_output, now))

    def _on_coordinator_output(self, frames: list[bytes]) -> None:
        before = len(self.machine.violations)
        events = self.machine.receive("coordinator_output", frames)
        self.transcript.record("recv", "coordinator_output", frames, decoded(self.machine, events, before))
        if not events:
            error = recorded_error(self.machine, before)
            raise CaseFailure(f"undecodable message to the coordinator: {error}",
                              clause=getattr(error, "clause", "ECP-FRAME-2")) from None
        for event in events:
            if isinstance(event, Outputs):
                self.coordinator_messages.append(event.outputs)
