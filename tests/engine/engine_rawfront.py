"""The engine tests' raw-frame frontend: the packaged harness frontend
(:class:`ecp.conformance.engine.harness_frontend.HarnessFrontend`) addressed by engine
rank, with the strict handshake and the per-client views the tests assert on.
Every wait is bounded."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import zmq

from ecp.conformance.engine.harness_frontend import Addresses, HarnessFrontend
from ecp.conformance.transcript import Transcript
from ecp.spec import (
    ENGINE_DEAD, EngineCoreOutputs, EngineCoreRequest, SamplingParams,
    encode_start_dp_wave, engine_identity, rank_of_identity,
)


def make_request(rid: str, prompt: list[int] | None = None, *, client_index: int = 0, priority: int = 0,
                 abort_immediately: bool = False, current_wave: int = 0, cache_salt: str | None = None,
                 **sampling: Any) -> EngineCoreRequest:
    return EngineCoreRequest(
        rid, list(prompt if prompt is not None else [20, 21, 22, 23]), None, SamplingParams(**sampling), None,
        time.time(), None, cache_salt, None, client_index=client_index, current_wave=current_wave,
        priority=priority, abort_immediately=abort_immediately)


class RawFrontend:
    def __init__(self, tmpdir: str, *, transport: str = "ipc", num_clients: int = 1,
                 coordinator: bool = False, vllm: str = "0.33") -> None:
        from ecp.conformance.engine.release_choice import ReleaseChoice

        def address(name: str) -> str:
            return f"ipc://{os.path.join(tmpdir, name)}" if transport == "ipc" else "tcp://127.0.0.1:*"

        self.ctx = zmq.Context()
        self.h = HarnessFrontend(
            self.ctx, Addresses(address("hs"), [address(f"in{i}") for i in range(num_clients)],
                                [address(f"out{i}") for i in range(num_clients)],
                                (address("cin"), address("cout")) if coordinator else None),
            engine_count=0, start_index=0,
            transcript=Transcript(max_entries=0),  # nothing reads it: keep the receive path as lean as before
            release=ReleaseChoice(vllm))
        self.h.raise_on_engine_dead = False  # tests assert on ENGINE_CORE_DEAD via dead()
        self.h.evidence.gate_delay_s = 0.0
        self.handshake_address = self.h.addresses.handshake
        self.outputs = self.h.outputs

    def close(self) -> None:
        self.h.close()
        self.ctx.destroy(linger=0)

    # ------------------------------------------------------------------ handshake
    def handshake(self, ranks: list[int], timeout: float = 20.0) -> None:
        """Run the frontend side for ``ranks`` until each sent its ready payload(s) and READY."""
        assert ranks == list(range(min(ranks), min(ranks) + len(ranks))), ranks
        self.h.engine_count, self.h.start_index = len(ranks), min(ranks)
        self.h.run_handshake(timeout)
        records = self.h.evidence.records
        assert sorted(records) == sorted(engine_identity(r) for r in ranks), [i.hex() for i in records]
        for rec in records.values():
            assert rec.hello is not None and rec.ready is not None, rec
            assert sorted(rec.ready_payloads) == list(range(len(self.h.inputs))), rec
            assert not any(isinstance(p, str) for p in rec.ready_payloads.values()), rec

    @property
    def hellos(self) -> dict[int, Any]:
        return {r.rank: r.hello for r in self.h.evidence.records.values()}

    @property
    def readies(self) -> dict[int, Any]:
        return {r.rank: r.ready for r in self.h.evidence.records.values()}

    @property
    def ready_payloads(self) -> dict[tuple[int, int], Any]:
        return {(r.rank, c): p for r in self.h.evidence.records.values() for c, p in r.ready_payloads.items()}

    @property
    def order(self) -> list[tuple[str, int]]:
        """Handshake events (HELLO/READY with the rank, SUB with its count), for ordering checks."""
        return [(kind, who if kind == "SUB" else rank_of_identity(who)) for kind, who in self.h.evidence.handshake_events]

    # ------------------------------------------------------------------ sending
    def _engine(self, rank: int) -> int:
        return self.h.route.index(engine_identity(rank))

    def send(self, rank: int, frames: list[bytes], client: int = 0) -> None:
        self.h.send_raw(frames, self._engine(rank), client)

    def add(self, rank: int, req: EngineCoreRequest, client: int = 0) -> None:
        self.send(rank, self.h.codec.encode_add(req), client)

    def abort(self, rank: int, ids: list[str], client: int = 0) -> None:
        self.send(rank, self.h.codec.encode_abort(ids), client)

    def start_wave(self, wave: int, exclude: int | None = None) -> None:
        self.h.coord_pub.send_multipart(encode_start_dp_wave(wave, exclude))

    def call(self, rank: int, method: str, args: list | tuple = (), client: int = 0,
             timeout: float = 10.0) -> Any:
        """Send a UTILITY and return the UtilityOutput ``rank`` answered it with on ``client``'s output."""
        cid = self.h.send_utility(method, args, engine=self._engine(rank), client=client)

        def reply():
            return next((r for r in self.h.replies.get(cid, [])
                         if r.engine_index == rank and r.client == client), None)

        msg = self.pump(reply, timeout=timeout)
        assert msg is not None, f"no reply to {method}"
        return msg.utility

    def value(self, rank: int, method: str, args: list | tuple = (), client: int = 0, timeout: float = 10.0) -> Any:
        out = self.call(rank, method, args, client, timeout)
        assert out.failure_message is None, out.failure_message
        return out.result.value

    def poll_value(self, rank: int, method: str, pred: Callable[[Any], bool], args: list | tuple = (),
                   timeout: float = 10.0) -> Any:
        """Call ``method`` until ``pred(result)`` holds; returns the last result.
        Each round trip paces the loop; the whole wait is bounded by ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.value(rank, method, args, timeout=max(0.1, deadline - time.monotonic()))
            if pred(value) or time.monotonic() >= deadline:
                return value
            self.pump(lambda: False, timeout=0.005)

    # ------------------------------------------------------------------ receiving
    def pump(self, until: Callable[[], Any], timeout: float = 10.0, client: int | None = None) -> Any:
        """Receive until ``until()`` is truthy (returned) or ``timeout`` passes (``None``)."""
        deadline = time.monotonic() + timeout
        while True:
            got = until()
            if got:
                return got
            if time.monotonic() >= deadline:
                return None
            self.h.pump(deadline)

    @property
    def messages(self) -> list[list[Any]]:
        """Decoded output messages per client, in arrival order."""
        per_client: list[list[Any]] = [[] for _ in self.h.outputs]
        for client, msg in self.h.messages:
            per_client[client].append(msg)
        return per_client

    @property
    def coord_messages(self) -> list[EngineCoreOutputs]:
        return self.h.coordinator_messages

    def quiet(self, seconds: float = 0.2) -> None:
        """Receive for ``seconds`` (used to show that nothing more arrives)."""
        self.h.observe(seconds)

    def outputs_for(self, rid: str, client: int = 0) -> list:
        return [s.output for s in self.h.seen(rid) if s.client == client]

    def finished(self, rid: str, client: int = 0):
        return next((o for o in self.outputs_for(rid, client) if o.finish_reason is not None), None)

    def wait_finished(self, rids: list[str], client: int = 0, timeout: float = 15.0) -> dict[str, Any]:
        done = self.pump(lambda: all(self.finished(r, client) for r in rids), timeout=timeout)
        assert done, f"not finished: {[r for r in rids if not self.finished(r, client)]}"
        return {r: self.finished(r, client) for r in rids}

    def tokens(self, rid: str, client: int = 0) -> list[int]:
        return [t for o in self.outputs_for(rid, client) for t in o.new_token_ids]

    def dead(self, client: int = 0) -> bool:
        return any(c == client and m is ENGINE_DEAD for c, m in self.h.messages)
