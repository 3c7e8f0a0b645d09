"""`elmo serve`'s worker processes, each replaced when it dies.

One process per worker (a `ProcessPoolExecutor` of one, spawned), so that the death of one (SIGKILL,
the out-of-memory killer) breaks only its own executor: the batch it held fails with `WorkerLost`
(503 + Retry-After for those requests), and a replacement is started at once and loads the model
while the other workers go on. A worker is *ready* from the end of its model load until it dies;
the server is ready while any worker is. Deaths are seen as they happen (a pidfd on Linux), not only
when the next batch is sent. A replacement that fails to load is retried with a growing pause
(1, 2, 4 ... 30 s); after `FAILING_AFTER` failures in a row the pool says it is failing (`/health`
answers 503, so a liveness probe restarts the whole server).
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelFileError
from . import worker
from .batcher import WorkerLost

log = logging.getLogger("elmo.serve")
FAILING_AFTER = 3  # failed replacement loads in a row before the pool reports itself failing
MAX_PAUSE = 30.0  # seconds between tries to load a replacement, at most


@dataclass
class WorkerProcess:
    index: int
    executor: ProcessPoolExecutor | None = None
    pid: int | None = None
    ready: asyncio.Event | None = None
    load_seconds: float = 0.0
    restarting: asyncio.Task | None = None
    watch_fd: int | None = None


@dataclass
class PoolCounts:
    restarts: int = 0  # replacements that loaded
    deaths: int = 0  # workers that died
    failed_loads: int = 0  # replacement loads that failed, in all
    failing_in_a_row: int = 0
    last_error: str = ""
    started: float = field(default_factory=time.time)


class ProcessRunner:
    """`workers` worker processes running `worker.compute`, for `Batcher(runner=...)`."""

    def __init__(self, model, int8: bool, threads: int | None, workers: int):
        self.args = (model, int8, threads)
        self.workers = workers
        self.procs = [WorkerProcess(i) for i in range(workers)]
        self.counts = PoolCounts()
        self.shape: tuple[int, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _spawn(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def start(self) -> tuple[int, int]:
        """Start every worker and wait for their model loads (before the server listens): (layers, dim), or
        a `ModelFileError` with the first worker's one-line reason."""
        started = time.monotonic()
        for proc in self.procs:
            proc.executor = self._spawn()
        loads = [proc.executor.submit(worker.load, *self.args) for proc in self.procs]
        for proc, load in zip(self.procs, loads):
            try:
                answer = load.result()
            except BrokenProcessPool:
                answer = "its worker process died while loading it (out of memory?)"
            if isinstance(answer, str):
                self.close()
                raise ModelFileError(f"the model could not be loaded: {answer}")
            layers, dim, proc.pid = answer
            proc.load_seconds = time.monotonic() - started
            self.shape = (layers, dim)
        return self.shape

    @property
    def ready_workers(self) -> int:
        return sum(1 for p in self.procs if p.ready is not None and p.ready.is_set())

    @property
    def failing(self) -> bool:
        return self.counts.failing_in_a_row >= FAILING_AFTER

    def pids(self) -> dict[int, int]:
        return {p.index: p.pid for p in self.procs if p.pid is not None}

    def _attach(self) -> None:
        """On the serving event loop: readiness events and death watches for the workers `start` loaded."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        for proc in self.procs:
            proc.ready = asyncio.Event()
            if proc.pid is not None and proc.executor is not None:
                proc.ready.set()
                self._watch(proc)

    def _watch(self, proc: WorkerProcess) -> None:
        """Notice the worker's death at once, busy or idle (Linux pidfd; elsewhere: at its next batch)."""
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            return
        proc.watch_fd = fd
        self._loop.add_reader(fd, self._died, proc, proc.pid)

    def _unwatch(self, proc: WorkerProcess) -> None:
        if proc.watch_fd is not None:
            self._loop.remove_reader(proc.watch_fd)
            os.close(proc.watch_fd)
            proc.watch_fd = None

    def _died(self, proc: WorkerProcess, pid: int) -> None:
        if proc.pid != pid:  # already replaced
            return
        self._unwatch(proc)
        self.counts.deaths += 1
        proc.ready.clear()
        proc.pid = None
        log.error("elmo serve: worker %d died; starting a replacement", proc.index)
        if proc.restarting is None or proc.restarting.done():
            proc.restarting = asyncio.ensure_future(self._replace(proc))

    async def _replace(self, proc: WorkerProcess) -> None:
        old, pause = proc.executor, 1.0
        if old is not None:
            old.shutdown(wait=False, cancel_futures=True)
        while True:
            started = time.monotonic()
            proc.executor = self._spawn()
            try:
                answer = await asyncio.wrap_future(proc.executor.submit(worker.load, *self.args))
            except BrokenProcessPool:
                answer = "the replacement died while loading the model (out of memory?)"
            if not isinstance(answer, str):
                proc.pid, proc.load_seconds = answer[2], time.monotonic() - started
                self.counts.restarts += 1
                self.counts.failing_in_a_row = 0
                self._watch(proc)
                proc.ready.set()
                log.warning("elmo serve: worker %d replaced (pid %d) in %.1f s", proc.index, proc.pid,
                            proc.load_seconds)
                return
            self.counts.failed_loads += 1
            self.counts.failing_in_a_row += 1
            self.counts.last_error = answer
            log.error("elmo serve: worker %d's replacement did not load: %s; again in %.0f s", proc.index, answer,
                      pause)
            proc.executor.shutdown(wait=False, cancel_futures=True)
            await asyncio.sleep(pause)
            pause = min(MAX_PAUSE, pause * 2)

    def retry_after(self) -> int:
        return max(1, math.ceil(max((p.load_seconds for p in self.procs), default=1.0)))

    async def wait_ready(self, index: int) -> None:
        self._attach()
        await self.procs[index].ready.wait()

    async def run(self, index: int, sentences: list[Sequence[str]], outputs: list[Any]) -> list[np.ndarray]:
        self._attach()
        proc = self.procs[index]
        pid = proc.pid
        try:
            return await asyncio.wrap_future(proc.executor.submit(worker.compute, sentences, outputs))
        except BrokenProcessPool:
            if proc.pid == pid:  # seen here before the watch saw it (or no pidfd)
                self._unwatch(proc)
                self._died(proc, pid)
            raise WorkerLost(f"the worker process computing this request died (killed or out of memory); it is "
                             f"being replaced: try again in {self.retry_after()} s", self.retry_after()) from None

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker: let a running batch finish for up to `timeout` seconds, then kill it."""
        for proc in self.procs:
            if proc.restarting is not None:
                proc.restarting.cancel()
            if self._loop is not None and not self._loop.is_closed():
                self._unwatch(proc)
            if proc.executor is not None:
                proc.executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            processes = list((getattr(proc.executor, "_processes", None) or {}).values())
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
                if process.is_alive():
                    log.warning("elmo serve: worker %d still busy after %.0f s; stopping it", proc.index, timeout)
                    os.kill(process.pid, signal.SIGKILL)
                    process.join(5)
