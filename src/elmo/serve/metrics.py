"""The server's Prometheus metrics (`GET /metrics`), in a registry of its own: requests by endpoint and
status (every answer, refusals included), tokens embedded, histograms of batch sizes, queue time, model
time and request latency, requests dropped because their client left, connections closed because their
reader stopped, the workers' readiness and restarts, and process metrics (CPU, memory, open files,
threads) of the HTTP process and of each worker process, read from /proc at each scrape."""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .batcher import BatchRecord

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def process_stats(pid: int) -> dict[str, float] | None:
    """CPU seconds, resident bytes, threads and open files of process `pid` (Linux /proc), None elsewhere
    or once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        open_fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return {"cpu_seconds": (int(fields[11]) + int(fields[12])) / ticks,
            "resident_bytes": int(fields[21]) * os.sysconf("SC_PAGE_SIZE"), "threads": int(fields[17]),
            "open_fds": open_fds}


class LiveCollector:
    """What is read from the running server at each scrape: `state()` gives the counts and the processes
    ({"http": pid, "worker-0": pid, ...})."""

    def __init__(self, state: Callable[[], dict]):
        self.state = state

    def collect(self):
        s = self.state()
        dropped = CounterMetricFamily("elmo_dropped_requests", "Requests whose client left: before their batch "
                                      "began (never computed) or while it ran (computed, not sent)", labels=["when"])
        dropped.add_metric(["waiting"], s["dropped_waiting"])
        dropped.add_metric(["running"], s["dropped_running"])
        yield dropped
        yield CounterMetricFamily("elmo_send_timeouts", "Connections closed because their reader stopped taking "
                                  "the answer", value=s["send_timeouts"])
        yield GaugeMetricFamily("elmo_answer_bytes_held", "Bytes of answers admitted and not yet sent",
                                value=s["answer_bytes_held"])
        yield GaugeMetricFamily("elmo_workers_ready", "Worker processes able to take a batch now",
                                value=s["workers_ready"])
        yield CounterMetricFamily("elmo_worker_restarts", "Worker processes replaced after dying",
                                  value=s["worker_restarts"])
        families = {name: GaugeMetricFamily(f"elmo_process_{name}", text, labels=["process"]) for name, text in (
            ("cpu_seconds", "CPU seconds (user + system) of the process"),
            ("resident_bytes", "Resident memory of the process"), ("threads", "Threads of the process"),
            ("open_fds", "Open file descriptors of the process"))}
        for process, pid in s["processes"].items():
            stats = process_stats(pid)
            for name, value in (stats or {}).items():
                families[name].add_metric([process], value)
        yield from families.values()


class Metrics:
    """One server's counters; `observe_batch` is the batcher's callback."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, state: Callable[[], dict] | None = None):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("elmo_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
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
        if state is not None:
            r.register(LiveCollector(state))

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
