"""The server's Prometheus metrics (`GET /metrics`), in a registry of its own: requests by endpoint and
status, tokens embedded, and histograms of batch sizes, queue time, model time and request latency."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .batcher import BatchRecord

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class Metrics:
    """One server's counters; `observe_batch` is the batcher's callback."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("elmo_requests", "HTTP requests answered", ["endpoint", "status"], registry=r)
        self.latency = Histogram("elmo_request_seconds", "Time from a request's body read to its answer",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("elmo_tokens", "Tokens embedded", registry=r)
        self.batch_requests = Histogram("elmo_batch_requests", "Requests per model call", buckets=SIZE_BUCKETS,
                                        registry=r)
        self.batch_sentences = Histogram("elmo_batch_sentences", "Sentences per model call", buckets=SIZE_BUCKETS,
                                         registry=r)
        self.batch_tokens = Histogram("elmo_batch_tokens", "Tokens per model call", buckets=SIZE_BUCKETS, registry=r)
        self.queue_seconds = Histogram("elmo_queue_seconds", "A request's wait for its model call",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.model_seconds = Histogram("elmo_model_seconds", "Time of one model call", buckets=LATENCY_BUCKETS,
                                       registry=r)
        self.queued_tokens = Gauge("elmo_queued_tokens", "Tokens waiting for a model call", registry=r)

    def observe_batch(self, record: BatchRecord) -> None:
        self.tokens.inc(record.tokens)
        self.batch_requests.observe(record.requests)
        self.batch_sentences.observe(record.sentences)
        self.batch_tokens.observe(record.tokens)
        self.model_seconds.observe(record.compute_seconds)
        for seconds in record.queue_seconds:
            self.queue_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
