"""The frontend command template: placeholders and KV-connector options.

``COMMAND`` is a template whose arguments may contain ``{handshake_port}``,
``{handshake_address}``, ``{http_port}`` and ``{engine_count}`` (filled in by
the framework's :func:`ecp.conformance.launch.fill_template`, which leaves
other braces alone, so JSON arguments pass through). The process itself is a
:class:`ecp.conformance.launch.CommandPeer`.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from pathlib import Path

PLACEHOLDERS = ("handshake_port", "handshake_address", "http_port", "engine_count")

#: Options that configure a KV connector, with how many values each takes.
#: The harness removes them to run a frontend *without* a connector
#: (``ecp serve --kv-connector NAME``; vLLM ``--kv-transfer-config JSON``).
KV_CONNECTOR_OPTIONS: dict[str, int] = {"--kv-connector": 1, "--kv-transfer-config": 1}
#: Options that make a frontend trust its HTTP clients' ``kv_transfer_params`` (``ECP-SEC-5``), with how
#: many values each takes. The harness removes them to run a frontend that trusts no client.
KV_TRUST_OPTIONS: dict[str, int] = {"--trust-request-kv-params": 0, "--kv-params-trust-header": 1}


#: Where ports are drawn from, below the kernel's ephemeral range (:func:`free_port`).
PORT_FLOOR = 10000
PORT_TRIES = 64
#: The ephemeral range assumed where the kernel does not say (Linux's default start, IANA's end).
DEFAULT_EPHEMERAL = (32768, 65535)
_draw = random.SystemRandom()  # (the global generator is seeded alike in every test worker)


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out itself: to a bind to port 0 and to an outgoing connection."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``, for a peer to bind later.

    Drawn at random between :data:`PORT_FLOOR` and the start of the kernel's ephemeral range, so
    that until the peer binds it nothing the kernel numbers itself can take it: not another
    process's bind to port 0 (a ZeroMQ ``tcp://host:*`` endpoint) nor the local end of any
    connection. Only another explicit choice could, which the random draw makes unlikely. Where
    the range leaves no room or nothing drawn is free, the kernel picks an ephemeral port.
    """
    low, _high = ephemeral_range()
    if low - PORT_FLOOR >= 1024:
        for _ in range(PORT_TRIES):
            port = _draw.randrange(PORT_FLOOR, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Placeholders:
    handshake_port: int
    http_port: int
    engine_count: int
    host: str = "127.0.0.1"

    @property
    def handshake_address(self) -> str:
        return f"tcp://{self.host}:{self.handshake_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @classmethod
    def fresh(cls, engine_count: int, host: str = "127.0.0.1") -> "Placeholders":
        return cls(free_port(host), free_port(host), engine_count, host)

    def values(self) -> dict[str, object]:
        """The values for :func:`~ecp.conformance.launch.fill_template`."""
        return {"handshake_port": self.handshake_port, "handshake_address": self.handshake_address,
                "http_port": self.http_port, "engine_count": self.engine_count}


def has_kv_connector(argv: list[str]) -> bool:
    """Whether the command configures a KV connector."""
    return without_kv_connector(argv) != list(argv)


def without_kv_connector(argv: list[str]) -> list[str]:
    """``argv`` with every KV connector option (and its value) removed."""
    return _without(argv, KV_CONNECTOR_OPTIONS)


def without_kv_trust(argv: list[str]) -> list[str]:
    """``argv`` with every option that trusts clients' ``kv_transfer_params`` (and its value) removed."""
    return _without(argv, KV_TRUST_OPTIONS)


def _without(argv: list[str], options: dict[str, int]) -> list[str]:
    out = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in options:
            i += 1 + (0 if "=" in arg else options[name])
            continue
        out.append(arg)
        i += 1
    return out
