"""Prometheus metrics of ``ecp serve`` (``GET /metrics``).

Names follow vLLM's (``vllm:…``) where vLLM has the metric, so dashboards
carry over; ``ecp:aborted_requests_total`` is ours. One set per server, so
several servers in one process (tests) do not share counters.

The values are plain numbers updated on the server's event loop (one thread)
and read by a ``prometheus_client`` collector at scrape time: the hot path
(a histogram observation per token) takes no lock and builds no label child,
which is what a ``prometheus_client`` metric would cost on every update.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class Value:
    """A gauge or counter: ``inc``/``dec`` on the event loop, read at scrape time."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int | float = 1) -> None:
        self.value += amount

    def dec(self, amount: int | float = 1) -> None:
        self.value -= amount


class Histogram:
    """Observations counted per bucket (upper bounds ``buckets``, then +Inf) and summed."""

    __slots__ = ("buckets", "counts", "sum")

    def __init__(self, buckets: tuple[float, ...] = _LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        """``count`` observations of ``value``."""
        # bisect_left: a value equal to a bound falls in that bucket (Prometheus' le is inclusive)
        self.counts[bisect_left(self.buckets, value)] += count
        self.sum += value * count

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count of observations <= le)`` per bucket, +Inf last."""
        out, total = [], 0
        for bound, n in zip((*map(floatToGoString, self.buckets), "+Inf"), self.counts):
            total += n
            out.append((bound, total))
        return out


class FrontendMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.running = Value()
        self.waiting = Value()
        self.prompt_tokens = Value()
        self.generation_tokens = Value()
        self.ttft = Histogram()
        self.itl = Histogram()
        self._finished: dict[str, int] = {}
        self._aborted: dict[str, int] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Collector(self))

    def finished(self, reason: str) -> None:
        self._finished[reason] = self._finished.get(reason, 0) + 1

    def aborted(self, cause: str) -> None:
        self._aborted[cause] = self._aborted.get(cause, 0) + 1

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    """Reads :class:`FrontendMetrics` into Prometheus metric families at scrape time."""

    def __init__(self, metrics: FrontendMetrics) -> None:
        self.m = metrics

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        m, model = self.m, [self.m.model_name]

        def gauge(name: str, doc: str, v: Value) -> Metric:
            family = GaugeMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(model, v.value)
            return family

        def counter(name: str, doc: str, v: Value) -> Metric:
            family = CounterMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(model, v.value)
            return family

        def by(name: str, doc: str, label: str, counts: dict[str, int]) -> Metric:
            family = CounterMetricFamily(name, doc, labels=["model_name", label])
            for key, n in sorted(counts.items()):
                family.add_metric([*model, key], n)
            return family

        def histogram(name: str, doc: str, h: Histogram) -> Metric:
            family = HistogramMetricFamily(name, doc, labels=["model_name"])
            family.add_metric(model, h.cumulative(), h.sum)
            return family

        yield gauge("vllm:num_requests_running", "Engine requests in flight (admitted, unfinished).", m.running)
        yield gauge("vllm:num_requests_waiting", "Engine requests in flight without a first token yet.", m.waiting)
        yield by("vllm:request_success", "Finished engine requests by finish reason.", "finished_reason",
                 m._finished)
        yield by("ecp:aborted_requests", "Aborted engine requests by cause.", "cause", m._aborted)
        yield counter("vllm:prompt_tokens", "Prompt tokens admitted.", m.prompt_tokens)
        yield counter("vllm:generation_tokens", "Tokens generated.", m.generation_tokens)
        yield histogram("vllm:time_to_first_token_seconds", "Time to first token.", m.ttft)
        yield histogram("vllm:inter_token_latency_seconds", "Time between token outputs.", m.itl)
