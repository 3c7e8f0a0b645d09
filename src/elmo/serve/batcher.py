"""Dynamic batching: concurrent requests' sentences run through the model together.

Each request's sentences wait in one line. A worker takes the oldest request and, while the batch holds
fewer than `max_batch_tokens` tokens, waits for more until the oldest has waited `max_wait_ms`; then it
runs every sentence it took as one stateless call (the `Embedder` sorts them by length and runs them
in sub-batches) and hands each request its own arrays, already reduced to what its answer needs. A
request is never split between batches, and one larger than `max_batch_tokens` runs alone. Every
sentence starts from zero state, so a request's vectors do not depend on what it was batched with.
With `max_batch_tokens=1` every call runs one request: the baseline of `benchmarks/serve_load.py`.

The line is bounded (`max_queue_tokens`): a request that would overflow it is refused at once with
an estimate of when to retry, from the measured speed (503 + Retry-After in the app). A request whose
client disconnects while it waits leaves the line at once (nobody's work is done); one whose client
leaves while its batch runs is finished with the batch and counted. Where the model runs is a runner's
business: threads of this process (`ThreadRunner`, tests and the library) or worker processes that are
replaced when they die (`pool.ProcessRunner`); a worker that dies fails its batch with `WorkerLost`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

SETTLE_TURNS = 8  # event-loop turns a request takes from readable socket to the line (read, parse, handler)
Compute = Callable[[list[Sequence[str]]], list[np.ndarray]]  # sentences -> one (L+1, n, D) array each


class QueueFull(Exception):
    """The line is full: answer 503 with `retry_after` seconds."""

    def __init__(self, retry_after: int, queued_tokens: int, limit: int, answer_bytes: tuple[int, int] | None = None):
        if answer_bytes is not None:
            held, most = answer_bytes
            super().__init__(f"the server is busy: answers of {held / 2**20:,.1f} MiB are being computed or sent, at "
                             f"most {most / 2**20:,.0f} MiB may; try again in {retry_after} s")
        else:
            super().__init__(f"the server is busy: {queued_tokens} tokens are waiting, at most {limit} may; try again "
                             f"in {retry_after} s")
        self.retry_after = retry_after


class WorkerLost(Exception):
    """The worker process running a request's batch died (killed, out of memory): answer 503; the worker
    is being replaced, `retry_after` seconds is how long a replacement took to load."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class ClientGone(Exception):
    """The request's client disconnected before its answer was ready; nobody is left to answer."""


class Runner(Protocol):
    """Where batches run: worker `index` of `workers`."""

    workers: int

    async def wait_ready(self, index: int) -> None: ...

    async def run(self, index: int, sentences: list[Sequence[str]], outputs: list[Any]) -> list[np.ndarray]: ...

    def close(self) -> None: ...


class ThreadRunner:
    """`compute` in threads of this process (an `Embedder` shared by them); always ready. The reduction to
    each answer's arrays (`outputs`) runs in the thread too."""

    def __init__(self, compute: Compute, workers: int = 1):
        self.compute, self.workers = compute, workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="elmo-serve")

    async def wait_ready(self, index: int) -> None:
        return None

    def _call(self, sentences: list[Sequence[str]], outputs: list[Any]) -> list[np.ndarray]:
        arrays = self.compute(sentences)
        return [a if o is None else o.apply(a) for a, o in zip(arrays, outputs)]

    async def run(self, index: int, sentences: list[Sequence[str]], outputs: list[Any]) -> list[np.ndarray]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._call, sentences, outputs)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Pending:
    sentences: list[Sequence[str]]
    tokens: int
    future: asyncio.Future
    output: Any = None  # what its answer keeps of each sentence's layers (an OutputSpec; None: all of them)
    arrived: float = field(default_factory=time.monotonic)
    running: bool = False


@dataclass
class BatchRecord:
    """What one model call ran, for the metrics."""

    requests: int
    sentences: int
    tokens: int
    queue_seconds: list[float]  # each request's wait before its call began
    compute_seconds: float


@dataclass
class Dropped:
    """Requests whose client left: before their batch began (never computed) and while it ran."""

    waiting: int = 0
    running: int = 0


class Batcher:
    """Runs batches of concurrent requests, `workers` calls at a time, through `runner` (default: `compute`
    in threads of this process)."""

    def __init__(self, compute: Compute | None = None, max_batch_tokens: int = 4096, max_wait_ms: float = 5.0,
                 workers: int = 1, max_queue_tokens: int = 65_536,
                 on_batch: Callable[[BatchRecord], None] | None = None, runner: Runner | None = None):
        if max_batch_tokens < 1 or max_wait_ms < 0 or workers < 1 or max_queue_tokens < 1:
            raise ValueError("max_batch_tokens, workers and max_queue_tokens must be >= 1 and max_wait_ms >= 0, found "
                             f"{max_batch_tokens}, {workers}, {max_queue_tokens}, {max_wait_ms}")
        self.runner = runner or ThreadRunner(compute, workers)
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000
        self.workers, self.max_queue_tokens = self.runner.workers, max_queue_tokens
        self.on_batch = on_batch
        self.line: deque[Pending] = deque()
        self.queued_tokens = 0
        self.running_tokens = 0
        self.dropped = Dropped()
        self.tokens_per_second = 2000.0  # measured as batches finish; a first guess for Retry-After
        self._arrival: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task] = []

    def retry_after(self) -> int:
        ahead = self.queued_tokens + self.running_tokens
        return max(1, min(120, math.ceil(ahead / self.tokens_per_second)))

    async def submit(self, sentences: list[Sequence[str]], output: Any = None,
                     disconnected: Callable[[], Awaitable[Any]] | None = None) -> list[np.ndarray]:
        """The arrays of `sentences` (reduced by `output`), computed in some batch; QueueFull when the line is
        full; ClientGone when `disconnected()` returns first (the request then leaves the line, or, if its
        batch already runs, is finished with it unanswered)."""
        tokens = max(1, sum(len(s) for s in sentences))
        if self.queued_tokens + tokens > self.max_queue_tokens and self.line:
            raise QueueFull(self.retry_after(), self.queued_tokens, self.max_queue_tokens)
        self._start()
        pending = Pending(list(sentences), tokens, asyncio.get_running_loop().create_future(), output)
        self.line.append(pending)
        self.queued_tokens += tokens
        self._arrival.set()
        gone = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        try:
            if gone is not None:
                await asyncio.wait({pending.future, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not pending.future.done():
                    self._withdraw(pending)
                    raise ClientGone
            return await pending.future
        except asyncio.CancelledError:
            self._withdraw(pending)
            raise
        finally:
            if gone is not None:
                gone.cancel()

    def _withdraw(self, pending: Pending) -> None:
        """The client left: out of the line if still in it; otherwise its batch finishes without it."""
        if pending.running:
            self.dropped.running += 1
        elif pending in self.line:
            self.line.remove(pending)
            self.queued_tokens -= pending.tokens
            self.dropped.waiting += 1
        pending.future.cancel()

    def _start(self) -> None:
        """Workers start with the first request, on the event loop that serves it (again on a new loop:
        tests run one loop per client session)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._arrival = loop, asyncio.Event()
            self._tasks = [loop.create_task(self._work(index)) for index in range(self.workers)]

    async def _work(self, index: int) -> None:
        while True:
            await self.runner.wait_ready(index)
            while not self.line:
                self._arrival.clear()
                await self._arrival.wait()
            await self._fill()
            batch = self._take()
            if batch:
                await self._run(index, batch)

    async def _fill(self) -> None:
        """Wait for more requests while the line holds less than a batch: first those already on their way
        (sent while the model ran, their bytes read by the event loop once it gets a turn: the worker yields
        until the line stops growing), then any more while its oldest may still wait."""
        while self.queued_tokens < self.max_batch_tokens:
            before = len(self.line)
            for _ in range(SETTLE_TURNS):
                await asyncio.sleep(0)
            if len(self.line) == before:
                break
        while self.line and self.queued_tokens < self.max_batch_tokens:
            left = self.line[0].arrived + self.max_wait - time.monotonic()
            if left <= 0:
                return
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), left)
            except asyncio.TimeoutError:
                return

    def _take(self) -> list[Pending]:
        """The oldest requests that fit in one batch (at least one)."""
        batch: list[Pending] = []
        tokens = 0
        while self.line and (not batch or tokens + self.line[0].tokens <= self.max_batch_tokens):
            pending = self.line.popleft()
            self.queued_tokens -= pending.tokens
            if pending.future.done():  # cancelled without leaving the line (not expected; harmless)
                continue
            pending.running = True
            batch.append(pending)
            tokens += pending.tokens
        return batch

    async def _run(self, index: int, batch: list[Pending]) -> None:
        sentences = [s for p in batch for s in p.sentences]
        outputs = [p.output for p in batch for _ in p.sentences]
        tokens = sum(p.tokens for p in batch)
        started = time.monotonic()
        self.running_tokens += tokens
        try:
            arrays = await self.runner.run(index, sentences, outputs)
        except Exception as e:  # the model's error (or its worker's death) is every request's answer
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(e)
            return
        finally:
            self.running_tokens -= tokens
        seconds = time.monotonic() - started
        self.tokens_per_second = 0.8 * self.tokens_per_second + 0.2 * tokens / max(seconds, 1e-6)
        start = 0
        for p in batch:
            if not p.future.done():
                p.future.set_result(arrays[start : start + len(p.sentences)])
            start += len(p.sentences)
        if self.on_batch is not None:
            self.on_batch(BatchRecord(len(batch), len(sentences), tokens, [started - p.arrived for p in batch], seconds))

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.runner.close()
