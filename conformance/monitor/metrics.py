"""Counters the console, the report and Prometheus read.

One :class:`Metrics` object per session, updated by the session thread and
read (as a :meth:`Metrics.snapshot`) by the console and the Prometheus
collector. The open-request gauge is bookkeeping for display only: a request
is open from its ADD until a terminal output, an ABORT or a
``finished_requests`` entry names it on the same engine (an ``abort_immediately``
ADD opens none).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from ecp.spec import EngineCoreOutputs, EngineCoreRequest

from .observed import Observed


def metric_kind(kind: str, message: Any) -> str:
    """The label a message is counted under: its kind, with outputs split into
    request ``outputs``, ``utility_output`` and ``control_outputs`` (stats, waves only)."""
    msg = message
    if kind == "outputs" and isinstance(msg, EngineCoreOutputs):
        if msg.outputs:
            return "outputs"
        if msg.utility_output is not None:
            return "utility_output"
        return "control_outputs"
    return kind


@dataclass
class Snapshot:
    elapsed_s: float
    messages: dict[tuple[str, str], int]
    bytes_total: int
    violations: dict[str, int]
    open_requests: int
    engines: list[int | None]

    @property
    def total_messages(self) -> int:
        return sum(self.messages.values())

    def messages_by_kind(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (_, kind), n in self.messages.items():
            out[kind] += n
        return dict(out)

    def to_json(self) -> dict[str, Any]:
        by_dir: dict[str, dict[str, int]] = {}
        for (direction, kind), n in sorted(self.messages.items()):
            by_dir.setdefault(direction, {})[kind] = n
        return {"elapsed_s": round(self.elapsed_s, 3), "messages_total": self.total_messages,
                "bytes_total": self.bytes_total, "messages": by_dir,
                "violations": dict(sorted(self.violations.items())), "open_requests": self.open_requests,
                "engines": self.engines}


@dataclass
class Metrics:
    messages: Counter = field(default_factory=Counter)
    violations: Counter = field(default_factory=Counter)
    bytes_total: int = 0
    engines: set = field(default_factory=set)
    _open: set = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, msg: Observed, kind: str, message: Any) -> None:
        label = metric_kind(kind, message)
        with self._lock:
            self.messages[(msg.direction, label)] += 1
            self.bytes_total += sum(len(f) for f in msg.frames)
            self.engines.add(msg.rank)
            if message is not None:
                self._track(msg.rank, kind, message)

    def _track(self, rank: int | None, kind: str, m: Any) -> None:
        if isinstance(m, EngineCoreRequest):
            if not m.abort_immediately:  # a rejection notice opens nothing (ECP-REJECT-1)
                self._open.add((rank, m.request_id))
        elif kind == "abort":  # the request ids
            for rid in m:
                self._open.discard((rank, rid))
        elif isinstance(m, EngineCoreOutputs):
            for o in m.outputs:
                if o.finish_reason is not None:
                    self._open.discard((rank, o.request_id))
            for rid in m.finished_requests or ():
                self._open.discard((rank, rid))

    def violation(self, clause: str) -> None:
        with self._lock:
            self.violations[clause] += 1

    def engine_gone(self, rank: int | None) -> None:
        with self._lock:
            self._open = {k for k in self._open if k[0] != rank}

    def snapshot(self, elapsed_s: float) -> Snapshot:
        with self._lock:
            return Snapshot(elapsed_s, dict(self.messages), self.bytes_total, dict(self.violations),
                            len(self._open), sorted(self.engines, key=lambda r: -1 if r is None else r))


class PrometheusCollector:
    """A ``prometheus_client`` collector over :class:`Metrics`: read at scrape time, so
    relaying pays nothing for it. Register it on a ``CollectorRegistry``."""

    def __init__(self, metrics: Metrics, clock) -> None:
        self.metrics = metrics
        self.clock = clock

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.metrics.snapshot(self.clock())
        msgs = CounterMetricFamily("ecp_monitor_messages", "messages relayed, by direction and kind",
                                   labels=["direction", "kind"])
        for (direction, kind), n in sorted(snap.messages.items()):
            msgs.add_metric([direction, kind], n)
        yield msgs
        viol = CounterMetricFamily("ecp_monitor_violations", "protocol violations found, by clause",
                                   labels=["clause"])
        for clause, n in sorted(snap.violations.items()):
            viol.add_metric([clause], n)
        yield viol
        yield GaugeMetricFamily("ecp_monitor_open_requests", "requests added and not yet finished or aborted",
                                value=snap.open_requests)
        yield CounterMetricFamily("ecp_monitor_bytes", "bytes relayed (all frames)", value=snap.bytes_total)


def start_prometheus(metrics: Metrics, clock, host: str, port: int):
    """Serve ``/metrics`` on ``host:port``; return ``(server, thread)``. Needs ``prometheus-client``
    (the ``serve`` extra)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=True)
    registry.register(PrometheusCollector(metrics, clock))
    return start_http_server(port, addr=host, registry=registry)
