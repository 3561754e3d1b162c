"""A small raw-frame frontend for engine tests: binds the handshake ROUTER, one
input ROUTER + output PULL per client and (optionally) a fake DP coordinator,
and speaks to engines only through ``ecp.spec``'s codec. Every wait is bounded."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, Callable

import zmq

from ecp.spec import (
    ENGINE_DEAD, EngineCoreOutputs, EngineCoreReadyResponse, EngineCoreRequest, EngineHandshakeMetadata,
    EngineZmqAddresses, Hello, Ready, SamplingParams, decode_handshake, decode_outputs,
    decode_ready_response, encode_abort, encode_add, encode_handshake, encode_start_dp_wave, encode_utility,
    engine_identity, rank_of_identity,
)

_ids = itertools.count(1)


def make_request(rid: str, prompt: list[int] | None = None, *, client_index: int = 0, priority: int = 0,
                 abort_immediately: bool = False, current_wave: int = 0, cache_salt: str | None = None,
                 **sampling: Any) -> EngineCoreRequest:
    return EngineCoreRequest(
        rid, list(prompt if prompt is not None else [20, 21, 22, 23]), None, SamplingParams(**sampling), None,
        time.time(), None, cache_salt, None, client_index=client_index, current_wave=current_wave,
        priority=priority, abort_immediately=abort_immediately)


class RawFrontend:
    def __init__(self, tmpdir: str, *, transport: str = "ipc", num_clients: int = 1,
                 coordinator: bool = False) -> None:
        self.ctx = zmq.Context()
        self.tmpdir = tmpdir
        self.transport = transport
        self._n = 0
        self.handshake_sock, self.handshake_address = self._bind(zmq.ROUTER, "hs")
        self.inputs, self.input_addresses, self.outputs, self.output_addresses = [], [], [], []
        for i in range(num_clients):
            s, a = self._bind(zmq.ROUTER, f"in{i}")
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.inputs.append(s)
            self.input_addresses.append(a)
            s, a = self._bind(zmq.PULL, f"out{i}")
            self.outputs.append(s)
            self.output_addresses.append(a)
        self.coord_pub = self.coord_pull = None
        self.coord_in = self.coord_out = None
        if coordinator:
            self.coord_pub, self.coord_in = self._bind(zmq.XPUB, "cin")
            self.coord_pub.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.coord_pull, self.coord_out = self._bind(zmq.PULL, "cout")
        self.messages: list[list[Any]] = [[] for _ in range(num_clients)]  # decoded, arrival order
        self.coord_messages: list[EngineCoreOutputs] = []
        self.hellos: dict[int, Hello] = {}
        self.readies: dict[int, Ready] = {}
        self.ready_payloads: dict[tuple[int, int], EngineCoreReadyResponse | None] = {}
        self.order: list[tuple[str, int]] = []  # handshake events, for ordering checks

    def _bind(self, kind: int, name: str) -> tuple[zmq.Socket, str]:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        if self.transport == "ipc":
            s.bind(f"ipc://{os.path.join(self.tmpdir, name)}")
        else:
            s.bind("tcp://127.0.0.1:*")
        return s, s.getsockopt_string(zmq.LAST_ENDPOINT)

    def close(self) -> None:
        self.ctx.destroy(linger=0)

    # ------------------------------------------------------------------ handshake
    def handshake(self, ranks: list[int], timeout: float = 20.0) -> None:
        """Run the frontend side for ``ranks`` until each sent its ready payload(s) and READY."""
        addresses = EngineZmqAddresses(self.input_addresses, self.output_addresses, self.coord_in,
                                       self.coord_out, None)
        init = encode_handshake(EngineHandshakeMetadata(addresses, {}))
        poller = zmq.Poller()
        poller.register(self.handshake_sock, zmq.POLLIN)
        for s in self.inputs:
            poller.register(s, zmq.POLLIN)
        if self.coord_pub is not None:
            poller.register(self.coord_pub, zmq.POLLIN)
        subscribed: set[bytes] = set()
        coord_ready_sent = self.coord_pub is None
        deadline = time.monotonic() + timeout
        want_regs = len(ranks) * len(self.inputs)
        while len(self.readies) < len(ranks) or len(self.ready_payloads) < want_regs:
            left = deadline - time.monotonic()
            assert left > 0, f"handshake timed out: hellos={list(self.hellos)} readies={list(self.readies)}"
            for sock, _ in poller.poll(int(left * 1000) + 1):
                if sock is self.handshake_sock:
                    ident, payload = sock.recv_multipart()
                    rank = rank_of_identity(ident)
                    assert rank in ranks
                    msg = decode_handshake(payload)
                    if isinstance(msg, Hello):
                        self.hellos[rank] = msg
                        self.order.append(("HELLO", rank))
                        sock.send_multipart([ident, init])
                    else:
                        self.readies[rank] = msg
                        self.order.append(("READY", rank))
                elif sock is self.coord_pub:
                    sub = sock.recv()
                    subscribed.add(sub)
                    self.order.append(("SUB", len(subscribed)))
                    # XPUB dedups nothing in verbose mode: one b"\x01" per engine
                    if not coord_ready_sent and sum(1 for o in self.order if o[0] == "SUB") >= len(ranks):
                        sock.send(b"READY")
                        coord_ready_sent = True
                else:
                    client = self.inputs.index(sock)
                    ident, payload = sock.recv_multipart()
                    rank = rank_of_identity(ident)
                    self.ready_payloads[(rank, client)] = decode_ready_response(payload)
                    self.order.append((f"REG{client}", rank))

    # ------------------------------------------------------------------ sending
    def send(self, rank: int, frames: list[bytes], client: int = 0) -> None:
        self.inputs[client].send_multipart([engine_identity(rank), *frames])

    def add(self, rank: int, req: EngineCoreRequest, client: int = 0) -> None:
        self.send(rank, encode_add(req), client)

    def abort(self, rank: int, ids: list[str], client: int = 0) -> None:
        self.send(rank, encode_abort(ids), client)

    def start_wave(self, wave: int, exclude: int | None = None) -> None:
        self.coord_pub.send_multipart(encode_start_dp_wave(wave, exclude))

    def call(self, rank: int, method: str, args: list | tuple = (), client: int = 0,
             timeout: float = 10.0) -> Any:
        """Send a UTILITY and return its UtilityOutput (other messages are logged)."""
        call_id = next(_ids) + 2**40
        self.send(rank, encode_utility(client, call_id, method, list(args)), client)
        msg = self.pump(lambda: self._find_reply(client, call_id, rank), timeout=timeout, client=client)
        assert msg is not None, f"no reply to {method}"
        return msg.utility_output

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

    def _find_reply(self, client: int, call_id: int, rank: int) -> EngineCoreOutputs | None:
        for m in self.messages[client]:
            if (isinstance(m, EngineCoreOutputs) and m.utility_output is not None
                    and m.utility_output.call_id == call_id and m.engine_index == rank):
                return m
        return None

    # ------------------------------------------------------------------ receiving
    def pump(self, until: Callable[[], Any], timeout: float = 10.0, client: int | None = None) -> Any:
        """Receive into :attr:`messages` until ``until()`` is truthy or ``timeout`` passes."""
        poller = zmq.Poller()
        for s in self.outputs:
            poller.register(s, zmq.POLLIN)
        if self.coord_pull is not None:
            poller.register(self.coord_pull, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            got = until()
            if got:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            for sock, _ in poller.poll(int(left * 1000) + 1):
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    msg = decode_outputs(frames)
                    if sock is self.coord_pull:
                        self.coord_messages.append(msg)
                    else:
                        self.messages[self.outputs.index(sock)].append(msg)

    def quiet(self, seconds: float = 0.2) -> None:
        """Receive for ``seconds`` (used to show that nothing more arrives)."""
        self.pump(lambda: False, timeout=seconds)

    def outputs_for(self, rid: str, client: int = 0) -> list:
        return [o for m in self.messages[client] if isinstance(m, EngineCoreOutputs)
                for o in m.outputs if o.request_id == rid]

    def finished(self, rid: str, client: int = 0):
        for o in self.outputs_for(rid, client):
            if o.finish_reason is not None:
                return o
        return None

    def wait_finished(self, rids: list[str], client: int = 0, timeout: float = 15.0) -> dict[str, Any]:
        done = self.pump(lambda: all(self.finished(r, client) for r in rids), timeout=timeout)
        assert done, f"not finished: {[r for r in rids if not self.finished(r, client)]}"
        return {r: self.finished(r, client) for r in rids}

    def tokens(self, rid: str, client: int = 0) -> list[int]:
        return [t for o in self.outputs_for(rid, client) for t in o.new_token_ids]

    def dead(self, client: int = 0) -> bool:
        return any(m is ENGINE_DEAD for m in self.messages[client])
