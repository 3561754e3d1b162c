"""Bounds on slow and numerous HTTP clients of ``ecp serve``, below the ASGI app.

uvicorn bounds a request's body (the app's 30 s, :mod:`.limits`) and an idle keep-alive
connection (``timeout_keep_alive``), but not the time a client takes to send a request's
headers: a connection that never finishes them is held until the client closes it, and a few
thousand such connections take every descriptor. :func:`limited_protocol` wraps uvicorn's HTTP
protocol class (h11 or httptools) with:

* a **header deadline**: a request's header section must be complete within
  ``header_timeout_s`` of the connection opening, or of the first byte of a later request on a
  kept-alive connection; else the connection is answered ``408`` and closed;
* a **cap per client** (by IP address) and a **cap in total** on open connections: a connection
  over either is answered ``503`` and closed at once, before anything of it is read.

Both protocol classes set ``self.cycle`` when a request's headers are complete, and that is all
the wrapper reads of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("ecp.serve")

#: descriptors left to everything but HTTP connections (engine sockets, files, the listener)
DESCRIPTOR_RESERVE = 256
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: connections one client address may hold: above a conformance burst (2,000 streams from one
#: harness) and any proxy's pool, below what would starve other clients of descriptors
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 4096


def default_max_connections() -> int:
    """The process's descriptor limit less :data:`DESCRIPTOR_RESERVE` (at least 64)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(64, soft - DESCRIPTOR_RESERVE)


@dataclass(frozen=True)
class HttpLimits:
    """``ecp serve --http-header-timeout``, ``--max-connections``, ``--max-connections-per-client``.

    ``max_connections`` None: :func:`default_max_connections`."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int | None = None
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT

    def __post_init__(self) -> None:
        if not self.header_timeout_s > 0:
            raise ValueError(f"the header timeout must be positive, got {self.header_timeout_s}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")
        if self.max_connections_per_client < 1:
            raise ValueError(f"max_connections_per_client must be at least 1, got {self.max_connections_per_client}")


@dataclass
class ConnectionGate:
    """Open connections, in total and per client address, and what the bounds refused."""

    max_total: int
    max_per_client: int
    total: int = 0
    per_client: dict[str, int] = field(default_factory=dict)
    refused_total: int = 0
    refused_per_client: int = 0
    header_timeouts: int = 0

    def admit(self, client: str) -> str | None:
        """Count a new connection from ``client``; the reason when a bound refuses it (not counted)."""
        if self.total >= self.max_total:
            self.refused_total += 1
            return f"the server holds its maximum of {self.max_total} connections"
        held = self.per_client.get(client, 0)
        if held >= self.max_per_client:
            self.refused_per_client += 1
            return f"this client holds its maximum of {self.max_per_client} connections"
        self.total += 1
        self.per_client[client] = held + 1
        return None

    def release(self, client: str) -> None:
        self.total -= 1
        held = self.per_client.get(client, 0) - 1
        if held > 0:
            self.per_client[client] = held
        else:
            self.per_client.pop(client, None)

    def snapshot(self) -> dict[str, int]:
        return {"open": self.total, "clients": len(self.per_client), "refused_total": self.refused_total,
                "refused_per_client": self.refused_per_client, "header_timeouts": self.header_timeouts}


def _answer(status: int, reason: str, message: str, kind: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode() + body


def limited_protocol(base: type, limits: HttpLimits, gate: ConnectionGate | None = None) -> type:
    """``base`` (uvicorn's ``H11Protocol`` or ``HttpToolsProtocol``) with the header deadline and
    the connection caps of ``limits``; ``gate`` counts for every connection of the server."""
    timeout = limits.header_timeout_s
    if gate is None:
        gate = ConnectionGate(limits.max_connections or default_max_connections(), limits.max_connections_per_client)
    shared = gate
    late = _answer(408, "Request Timeout", f"the request's headers did not arrive within {timeout:g} s",
                   "request_timeout")

    class Limited(base):  # type: ignore[misc, valid-type]
        gate = shared

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            peer = transport.get_extra_info("peername")
            self._ecp_client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            self._ecp_timer: asyncio.TimerHandle | None = None
            self._ecp_seen: Any = None
            why = shared.admit(self._ecp_client)
            self._ecp_admitted = why is None
            super().connection_made(transport)
            if why is not None:  # refused before anything of it is read
                transport.write(_answer(503, "Service Unavailable", why, "service_unavailable"))
                transport.close()
                return
            self._ecp_arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._ecp_disarm()
            if self._ecp_admitted:
                self._ecp_admitted = False
                shared.release(self._ecp_client)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and cycle is not self._ecp_seen:  # a request's headers are complete
                self._ecp_seen = cycle
                self._ecp_disarm()
            elif self._ecp_timer is None and (cycle is None or cycle.response_complete):
                self._ecp_arm()  # the first bytes of a kept-alive connection's next request

        def _ecp_arm(self) -> None:
            if not self.transport.is_closing():
                self._ecp_timer = self.loop.call_later(timeout, self._ecp_late)

        def _ecp_disarm(self) -> None:
            if self._ecp_timer is not None:
                self._ecp_timer.cancel()
                self._ecp_timer = None

        def _ecp_late(self) -> None:
            self._ecp_timer = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is not None and cycle is not self._ecp_seen:
                return  # completed meanwhile (data_received runs before this check)
            shared.header_timeouts += 1
            self.transport.write(late)
            self.transport.close()

    Limited.__name__ = Limited.__qualname__ = f"Limited{base.__name__}"
    return Limited
