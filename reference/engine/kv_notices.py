"""The sockets that carry a KV consumer's ``free`` notices to producers, bounded.

A producer's address comes from a request's ``kv_transfer_params``
(``remote_host``/``remote_port``, :mod:`.kv_connector`): an HTTP client
chooses it. :class:`NoticeSockets` keeps one ZeroMQ PUSH socket per producer
address so that notices to the same producer reuse its connection, but at most
``cap`` of them: the least recently used one is closed when another address
needs a socket. Creating, connecting and sending all happen inside the error
handling, so an address that cannot be reached, or a process out of file
descriptors, costs one logged notice, never the engine (``ECP-ROB-1``).

A notice still queued on a socket closed by eviction is dropped; the producer's
lease (``--kv-lease-s``) frees its blocks instead. Evicting means more than
``cap`` producers were named recently, which a deployment with a handful of
prefill nodes never does.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import msgspec
import zmq

from .kv_connector import Notice

log = logging.getLogger("ecp.engine")

#: Producer sockets kept open at once. Each costs about two file descriptors (its TCP
#: connection and its mailbox), so the bound keeps an engine far below ``ulimit -n``.
DEFAULT_CAP = 64
#: How long a closed socket may still flush what it queued (ms); only at shutdown.
CLOSE_LINGER_MS = 1000


class NoticeSockets:
    """PUSH sockets to KV producers, keyed by address, least recently used evicted past ``cap``.

    The engine's IO thread owns it: :meth:`send` each notice of the connector's outbox,
    :meth:`close` once when the engine stops (before ``Context.term()``)."""

    def __init__(self, ctx: zmq.Context, cap: int = DEFAULT_CAP) -> None:
        if cap < 1:
            raise ValueError(f"cap must be at least 1, got {cap}")
        self._ctx = ctx
        self.cap = cap
        self._socks: OrderedDict[str, zmq.Socket] = OrderedDict()
        #: counters for tests and the audit: sockets opened, closed by eviction, notices not sent
        self.opened = 0
        self.evicted = 0
        self.failed = 0

    def __len__(self) -> int:
        return len(self._socks)

    def send(self, notice: Notice) -> bool:
        """Send one notice without blocking; False (logged) when it could not be sent."""
        address = notice.address
        rid = notice.payload.get("request_id")
        try:
            sock = self._socket(address)
            sock.send(msgspec.msgpack.encode(notice.payload), zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            # the address came from a request's kv_transfer_params: bad input, never fatal
            self.failed += 1
            log.warning("[ECP-ROB-1] KV side-channel notice for %s to %r not sent: %s", rid, address, exc)
            return False
        return True

    def _socket(self, address: str) -> zmq.Socket:
        sock = self._socks.get(address)
        if sock is not None:
            self._socks.move_to_end(address)
            return sock
        sock = self._ctx.socket(zmq.PUSH)
        try:
            sock.setsockopt(zmq.LINGER, CLOSE_LINGER_MS)
            sock.connect(address)
        except zmq.ZMQError:
            sock.close(0)
            raise
        # evicted only once the new socket exists: an address that cannot be used costs no other
        while len(self._socks) >= self.cap:
            # linger 0: the evicted socket's descriptors go now, not after a flush to a
            # producer that may not exist (the lease covers a notice lost this way)
            _, old = self._socks.popitem(last=False)
            old.close(0)
            self.evicted += 1
        self._socks[address] = sock
        self.opened += 1
        return sock

    def close(self) -> None:
        """Close every socket (each may flush for :data:`CLOSE_LINGER_MS`)."""
        while self._socks:
            _, sock = self._socks.popitem(last=False)
            sock.close()
