"""The API server processes of one ``ecp serve --api-server-count N`` reach each other here.

Each process is its own engine-core client (its own ``client_index``), so a
request is known to the one process that admitted it. Two HTTP routes must
nevertheless see every process: the abort APIs (an id, or "all", may name
requests admitted elsewhere; their own process finalises them and sends the
ABORT, ``ECP-ABORT-8``) and ``/load``. Each process binds a ZeroMQ ROUTER on
a local ipc path (:attr:`PeerLink.addresses`) and answers:

* ``{"op": "abort", "ids": [...] | null}`` → ``{"results": [...], "not_found": [...]}``
  (:meth:`~.serving.Frontend.abort` in that process);
* ``{"op": "load"}`` → ``{"load": n}`` (requests in flight there).

A peer that does not answer within :data:`PEER_TIMEOUT_S` makes the call
fail with :class:`PeerUnavailable` (the route answers 500): a process that
stopped answering is not silently skipped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

import msgspec
import zmq
import zmq.asyncio

log = logging.getLogger("ecp.serve")

#: Bound on one peer's answer.
PEER_TIMEOUT_S = 10.0

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class PeerUnavailable(Exception):
    """Another API server process did not answer (it stopped or hangs)."""


class PeerLink:
    """This process's end: serves the others' calls, and calls them.

    ``addresses[i]`` is process ``i``'s ROUTER; ``index`` is this process.
    """

    def __init__(self, index: int, addresses: Sequence[str], frontend: Any) -> None:
        if not 0 <= index < len(addresses):
            raise ValueError(f"index {index} is not one of {len(addresses)} API servers")
        self.index = index
        self.addresses = list(addresses)
        self.frontend = frontend
        self._ctx = zmq.asyncio.Context()
        self._router: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._answers: set[asyncio.Task[None]] = set()  # held so that none is collected mid-answer

    @property
    def others(self) -> list[str]:
        return [a for i, a in enumerate(self.addresses) if i != self.index]

    async def start(self) -> None:
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self.addresses[self.index])
        self._router = sock
        self._task = asyncio.ensure_future(self._serve())

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._answers) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._router = None
        self._ctx.destroy(0)

    # ------------------------------------------------------------------ serving the others
    async def _serve(self) -> None:
        assert self._router is not None
        while True:
            frames = await self._router.recv_multipart()
            if len(frames) != 2:
                log.warning("API server peer link: ignoring a message of %d frames", len(frames))
                continue
            task = asyncio.ensure_future(self._answer(frames[0], frames[1]))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)

    async def _answer(self, identity: bytes, payload: bytes) -> None:
        try:
            call = _decode(payload)
            op = call.get("op") if isinstance(call, dict) else None
            if op == "abort":
                ids = call.get("ids")
                results, not_found = await self.frontend.abort(list(ids) if ids is not None else None)
                reply: dict[str, Any] = {"results": results, "not_found": not_found}
            elif op == "load":
                reply = {"load": len(self.frontend.index)}
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as exc:  # answered, never raised into the loop
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        if self._router is not None:
            await self._router.send_multipart([identity, _encode(reply)])

    # ------------------------------------------------------------------ calling the others
    async def _call(self, address: str, call: dict[str, Any]) -> dict[str, Any]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(address)
            await sock.send(_encode(call))
            if not await sock.poll(int(PEER_TIMEOUT_S * 1000)):
                raise PeerUnavailable(f"API server at {address} did not answer {call['op']!r} "
                                      f"within {PEER_TIMEOUT_S:g} s")
            reply = _decode(await sock.recv())
        finally:
            sock.close(0)
        if not isinstance(reply, dict) or "error" in reply:
            raise PeerUnavailable(f"API server at {address} failed {call['op']!r}: "
                                  f"{reply.get('error') if isinstance(reply, dict) else reply!r}")
        return reply

    async def abort(self, ids: list[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
        """Abort ``ids`` (``None`` = all) in every other process. Returns their partial
        results and the ids that none of them knows."""
        replies = await asyncio.gather(*(self._call(a, {"op": "abort", "ids": ids}) for a in self.others))
        results = [r for reply in replies for r in reply["results"]]
        if ids is None:
            return results, []
        unknown = set(ids)
        for reply in replies:
            unknown &= set(reply["not_found"])
        return results, [i for i in ids if i in unknown]

    async def load(self) -> int:
        """Requests in flight in the other processes."""
        replies = await asyncio.gather(*(self._call(a, {"op": "load"}) for a in self.others))
        return sum(int(r["load"]) for r in replies)
