"""The harness frontend's sockets: everything a frontend binds for one launch, by protocol name.

It binds the handshake ROUTER, one input ROUTER and output PULL per client and, when the harness
also plays the DP coordinator, the coordinator's XPUB and PULL (high-water marks off, as vLLM sets
them; ``ROUTER_MANDATORY``, so that a send to an engine that went away fails instead of vanishing).
It polls them (bounded per socket, so that a flooding engine cannot starve a deadline) and watches
the input ROUTERs' connections: an engine that closes one after the handshake stopped reading.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

from ecp.spec.peer.zmq_io import stop_monitors

from ..transcript import Transcript


@dataclass
class Addresses:
    handshake: str
    inputs: list[str]
    outputs: list[str]
    #: (coordinator_input XPUB, coordinator_output PULL) when the harness also plays the DP coordinator
    coordinator: tuple[str, str] | None = None


_MONITOR_IDS = itertools.count(1)
#: messages read from one socket per poll at most (a flooding engine must not starve the deadline checks)
RECV_BATCH = 1000


class HarnessSockets:
    """The sockets of one launch. ``addresses`` are what to bind (tcp port 0 allowed);
    :attr:`addresses` then holds what they resolved to, which INIT carries."""

    def __init__(self, ctx: zmq.Context, addresses: Addresses, transcript: Transcript) -> None:
        self.ctx = ctx
        self.transcript = transcript
        self._sockets: list[zmq.Socket] = []
        self.handshake = self._bind(zmq.ROUTER, addresses.handshake)
        self.inputs = [self._bind(zmq.ROUTER, a) for a in addresses.inputs]
        self.outputs = [self._bind(zmq.PULL, a) for a in addresses.outputs]
        self.coord_pub: zmq.Socket | None = None
        self.coord_pull: zmq.Socket | None = None
        coordinator = None
        if addresses.coordinator is not None:
            self.coord_pub = self._bind(zmq.XPUB, addresses.coordinator[0])
            self.coord_pull = self._bind(zmq.PULL, addresses.coordinator[1])
            coordinator = (self.coord_pub.getsockopt_string(zmq.LAST_ENDPOINT),
                           self.coord_pull.getsockopt_string(zmq.LAST_ENDPOINT))
        # tcp binds with port 0 resolve here; INIT carries the real addresses
        self.addresses = Addresses(
            self.handshake.getsockopt_string(zmq.LAST_ENDPOINT),
            [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in self.inputs],
            [s.getsockopt_string(zmq.LAST_ENDPOINT) for s in self.outputs],
            coordinator,
        )
        self.poller = zmq.Poller()
        for s in self._sockets:
            self.poller.register(s, zmq.POLLIN)
        # An engine that stops reading its input (vLLM 0.33 ends its input thread on a bad message)
        # closes its DEALER connection: the ROUTER's monitor sees it, so waits end at once with that
        # evidence instead of running out their timeout.
        # The output connections are watched too: a process going away closes both, an engine that
        # only stopped reading keeps its outputs (Waits tells the two apart by this).
        self._monitors: dict[zmq.Socket, tuple[str, int]] = {}
        for kind, socks in (("input", self.inputs), ("output", self.outputs)):
            for client, sock in enumerate(socks):
                # a name of our own: pyzmq's default (the socket's fd) is reused by the next launch's
                # socket while the closed one's monitor endpoint may still be bound ("Address already in use")
                mon = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED,
                                              addr=f"inproc://ecp-monitor-{next(_MONITOR_IDS)}")
                self._monitors[mon] = (kind, client)
                self.poller.register(mon, zmq.POLLIN)
        #: False until the handshake is over: connection churn during start-up is no closed input
        self.watch_inputs = False
        #: (client, time) of the first input connection an engine closed after the handshake
        self.input_closed: tuple[int, float] | None = None
        #: (client, time) of the first output connection an engine closed after the handshake
        self.output_closed: tuple[int, float] | None = None

    def _bind(self, kind: int, address: str) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if kind == zmq.XPUB:
            sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # one subscription message per engine, not per topic
        sock.bind(address)
        self._sockets.append(sock)
        return sock

    def named(self) -> dict[str, zmq.Socket]:
        """Every socket by its protocol name (``handshake``, ``input[i]``, ``output[i]``, ``coordinator_*``)."""
        return {self.channel(sock): sock for sock in self._sockets}

    def channel(self, sock: zmq.Socket) -> str:
        """The protocol name of one of these sockets, as transcripts and the machine name it."""
        if sock is self.handshake:
            return "handshake"
        if sock is self.coord_pub:
            return "coordinator_input"
        if sock is self.coord_pull:
            return "coordinator_output"
        if sock in self.inputs:
            return f"input[{self.inputs.index(sock)}]"
        return f"output[{self.outputs.index(sock)}]"

    def poll_once(self, end: float) -> list[tuple[zmq.Socket, list[bytes]]]:
        """What arrived until ``end`` (``RECV_BATCH`` messages per socket at most), in socket order."""
        ms = max(0, int((end - time.monotonic()) * 1000))
        events = dict(self.poller.poll(ms))
        for mon in self._monitors:
            if mon in events:
                self._on_monitor(mon)
        got = []
        for sock in self._sockets:
            if sock in events:
                for _ in range(RECV_BATCH):
                    try:
                        got.append((sock, sock.recv_multipart(zmq.NOBLOCK)))
                    except zmq.Again:
                        break
        return got

    def watch_input_connections(self) -> None:
        """From now on a closed input connection is an engine that stopped reading (what the
        monitors saw during start-up is connection churn, read and left out)."""
        self.read_monitors()
        self.watch_inputs = True

    def read_monitors(self) -> None:
        """Take in the connection events the monitors hold now."""
        for mon in self._monitors:
            self._on_monitor(mon)

    def _on_monitor(self, mon: zmq.Socket) -> None:
        kind, client = self._monitors[mon]
        for _ in range(100):
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] != zmq.EVENT_DISCONNECTED or not self.watch_inputs:
                continue
            if kind == "input" and self.input_closed is None:
                self.input_closed = (client, time.monotonic())
                self.transcript.note(f"the engine closed its connection to input[{client}]")
            elif kind == "output" and self.output_closed is None:
                self.output_closed = (client, time.monotonic())
                self.transcript.note(f"the engine closed its connection to output[{client}]")

    def close(self) -> None:
        stop_monitors([*self.inputs, *self.outputs])  # before their readers close (stop_monitors says why)
        for mon in self._monitors:
            mon.close(0)
        self._monitors.clear()
        for s in self._sockets:
            s.close(0)
        self._sockets.clear()
