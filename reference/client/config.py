"""Client configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ecp.spec import DEFAULT_LIMITS, DecodeLimits
from ecp.spec import VLLM_RELEASE

@dataclass(frozen=True)
class ClientConfig:
    """How an :class:`~ecp.reference.client.EngineCoreClient` binds and talks to its engines.

    Attributes:
        engine_count: N engines, with global ranks ``engine_start_index .. +N-1`` (``ECP-DP-1``).
        engine_start_index: rank of the first engine.
        handshake_address: where to bind the handshake ROUTER; ``None`` picks a
            fresh ipc path (``transport="ipc"``) or an ephemeral tcp port on ``host``.
        transport: ``"ipc"`` or ``"tcp"`` for the sockets the client picks itself.
        host: the interface for tcp binds (loopback by default, ``ECP-SEC-2``).
        input_address, output_address: explicit input ROUTER / output PULL bind
            addresses (needed by engines in bootstrapped mode); ``None`` = pick.
        client_index: this client's index, stamped on every ADD and UTILITY
            (``ECP-REQ-6``). A handshake-owning client advertises one input/output
            pair, so it must be 0 unless ``bootstrapped``.
        handshake_timeout_s: bound on waiting for every engine's HELLO.
        ready_timeout_s: bound on waiting, after the last HELLO, for every
            ready payload, READY and the coordinator gate.
        bootstrapped: no handshake socket; engines with known ranks register
            directly on the input socket.
        coordinator: run the in-process DP coordinator (startup gate, wave
            rebroadcast) and advertise its addresses in INIT.
        kv_connector: name of the KV connector the deployment uses (``None`` =
            none); informational for the frontend's rejection-notice gating.
        utility_timeout_s: bound on a utility call waiting for every engine.
        peer_loss_grace_s: after an engine connection closes, how long the
            client keeps draining outputs before it fails closed.
        liveness_timeout_s: ``None`` (the default, as vLLM 0.33, which only
            notices an engine process that exits) or a bound on detecting a
            hung engine: an engine with requests in flight that has sent nothing
            for half this time gets a liveness probe (an ``is_sleeping`` utility
            call); if neither the reply nor any other output arrives within this
            time the client fails closed with ``EngineUnresponsive``, at most
            2 x ``liveness_timeout_s`` after the engine's last output. Choose it
            above the longest single engine step (a large prefill).
        decode_limits: limits applied to every output message before decoding
            (``ECP-FRAME-9``).
        vllm: the vLLM release the engines speak (``0.32``, a layout file or a vLLM tree, as
            ``--vllm`` takes it; :mod:`.release`): frames are written and read as that release
            does, and a UTILITY method it lacks is refused before it is sent. Default: 0.33.
        bugs: deliberate faults for the conformance self-proof (the names of
            :data:`ecp.reference.client.faults.FAULTS`); other names are
            ignored here so the frontend can pass its whole set.
    """

    engine_count: int = 1
    engine_start_index: int = 0
    handshake_address: str | None = None
    transport: Literal["ipc", "tcp"] = "ipc"
    host: str = "127.0.0.1"
    input_address: str | None = None
    output_address: str | None = None
    client_index: int = 0
    handshake_timeout_s: float = 60.0
    ready_timeout_s: float = 600.0
    bootstrapped: bool = False
    coordinator: bool = False
    kv_connector: str | None = None
    utility_timeout_s: float = 300.0
    peer_loss_grace_s: float = 0.1
    liveness_timeout_s: float | None = None
    decode_limits: DecodeLimits = DEFAULT_LIMITS
    vllm: str = VLLM_RELEASE
    bugs: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.engine_count < 1:
            raise ValueError(f"engine_count must be at least 1, got {self.engine_count}")
        if not 0 <= self.engine_start_index or self.engine_start_index + self.engine_count > 0x10000:
            raise ValueError("engine ranks must fit the 2-byte identity (0..65535)")
        if self.transport not in ("ipc", "tcp"):
            raise ValueError(f"transport must be 'ipc' or 'tcp', got {self.transport!r}")
        if self.liveness_timeout_s is not None and not self.liveness_timeout_s > 0:
            raise ValueError(f"liveness_timeout_s must be positive or None, got {self.liveness_timeout_s}")
        if self.client_index < 0:
            raise ValueError("client_index must be non-negative")
        if self.client_index != 0 and not self.bootstrapped:
            raise ValueError("a handshake-owning client advertises one input/output pair: "
                             "client_index must be 0 (use bootstrapped mode for other indexes)")
        if self.bootstrapped and self.coordinator:
            raise ValueError("bootstrapped mode has no handshake, so it cannot gate on a coordinator")
        object.__setattr__(self, "bugs", frozenset(self.bugs))

    @property
    def engine_ranks(self) -> tuple[int, ...]:
        return tuple(range(self.engine_start_index, self.engine_start_index + self.engine_count))
