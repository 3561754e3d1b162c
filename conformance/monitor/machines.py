"""The validator built on the protocol machines (:mod:`ecp.spec.machine`) in recording mode.

For each engine rank the monitor runs both roles' machines, as the two peers
would if they checked each other:

* a :class:`~ecp.spec.machine.FrontendConnection` for that one rank judges what the
  engine sends (``receive``), and follows what the frontend sent (``send_raw``, which
  moves the machine without judging);
* an :class:`~ecp.spec.machine.EngineConnection` judges what the frontend sends
  (``receive``), and follows what the engine sent (``send_raw``).

Every violation either machine records is a finding, once, with its clause and
the request id where one is known (the machine's, or the message's only request). Messages from an engine whose
identity is not two bytes have no rank and are checked by the codec only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ecp.spec import engine_identity
from ecp.spec.profile import Profile, wire_codec
from ecp.spec.machine import (
    Abort, Add, CoordinatorReady, CoordinatorSubscribe, EngineConnection, EngineDead, EngineHello, EngineReady,
    FrontendConnection, Init, Outputs, Registration, StartWave, UtilityCall,
)

from .observed import HANDSHAKE, INPUT, OUTPUT, TO_ENGINE, Observed
from .validator import UNDECODABLE, CodecValidator, Finding, Verdict


def _socket_name(msg: Observed) -> str:
    if msg.socket in (INPUT, OUTPUT):
        return f"{msg.socket}[{msg.client if msg.client is not None else 0}]"
    return msg.socket


def _kind_and_message(event: Any) -> tuple[str, Any]:
    if isinstance(event, Outputs):
        return "outputs", event.outputs
    if isinstance(event, Add):
        return "add", event.request
    if isinstance(event, Abort):
        return "abort", list(event.request_ids)
    if isinstance(event, UtilityCall):
        return "utility", event.call
    if isinstance(event, StartWave):
        return "start_dp_wave", event.wave
    kind = {EngineHello: "hello", EngineReady: "ready", Registration: "ready_response", Init: "init",
            EngineDead: "engine_dead", CoordinatorSubscribe: "subscription",
            CoordinatorReady: "coordinator_ready"}.get(type(event), "unknown")
    return kind, None


def _request_ids(event: Any) -> list[str]:
    if isinstance(event, Add):
        return [event.request.request_id]
    if isinstance(event, Abort):
        return list(event.request_ids)
    if isinstance(event, Outputs):
        return [o.request_id for o in event.outputs.outputs]
    return []


def _with_request_id(finding: Finding, event: Any) -> Finding:
    """Name the request a finding concerns when the machine did not: the message's only
    request, or the only one of its requests the finding's text quotes."""
    if finding.request_id is not None:
        return finding
    ids = _request_ids(event)
    if len(ids) > 1:
        ids = [rid for rid in ids if repr(rid) in finding.message]
    if len(ids) != 1:
        return finding
    return Finding(finding.clause, finding.level, finding.message, ids[0], finding.detail)


@dataclass
class _Pair:
    frontend: FrontendConnection
    engine: EngineConnection
    identity: bytes


class MachineValidator:
    """See the module docstring."""

    name = "machines"

    def __init__(self, profile: Profile | None = None) -> None:
        """``profile``: the release both sides speak (vLLM 0.33's when ``None``)."""
        self._pairs: dict[int, _Pair] = {}
        self._wire = None if profile is None else wire_codec(profile)
        self._codec = CodecValidator() if profile is None else CodecValidator(decode=profile.codec.decode_frames)

    def _pair(self, rank: int) -> _Pair:
        pair = self._pairs.get(rank)
        if pair is None:
            pair = self._pairs[rank] = _Pair(FrontendConnection([rank], mode="record", codec=self._wire),
                                             EngineConnection(rank, mode="record", codec=self._wire),
                                             engine_identity(rank))
        return pair

    def feed(self, msg: Observed) -> Verdict:
        if msg.rank is None or not 0 <= msg.rank <= 0xFFFF:
            return self._codec.feed(msg)
        pair = self._pair(msg.rank)
        socket = _socket_name(msg)
        frames = list(msg.frames)
        routed = [pair.identity, *frames] if msg.socket in (HANDSHAKE, INPUT) else frames
        if msg.direction == TO_ENGINE:
            events = pair.engine.receive(socket, frames)
            pair.frontend.send_raw(socket, routed)
            found = self._take(pair.engine)
        else:
            events = pair.frontend.receive(socket, routed)
            found = self._take(pair.frontend)
            pair.engine.send_raw(socket, frames)
        if events and found:
            found = [_with_request_id(f, events[0]) for f in found]
        if events:
            kind, message = _kind_and_message(events[0])
        elif found:
            kind, message = UNDECODABLE, None
        else:  # frames the machines take no event from (an unsubscription, other XSUB data)
            kind, message = self._codec.feed(msg).kind, None
        return Verdict(kind, tuple(found), message)

    @staticmethod
    def _take(conn) -> list[Finding]:
        if not conn.violations:
            return []
        found = [Finding.from_error(v.error) for v in conn.violations]
        conn.violations.clear()
        return found

    def peer_gone(self, rank: int | None) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        return []

