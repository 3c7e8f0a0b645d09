"""Admission of model work: a bounded number of computations run, a bounded number wait, the rest get 503.

Only requests that run the model (the panels' POST endpoints) pass through here; the page, its static
files and the GET endpoints are answered from memory on the event loop and are never refused for
model work. A computation whose client hangs up is dropped while it waits, and stopped at the
model's next layer while it runs (a forward pre-hook on every module of the biLM checks a flag
carried in a context variable of the worker thread). When the last computation ends, freed memory
is handed back to the operating system (the embedder keeps it for speed between batches).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import ctypes.util
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import torch
from starlette.concurrency import run_in_threadpool

_cancel_flag: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("elmo_lab_cancel", default=None)


class LabBusy(Exception):
    """Every computing slot and every waiting place is taken: answer 503 with `retry_after` seconds."""

    def __init__(self, retry_after: int, running: int, waiting: int):
        super().__init__(f"the lab is busy: {running} computations running and {waiting} waiting, the most it "
                         f"takes; try again in {retry_after} s")
        self.retry_after = retry_after


class WorkCancelled(Exception):
    """Raised inside a computation whose client disconnected."""


class ClientGone(Exception):
    """The client hung up before its computation finished (or started); nobody is left to answer."""


def check_cancelled() -> None:
    """Stop the current computation if its client has gone (a no-op outside lab requests)."""
    flag = _cancel_flag.get()
    if flag is not None and flag.is_set():
        raise WorkCancelled("the client disconnected")


def install_checkpoints(module: torch.nn.Module) -> None:
    """Make every submodule's forward a point where a cancelled computation stops (once per module)."""
    for sub in module.modules():
        if not getattr(sub, "_elmo_lab_checkpoint", False):
            sub.register_forward_pre_hook(lambda _module, _args: check_cancelled())
            sub._elmo_lab_checkpoint = True


def _run_with_flag(flag: threading.Event, work: Callable[[], Any]) -> Any:
    token = _cancel_flag.set(flag)
    try:
        return work()
    finally:
        _cancel_flag.reset(token)


@dataclass
class Counts:
    served: int = 0
    refused: int = 0  # 503
    dropped_waiting: int = 0  # client gone before its computation started
    stopped_running: int = 0  # client gone while it ran: stopped at the next layer
    trims: int = 0  # times freed memory was handed back


class Admission:
    """At most `max_running` computations at once and `max_waiting` in line; more is refused."""

    def __init__(self, max_running: int, max_waiting: int, trim_memory: bool = True):
        if max_running < 1 or max_waiting < 0:
            raise ValueError(f"max_running must be >= 1 and max_waiting >= 0, found {max_running}, {max_waiting}")
        self.max_running, self.max_waiting = max_running, max_waiting
        self.running = self.waiting = 0
        self.counts = Counts()
        self.mean_seconds = 1.0  # running mean of a computation's duration, for Retry-After
        self._slots: asyncio.Semaphore | None = None
        self.trim_memory = trim_memory

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the line ahead, at the measured speed."""
        ahead = (self.running + self.waiting) / self.max_running
        return max(1, min(120, math.ceil(ahead * self.mean_seconds)))

    def snapshot(self) -> dict:
        return {"running": self.running, "waiting": self.waiting, "max_running": self.max_running,
                "max_waiting": self.max_waiting, "mean_seconds": round(self.mean_seconds, 4),
                **vars(self.counts)}

    async def run(self, work: Callable[[], Any], disconnected: Callable[[], Awaitable[None]]) -> Any:
        """`work()` in a worker thread once a slot is free; LabBusy when the line is full, ClientGone
        when `disconnected()` returns first (the work is then never started, or stopped)."""
        if self.running + self.waiting >= self.max_running + self.max_waiting:
            self.counts.refused += 1
            raise LabBusy(self.retry_after(), self.running, self.waiting)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_running)
        gone = asyncio.ensure_future(disconnected())
        try:
            await self._wait_for_slot(gone)
            try:
                return await self._compute(work, gone)
            finally:
                self.running -= 1
                self._slots.release()
                if self.running == 0 and self.waiting == 0 and self.trim_memory:
                    self.counts.trims += 1
                    asyncio.get_running_loop().run_in_executor(None, release_freed_memory)
        finally:
            gone.cancel()

    async def _wait_for_slot(self, gone: asyncio.Future) -> None:
        self.waiting += 1
        slot = asyncio.ensure_future(self._slots.acquire())
        try:
            await asyncio.wait({slot, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1
        if not slot.done():
            slot.cancel()
            self.counts.dropped_waiting += 1
            raise ClientGone
        self.running += 1

    async def _compute(self, work: Callable[[], Any], gone: asyncio.Future) -> Any:
        flag = threading.Event()
        started = time.monotonic()
        job = asyncio.ensure_future(run_in_threadpool(_run_with_flag, flag, work))
        await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not job.done():
            flag.set()  # the thread stops at its next checkpoint; its slot stays taken until then
            self.counts.stopped_running += 1
            try:
                await job
            except WorkCancelled:
                pass
            raise ClientGone
        result = job.result()  # a computation's own error propagates to the app's handlers
        self.mean_seconds = 0.8 * self.mean_seconds + 0.2 * (time.monotonic() - started)
        self.counts.served += 1
        return result


async def wait_for_disconnect(receive) -> None:
    """Return once the ASGI server reports the client gone (call only after the body was read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def release_freed_memory() -> bool:
    """Hand freed heap memory back to the OS (glibc's malloc_trim); False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))
