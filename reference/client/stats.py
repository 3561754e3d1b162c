"""``ClientStats``: the client's counters, one object its parts share and only ever increment."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClientStats:
    """Counters for operators and benchmarks (read-only for callers)."""

    requests_added: int = 0
    outputs_dispatched: int = 0
    outputs_dropped: int = 0
    output_messages: int = 0
    #: ids sent in ABORT messages (explicit and auto), and the number of ABORT messages
    aborts_sent: int = 0
    abort_messages: int = 0
    abort_send_errors: int = 0
    utility_calls: int = 0
    unknown_utility_replies: int = 0
    rejection_notifications: int = 0
    unexpected_input_messages: int = 0
    liveness_probes: int = 0
    #: rules an engine broke, as the client's protocol machine recorded them (each logged with its clause)
    protocol_violations: int = 0
    in_flight: dict[int, int] = field(default_factory=dict)
