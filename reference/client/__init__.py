"""``ecp.reference.client``: the reference frontend side of the engine-core protocol.

An asyncio library (pyzmq asyncio sockets, the ``ecp.spec`` codec) built as
sans-IO pieces under a thin socket layer:

* :mod:`.handshake` — ``HandshakeOwner``: HELLO → INIT, registration, READY;
* :mod:`.registry` — in-flight requests, exactly-once stream endings;
* :mod:`.router` — pinning and least-loaded routing;
* :mod:`.abort_coalescer` — ``AbortCoalescer`` (one ABORT per engine per drain);
* :mod:`.aggregation` — ``UtilityAggregation``, THE per-method result table;
* :mod:`.health` — sticky first error; :mod:`.errors` — typed errors;
* :mod:`.client` — ``EngineCoreClient``, which owns :mod:`.lifecycle` (ADD, ABORT),
  :mod:`.dispatch` (the output loop) and :mod:`.utilities` (UTILITY calls);
  :mod:`.stream` — ``RequestStream``; :mod:`.stats` — ``ClientStats``.

Public API (stable; see ``docs/client.md``)::

    config = ClientConfig(engine_count=2)
    client = EngineCoreClient(config)
    await client.bind()                      # engines connect to client.handshake_address
    await client.wait_ready()                # or: client = await EngineCoreClient.start(config)
    stream = await client.add(request)       # RequestStream: async iterator of EngineCoreOutput
    async for out in stream: ...
    await stream.aclose(cause="stop_string_matched")
    await client.abort(["id"]); await client.abort_all()
    await client.call_utility("is_sleeping")  # or client.is_sleeping(), sleep(), wake_up(), ...
    await client.notify_kv_transfer_request_rejected(request_id, kv_transfer_params)
    client.healthy; client.error; client.stats
    await client.shutdown()
"""

from .abort_coalescer import MAX_DRAIN, AbortCause, AbortCoalescer
from .aggregation import UTILITY_RULES, MethodRule, Rule, UtilityAggregation
from .client import EngineCoreClient
from .config import ClientConfig
from .errors import (
    ClientClosed, ClientError, DuplicateRequestId, EngineDeadError, EngineDisconnected, EngineUnresponsive,
    HandshakeTimeout,
    InconsistentEngines, InconsistentUtilityResults, InvalidDataParallelRank, RequestStreamClosed,
    UnexpectedDPControl, UnexpectedEngineIdentity, UtilityCallFailed, UtilityResultDecode, UtilityTimeout,
)
from .handshake import HandshakeOwner, HandshakeResult
from .health import Health
from .registry import RequestRegistry
from .router import Router
from .stats import ClientStats
from .stream import RequestStream

__all__ = [name for name in dir() if not name.startswith("_")]
