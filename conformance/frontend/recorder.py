"""Every frame a scripted engine receives or sends, timestamped and decoded.

Cases read the record to judge the frontend, and wait on it: ``await
recorder.wait_for(predicate, timeout)`` wakes on every new frame, so no case
ever sleeps to synchronise. Frames that fail to decode are kept with their
typed :mod:`ecp.spec` error (a malformed frame from the frontend is evidence,
not a crash). Only the first :data:`MAX_UNDECODABLE` of those are kept per case;
the rest are counted, so a frontend flooding an engine with garbage costs the
harness bounded memory.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ecp.spec import EngineCoreRequest, ProtocolError, UtilityRequest

#: undecodable records kept as evidence per case; more are only counted
MAX_UNDECODABLE = 100


@dataclass
class FrameRecord:
    """One multipart message as an engine saw it.

    Attributes:
        t: ``time.monotonic()`` when it was received or sent.
        rank: the engine's global DP rank.
        direction: ``"in"`` (frontend → engine) or ``"out"``.
        channel: ``"handshake"``, ``"input"``, ``"output"`` or ``"coordinator"``.
        client_index: which input/output pair (``None`` on the handshake socket).
        frames: the raw frames.
        message: the decoded message (:mod:`ecp.spec` types), when it decoded.
        error: the :class:`~ecp.spec.ProtocolError` when it did not.
    """

    t: float
    rank: int
    direction: str
    channel: str
    client_index: int | None
    frames: list[bytes]
    message: Any = None
    error: ProtocolError | None = None


@dataclass
class Recorder:
    """The frames of one engine (or of every engine, when shared)."""

    records: list[FrameRecord] = field(default_factory=list)
    #: also called with every record (the run's transcript)
    sink: Callable[[FrameRecord], None] | None = None
    _changed: asyncio.Event | None = None
    #: undecodable records seen since the last clear(), kept or not
    undecodable: int = 0

    def append(self, record: FrameRecord) -> None:
        if record.error is not None:
            self.undecodable += 1
            if self.undecodable > MAX_UNDECODABLE:
                return  # counted, not kept: the first ones are the evidence
        self.records.append(record)
        if self.sink is not None:
            self.sink(record)
        if self._changed is not None:
            self._changed.set()

    def clear(self) -> None:
        self.records.clear()
        self.undecodable = 0

    async def wait_for(self, predicate: Callable[[], Any], timeout: float) -> Any:
        """Return ``predicate()`` once it is truthy; raise ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if self._changed is None:
                self._changed = asyncio.Event()
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    # -- views ---------------------------------------------------------------------
    def inputs(self) -> list[FrameRecord]:
        return [r for r in self.records if r.direction == "in" and r.channel == "input"]

    def adds(self, *, include_notices: bool = True) -> list[tuple[FrameRecord, EngineCoreRequest]]:
        out = []
        for r in self.inputs():
            if isinstance(r.message, EngineCoreRequest):
                if include_notices or not r.message.abort_immediately:
                    out.append((r, r.message))
        return out

    def add_ids(self) -> list[str]:
        return [req.request_id for _, req in self.adds(include_notices=False)]

    def aborts(self) -> list[tuple[FrameRecord, list[str]]]:
        return [(r, r.message) for r in self.inputs() if isinstance(r.message, list)]

    def aborted_ids(self) -> list[str]:
        return [rid for _, ids in self.aborts() for rid in ids]

    def utilities(self, method: str | None = None) -> list[tuple[FrameRecord, Any]]:
        return [(r, r.message) for r in self.inputs() if isinstance(r.message, UtilityRequest)
                and (method is None or r.message.method_name == method)]

    def decode_errors(self) -> list[FrameRecord]:
        return [r for r in self.records if r.direction == "in" and r.error is not None]
