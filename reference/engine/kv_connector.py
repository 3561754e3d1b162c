"""The reference KV connector for prefill/decode disaggregation (sans-IO).

It implements the one hook the protocol makes observable, ``request_finished``:

* **producer** (prefill engine): a request whose ``kv_transfer_params`` say
  ``do_remote_decode`` finishes normally → its KV blocks stay *pinned* under a
  lease (default 480 s, NIXL's abort timeout) and its terminal output carries
  ``kv_transfer_params = {do_remote_prefill: true, do_remote_decode: false,
  remote_engine_id, remote_block_ids, remote_host, remote_port,
  remote_request_id, tp_size}``. The blocks are freed when the consumer's
  notice arrives on the side channel, or when the lease expires.
* **consumer** (decode engine): a request whose params say
  ``do_remote_prefill`` is finished or aborted, including by
  ``abort_immediately`` → the connector queues a ``free`` notice for the
  producer named by ``remote_host``/``remote_port``, once per producer transfer
  (address, ``remote_request_id``, ``remote_engine_id``) even when two requests
  name it (refused while paused, then announced by the frontend's rejection
  notice); admitting a new request that names it makes it a new transfer.

Side-channel message (msgpack map, one frame, PUSH → PULL):
``{"type": "free", "request_id": str, "engine_id": str}``. The address is
``tcp://{remote_host}:{remote_port}``, or ``remote_host`` itself when it is an
``ipc://`` address. The IO layer (:mod:`.server`) moves the notices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Lease:
    request_id: str
    blocks: list[int]
    deadline: float


@dataclass
class Notice:
    """A notice for a producer: send ``payload`` to ``address``."""

    address: str
    payload: dict[str, Any]


@dataclass
class ConnectorStats:
    pinned_requests: int = 0
    pinned_blocks: int = 0
    pinned_blocks_total: int = 0
    freed_blocks_total: int = 0
    freed_by_notice: int = 0
    freed_by_expiry: int = 0
    freed_by_reset: int = 0
    notices_sent: int = 0
    notices_received: int = 0
    unknown_notices: int = 0


def side_channel_address(remote_host: str, remote_port: int | None) -> str:
    if remote_host.startswith(("ipc://", "tcp://", "inproc://")):
        return remote_host
    return f"tcp://{remote_host}:{remote_port}"


@dataclass
class ReferenceKVConnector:
    """Producer and/or consumer state of one engine.

    ``free_blocks`` is called with the block ids of a lease that ends.
    ``host``/``port`` are where this engine's side channel listens (producer).
    """

    engine_id: str
    role: str
    free_blocks: Callable[[list[int]], None]
    host: str | None = None
    port: int | None = None
    lease_s: float = 480.0
    clock: Callable[[], float] = time.monotonic
    leases: dict[str, Lease] = field(default_factory=dict)
    outbox: list[Notice] = field(default_factory=list)
    stats: ConnectorStats = field(default_factory=ConnectorStats)
    #: ids already notified, so a request that ends twice (abort racing a finish) notifies once;
    #: a bounded window (oldest forgotten first) so a long-running consumer does not grow forever
    _notified: dict[str, None] = field(default_factory=dict)
    #: notices already sent, by (address, request id, engine id): a producer's transfer is freed
    #: once even when two requests name it (a request refused while paused, then the frontend's
    #: rejection notice for it); the same bounded window
    _sent: dict[tuple[str, str, str], None] = field(default_factory=dict)
    notified_memory: int = 65536

    @property
    def is_producer(self) -> bool:
        return self.role in ("producer", "both")

    @property
    def is_consumer(self) -> bool:
        return self.role in ("consumer", "both")

    # -- the hook -----------------------------------------------------------
    def request_finished(self, request_id: str, params: dict[str, Any] | None, blocks: list[int],
                         *, aborted: bool) -> tuple[bool, dict[str, Any] | None]:
        """Called once when a request ends (finish, abort, abort_immediately).

        Returns ``(keep_blocks, kv_transfer_params_for_output)``. With
        ``keep_blocks`` the connector owns ``blocks`` and frees them later.
        """
        if not params:
            return False, None
        if self.is_consumer and params.get("do_remote_prefill"):
            self._notify_producer(request_id, params)
        if self.is_producer and params.get("do_remote_decode") and not aborted and blocks:
            stale = self.leases.pop(request_id, None)
            if stale is not None:  # the id was reused before its consumer came: the old blocks go back
                self._release(stale)
                self.stats.freed_by_reset += len(stale.blocks)
            self.leases[request_id] = Lease(request_id, list(blocks), self.clock() + self.lease_s)
            self.stats.pinned_requests = len(self.leases)
            self.stats.pinned_blocks += len(blocks)
            self.stats.pinned_blocks_total += len(blocks)
            return True, {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_engine_id": self.engine_id,
                "remote_block_ids": list(blocks),
                "remote_host": self.host,
                "remote_port": self.port,
                "remote_request_id": request_id,
                "tp_size": 1,
            }
        return False, None

    def _notice(self, request_id: str, params: dict[str, Any]) -> Notice | None:
        """The ``free`` notice a consumer request with these params owes its producer."""
        host = params.get("remote_host")
        if not isinstance(host, str):
            return None
        rid = params.get("remote_request_id") or request_id
        return Notice(side_channel_address(host, params.get("remote_port")), {
            "type": "free", "request_id": str(rid), "engine_id": str(params.get("remote_engine_id", "")),
        })

    @staticmethod
    def _key(notice: Notice) -> tuple[str, str, str]:
        return notice.address, notice.payload["request_id"], notice.payload["engine_id"]

    def _remember(self, memory: dict, key: Any) -> None:
        memory[key] = None
        if len(memory) > self.notified_memory:
            del memory[next(iter(memory))]

    def _notify_producer(self, request_id: str, params: dict[str, Any]) -> None:
        notice = self._notice(request_id, params)
        if notice is None or request_id in self._notified:
            return
        self._remember(self._notified, request_id)
        key = self._key(notice)
        if key in self._sent:
            return
        self._remember(self._sent, key)
        self.outbox.append(notice)
        self.stats.notices_sent += 1

    def forget(self, request_id: str, params: dict[str, Any] | None = None) -> None:
        """Drop per-request memory once a request id may be reused. ``params``: those of a
        newly admitted request, whose producer transfer is then a new one and notified again
        when it ends (a rejection notice, ``abort_immediately``, passes none: it names a
        transfer that may already have been freed)."""
        self._notified.pop(request_id, None)
        if params and self.is_consumer and params.get("do_remote_prefill"):
            notice = self._notice(request_id, params)
            if notice is not None:
                self._sent.pop(self._key(notice), None)

    # -- producer side ------------------------------------------------------
    def on_notice(self, payload: Any) -> bool:
        """Handle a side-channel message; True when it freed a lease."""
        self.stats.notices_received += 1
        if not isinstance(payload, dict) or payload.get("type") != "free":
            self.stats.unknown_notices += 1
            return False
        lease = self.leases.pop(str(payload.get("request_id")), None)
        if lease is None:
            self.stats.unknown_notices += 1
            return False
        self._release(lease)
        self.stats.freed_by_notice += len(lease.blocks)
        return True

    def expire(self) -> int:
        """Free leases past their deadline; returns how many ended."""
        now = self.clock()
        done = [lease for lease in self.leases.values() if lease.deadline <= now]
        for lease in done:
            del self.leases[lease.request_id]
            self._release(lease)
            self.stats.freed_by_expiry += len(lease.blocks)
        return len(done)

    def next_deadline(self) -> float | None:
        return min((lease.deadline for lease in self.leases.values()), default=None)

    def reset(self) -> None:
        """Release every lease (``reset_prefix_cache(reset_connector=True)``)."""
        for lease in list(self.leases.values()):
            self._release(lease)
            self.stats.freed_by_reset += len(lease.blocks)
        self.leases.clear()
        self.stats.pinned_requests = 0

    def _release(self, lease: Lease) -> None:
        self.free_blocks(lease.blocks)
        self.stats.pinned_blocks -= len(lease.blocks)
        self.stats.freed_blocks_total += len(lease.blocks)
        self.stats.pinned_requests = len(self.leases)

    def snapshot(self) -> dict[str, Any]:
        s = self.stats
        return {
            "engine_id": self.engine_id, "role": self.role,
            "pinned_requests": len(self.leases), "pinned_blocks": s.pinned_blocks,
            "pinned_blocks_total": s.pinned_blocks_total, "freed_blocks_total": s.freed_blocks_total,
            "freed_by_notice": s.freed_by_notice, "freed_by_expiry": s.freed_by_expiry,
            "freed_by_reset": s.freed_by_reset, "notices_sent": s.notices_sent,
            "notices_received": s.notices_received, "unknown_notices": s.unknown_notices,
        }
