"""Prometheus metrics of ``ecp serve`` (``GET /metrics``).

Names follow vLLM's (``vllm:…``) where vLLM has the metric, so dashboards
carry over; ``ecp:aborted_requests_total`` is ours. One registry per server,
so several servers in one process (tests) do not share counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class FrontendMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, lbl = self.registry, ["model_name"]
        self.running = Gauge("vllm:num_requests_running", "Engine requests in flight (admitted, unfinished).",
                             lbl, registry=r).labels(model_name)
        self.waiting = Gauge("vllm:num_requests_waiting", "Engine requests in flight without a first token yet.",
                             lbl, registry=r).labels(model_name)
        self._finished = Counter("vllm:request_success", "Finished engine requests by finish reason.",
                                 lbl + ["finished_reason"], registry=r)
        self._aborted = Counter("ecp:aborted_requests", "Aborted engine requests by cause.",
                                lbl + ["cause"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens admitted.", lbl,
                                     registry=r).labels(model_name)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated.", lbl,
                                         registry=r).labels(model_name)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token.", lbl,
                              buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Time between token outputs.", lbl,
                             buckets=_LATENCY_BUCKETS, registry=r).labels(model_name)
        self.model_name = model_name

    def finished(self, reason: str) -> None:
        self._finished.labels(self.model_name, reason).inc()

    def aborted(self, cause: str) -> None:
        self._aborted.labels(self.model_name, cause).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
