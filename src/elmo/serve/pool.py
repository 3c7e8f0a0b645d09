"""`elmo serve`'s worker processes, each replaced when it dies.

Each worker is a spawned process talking to the server over a pipe (`worker.serve`): a batch is sent, its
answer read back, by one thread of the server per worker. When a worker dies (SIGKILL, the out-of-memory
killer), its pipe reads end-of-file at once: the batch it held fails with `WorkerLost` (503 + Retry-After
for those requests), and a replacement is started and loads the model while the other workers go on. (A
`ProcessPoolExecutor` is not used: after a killed worker it is broken for good, and on Python 3.11 its
clean-up can deadlock while the pipe to the dead process is full.) A worker is *ready* from the end of
its model load until it dies; the server is ready while any worker is. Deaths are seen as they happen
(the process's sentinel on the event loop), busy or idle. A replacement that fails to load is retried
with a growing pause (1, 2, 4 ... 30 s); after `FAILING_AFTER` failures in a row the pool says it is
failing (`/health` answers 503, so a liveness probe restarts the whole server).
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from elmo.errors import ModelFileError

from . import worker
from .batcher import WorkerLost

log = logging.getLogger("elmo.serve")
FAILING_AFTER = 3  # failed replacement loads in a row before the pool reports itself failing
MAX_PAUSE = 30.0  # seconds between tries to load a replacement, at most
CONTEXT = multiprocessing.get_context("spawn")  # a fork of a process running threads and torch is unsafe


class WorkerProcess:
    """One worker process and the server's end of its pipe."""

    def __init__(self, args: tuple):
        self.conn, child = CONTEXT.Pipe()
        self.process = CONTEXT.Process(target=worker.serve, args=(child, *args), daemon=True,
                                       name="elmo-serve-worker")
        self.process.start()
        child.close()  # the worker's end lives in the worker only: its death is end-of-file here
        self.started = time.monotonic()
        self.dead = False

    def loaded(self) -> tuple[int, int, int] | str:
        """Blocking: the load's answer ((layers, dim, pid) or one line why not)."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return f"the worker process died while loading the model (exit code {self.process.exitcode})"

    def call(self, sentences: list[Sequence[str]], outputs: list[Any]) -> list[np.ndarray]:
        """Blocking: one batch's answer; WorkerLost when the process dies meanwhile."""
        try:
            self.conn.send((sentences, outputs))
            status, answer = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerLost("", 1) from None
        if status == "error":
            raise answer
        return answer

    def stop(self, timeout: float) -> None:
        """Close the pipe (the worker's signal to end), wait `timeout` s for a running batch, then kill."""
        self.conn.close()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


@dataclass
class Slot:
    """Worker `index`: its current process, readiness and replacement."""

    index: int
    proc: WorkerProcess | None = None
    pid: int | None = None
    ready: asyncio.Event | None = None
    load_seconds: float = 0.0
    restarting: asyncio.Task | None = None
    watched: int | None = None  # the sentinel fd the event loop watches


@dataclass
class PoolCounts:
    restarts: int = 0  # replacements that loaded
    deaths: int = 0  # workers that died
    failed_loads: int = 0  # replacement loads that failed, in all
    failing_in_a_row: int = 0
    last_error: str = ""


class ProcessRunner:
    """`workers` worker processes running `worker.compute`, for `Batcher(runner=...)`."""

    def __init__(self, model, int8: bool, threads: int | None, workers: int):
        self.args = (model, int8, threads)
        self.workers = workers
        self.slots = [Slot(i) for i in range(workers)]
        self.counts = PoolCounts()
        self._threads = ThreadPoolExecutor(2 * workers + 1, thread_name_prefix="elmo-serve-pipe")
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> tuple[int, int]:
        """Start every worker and wait for their model loads (before the server listens): (layers, dim), or
        a `ModelFileError` with the first worker's one-line reason."""
        shape = None
        for slot in self.slots:
            slot.proc = WorkerProcess(self.args)
        for slot in self.slots:
            answer = slot.proc.loaded()
            if isinstance(answer, str):
                self.close()
                raise ModelFileError(f"the model could not be loaded: {answer}")
            *shape, slot.pid = answer
            slot.load_seconds = time.monotonic() - slot.proc.started
        return tuple(shape)

    @property
    def ready_workers(self) -> int:
        self.attach()
        return sum(1 for s in self.slots if s.ready.is_set())

    @property
    def failing(self) -> bool:
        return self.counts.failing_in_a_row >= FAILING_AFTER

    def pids(self) -> dict[int, int]:
        return {s.index: s.pid for s in self.slots if s.pid is not None}

    def attach(self) -> None:
        """On the serving event loop: readiness events and death watches for the workers `start` loaded."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop = loop
        for slot in self.slots:
            slot.ready = asyncio.Event()
            if slot.pid is not None:
                slot.ready.set()
                self._watch(slot)

    def _watch(self, slot: Slot) -> None:
        """Notice the worker's death at once, busy or idle: its sentinel becomes readable when it ends."""
        slot.watched = slot.proc.process.sentinel
        self._loop.add_reader(slot.watched, self._died, slot, slot.proc)

    def _died(self, slot: Slot, proc: WorkerProcess) -> None:
        if slot.proc is not proc or proc.dead:  # already seen (by its sentinel or its pipe), or replaced
            return
        proc.dead = True
        proc.process.join(0.5)  # it is ending (its sentinel or pipe closed): reaped in moments, for its exit code
        if slot.watched is not None:
            self._loop.remove_reader(slot.watched)
            slot.watched = None
        self.counts.deaths += 1
        slot.ready.clear()
        slot.pid = None
        log.error("elmo serve: worker %d died (exit code %s); starting a replacement", slot.index,
                  proc.process.exitcode)
        if slot.restarting is None or slot.restarting.done():
            slot.restarting = asyncio.ensure_future(self._replace(slot))

    async def _replace(self, slot: Slot) -> None:
        loop, pause = asyncio.get_running_loop(), 1.0
        await loop.run_in_executor(self._threads, slot.proc.stop, 0.0)
        while True:
            slot.proc = await loop.run_in_executor(self._threads, WorkerProcess, self.args)  # spawning takes a while
            answer = await loop.run_in_executor(self._threads, slot.proc.loaded)
            if not isinstance(answer, str):
                slot.pid, slot.load_seconds = answer[2], time.monotonic() - slot.proc.started
                self.counts.restarts += 1
                self.counts.failing_in_a_row = 0
                self._watch(slot)
                slot.ready.set()
                log.warning("elmo serve: worker %d replaced (pid %d) in %.1f s", slot.index, slot.pid,
                            slot.load_seconds)
                return
            self.counts.failed_loads += 1
            self.counts.failing_in_a_row += 1
            self.counts.last_error = answer
            log.error("elmo serve: worker %d's replacement did not load: %s; again in %.0f s", slot.index, answer,
                      pause)
            await loop.run_in_executor(self._threads, slot.proc.stop, 0.0)
            await asyncio.sleep(pause)
            pause = min(MAX_PAUSE, pause * 2)

    def retry_after(self) -> int:
        return max(1, math.ceil(max((s.load_seconds for s in self.slots), default=1.0)))

    async def wait_ready(self, index: int) -> None:
        self.attach()
        await self.slots[index].ready.wait()

    async def run(self, index: int, sentences: list[Sequence[str]], outputs: list[Any]) -> list[np.ndarray]:
        self.attach()
        slot = self.slots[index]
        proc = slot.proc
        try:
            return await self._loop.run_in_executor(self._threads, proc.call, sentences, outputs)
        except WorkerLost:
            # its pipe closed as it died: let it be reaped (else its exit code reads None), then note the death
            # here if the sentinel's turn has not come yet (a no-op after it)
            await self._loop.run_in_executor(self._threads, proc.process.join, 1.0)
            self._died(slot, proc)
            raise WorkerLost(f"the worker process computing this request died (killed or out of memory); it is "
                             f"being replaced: try again in {self.retry_after()} s", self.retry_after()) from None

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker: a running batch may finish for up to `timeout` seconds, then it is killed."""
        for slot in self.slots:
            if slot.restarting is not None and not slot.restarting.get_loop().is_closed():
                slot.restarting.cancel()
            if slot.watched is not None and self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(slot.watched)
                slot.watched = None
        procs = [slot.proc for slot in self.slots if slot.proc is not None]
        for proc in procs:  # every pipe closed first: the idle workers all end at once
            proc.conn.close()
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.stop(max(0.0, deadline - time.monotonic()))
        self._threads.shutdown(wait=False, cancel_futures=True)
