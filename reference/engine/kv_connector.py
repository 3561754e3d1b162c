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
``ipc://``, ``tcp://`` or ``inproc://`` address. The IO layer (:mod:`.server`) moves the notices.

The address comes from the request, so from whoever wrote it (``ECP-SEC-4``): a consumer
connects only to producers its :class:`ProducerAllowList` names (``--kv-producer``; by default
only this engine's own side channel). :meth:`ReferenceKVConnector.producer_refusal` says why a
request's producer is refused, and the connector never queues a notice for one.
"""

from __future__ import annotations

import ipaddress
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable


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


#: a host name a tcp address may carry: letters, digits, dots and dashes (no ``;``, which ZeroMQ
#: reads as a source-address prefix, no ``*``, no interface names)
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")


def _tcp_parts(rest: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[V6]:PORT``) of a tcp address, or None when it is anything else."""
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            return str(ipaddress.IPv6Address(host)), int(port)
        except ValueError:
            return None
    try:
        return str(ipaddress.IPv4Address(host)), int(port)
    except ValueError:
        pass
    return (host.lower(), int(port)) if _HOSTNAME_RE.match(host) else None


def _ipc_path(rest: str) -> str | None:
    """The absolute, normalised path of an ``ipc://`` address, or None (relative, ``..``, empty)."""
    if not rest.startswith("/") or os.path.normpath(rest) != rest or "\0" in rest:
        return None
    return rest


class ProducerAllowList:
    """The KV producers a consumer may connect to (``ECP-SEC-4``). Entries (``--kv-producer``):

    * ``tcp://HOST:PORT`` or ``HOST:PORT``: that address only (a host name matches that same name,
      never what it resolves to: nothing is resolved);
    * ``NETWORK/PREFIX``, optionally ``tcp://``-prefixed (``10.0.0.0/8``, ``::1/128``): any port of
      any IP address in the network;
    * ``ipc:///DIR/`` (ending in ``/``): any ipc path inside ``DIR``; ``ipc:///PATH``: that path;
    * ``inproc://NAME``: that name.

    An address is allowed when an entry matches it; one that does not parse as a plain address
    (a ``;`` source prefix, a wildcard, a relative or ``..`` ipc path) matches nothing.
    """

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.entries: list[str] = []
        self._tcp: set[tuple[str, int]] = set()
        self._networks: list[Any] = []
        self._ipc_files: set[str] = set()
        self._ipc_dirs: list[str] = []
        self._inproc: set[str] = set()
        for entry in entries:
            self.add(entry)

    def add(self, entry: str) -> None:
        """Add one entry; ``ValueError`` naming it when it is none of the forms above."""
        text = entry.strip()
        if text.startswith("ipc://"):
            path = text[6:]
            is_dir = path.endswith("/") and len(path) > 1
            norm = _ipc_path(path.rstrip("/") if is_dir else path)
            if norm is None:
                raise ValueError(f"--kv-producer {entry!r}: an ipc entry needs an absolute path without '..'")
            if is_dir:
                self._ipc_dirs.append(norm.rstrip("/") + "/")
            else:
                self._ipc_files.add(norm)
        elif text.startswith("inproc://"):
            if len(text) == 9:
                raise ValueError(f"--kv-producer {entry!r}: an inproc entry needs a name")
            self._inproc.add(text)
        else:
            rest = text[6:] if text.startswith("tcp://") else text
            if "/" in rest:
                try:
                    self._networks.append(ipaddress.ip_network(rest, strict=False))
                except ValueError:
                    raise ValueError(f"--kv-producer {entry!r}: not a network (NETWORK/PREFIX)") from None
            else:
                parts = _tcp_parts(rest)
                if parts is None:
                    raise ValueError(f"--kv-producer {entry!r}: expected tcp://HOST:PORT, HOST:PORT, "
                                     "NETWORK/PREFIX, ipc:///DIR/, ipc:///PATH or inproc://NAME")
                self._tcp.add(parts)
        self.entries.append(text)

    def allows(self, address: str) -> bool:
        """Whether a notice may be sent to ``address`` (a side-channel address as
        :func:`side_channel_address` builds it)."""
        if address.startswith("ipc://"):
            path = _ipc_path(address[6:])
            if path is None:
                return False
            return path in self._ipc_files or any(path.startswith(d) for d in self._ipc_dirs)
        if address.startswith("inproc://"):
            return address in self._inproc
        if not address.startswith("tcp://"):
            return False
        parts = _tcp_parts(address[6:])
        if parts is None:
            return False
        if parts in self._tcp:
            return True
        try:
            ip = ipaddress.ip_address(parts[0])
        except ValueError:
            return False
        return any(ip in net for net in self._networks)

    def __repr__(self) -> str:
        return f"ProducerAllowList({self.entries!r})"


@dataclass
class ReferenceKVConnector:
    """Producer and/or consumer state of one engine.

    ``free_blocks`` is called with the block ids of a lease that ends.
    ``host``/``port`` are where this engine's side channel listens (producer).
    ``producers``: where a consumer may send notices (``ECP-SEC-4``); none allows nothing.
    """

    engine_id: str
    role: str
    free_blocks: Callable[[list[int]], None]
    host: str | None = None
    port: int | None = None
    lease_s: float = 480.0
    producers: ProducerAllowList = field(default_factory=ProducerAllowList)
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

    def producer_refusal(self, params: dict[str, Any] | None) -> str | None:
        """Why a request with these params may not be admitted (``ECP-SEC-4``): it would make this
        consumer send a notice to a producer the allow-list does not name. None when it may."""
        if not params or not self.is_consumer or not params.get("do_remote_prefill"):
            return None
        host = params.get("remote_host")
        if not isinstance(host, str):
            return None  # no address: no notice is ever sent
        address = side_channel_address(host, params.get("remote_port"))
        if self.producers.allows(address):
            return None
        return (f"kv_transfer_params names the KV producer {address[:200]!r}, which this engine does not "
                "allow (its --kv-producer allow-list); no connection was made")

    def _notice(self, request_id: str, params: dict[str, Any]) -> Notice | None:
        """The ``free`` notice a consumer request with these params owes its producer (none for a
        producer the allow-list does not name: the engine connects only where it is allowed)."""
        host = params.get("remote_host")
        if not isinstance(host, str):
            return None
        address = side_channel_address(host, params.get("remote_port"))
        if not self.producers.allows(address):
            return None
        rid = params.get("remote_request_id") or request_id
        return Notice(address, {
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
