"""`elmo serve`'s HTTP server: the lab's guarded uvicorn protocol (header deadline, connection cap) plus
a send deadline, and a bound on the drain after SIGTERM.

A client that stops reading its answer keeps the answer in the server's memory for as long as its
connection lives (the socket's buffers fill, the rest waits in the process). Here, once the transport's
buffer is full (asyncio pauses writing), the reader has `send_seconds` to take some of it; if it does not,
the connection is aborted and its buffered bytes freed. Answers leave in `CHUNK` pieces, each awaited,
so an answer is never copied whole into the transport's buffer, and its bytes are released from the
`AnswerBudget` when the last piece is taken or the connection ends.
"""

from __future__ import annotations

import asyncio
import functools
import logging

import uvicorn
from starlette.responses import Response

from elmo.lab.server import GuardedProtocol, ServerLimits, backlog, connection_cap

log = logging.getLogger("elmo.serve")
CHUNK = 1 << 18  # bytes of an answer handed to the transport at a time


class Stalls:
    """Connections aborted because their reader stopped (for the metrics)."""

    count = 0


class SendDeadlineProtocol(GuardedProtocol):
    """GuardedProtocol plus the send deadline (one instance per connection)."""

    def __init__(self, *args, send_seconds: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.send_seconds = send_seconds
        self._send_timer: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.send_seconds, self._reader_stopped)

    def resume_writing(self) -> None:
        self._cancel_send_timer()
        super().resume_writing()

    def connection_lost(self, exc) -> None:
        self._cancel_send_timer()
        super().connection_lost(exc)

    def _cancel_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _reader_stopped(self) -> None:
        self._send_timer = None
        if not self.transport.is_closing() or self.transport.get_write_buffer_size():
            Stalls.count += 1
            log.warning("elmo serve: %s stopped reading its answer for %g s; connection closed",
                        (self.client or ("?",))[0], self.send_seconds)
            self.transport.abort()  # close() would wait, forever, to flush what the reader never takes


class AnswerBudget:
    """Bytes of answers admitted and not yet sent, all requests together, against `limit`."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0

    def fits(self, size: int) -> bool:
        return self.held + size <= self.limit

    def take(self, size: int) -> None:
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


class ChunkedResponse(Response):
    """A response whose body leaves in `CHUNK` pieces, each awaited (the transport's flow control),
    calling `done()` once the body has gone or the connection has ended."""

    def __init__(self, body: bytes, done, **kwargs):
        super().__init__(body, **kwargs)
        self.done = done

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            view = memoryview(self.body)
            for start in range(0, len(view), CHUNK):
                await send({"type": "http.response.body", "body": bytes(view[start : start + CHUNK]),
                            "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.done()


def make_server(app, limits: ServerLimits, send_seconds: float, drain_seconds: float,
                log_level: str = "warning") -> uvicorn.Server:
    """A uvicorn server for `app` (call `.run(sockets=[sock])`): after SIGTERM it stops accepting, waits up
    to `drain_seconds` for the requests in flight, then cancels what is left."""
    limits = ServerLimits(limits.header_seconds, connection_cap(limits.max_connections))
    protocol = functools.partial(SendDeadlineProtocol, limits=limits, send_seconds=send_seconds)
    config = uvicorn.Config(app, http=protocol, log_level=log_level, access_log=False, lifespan="off",
                            timeout_keep_alive=5, backlog=backlog(), timeout_graceful_shutdown=drain_seconds)
    logging.getLogger("uvicorn.error").addFilter(quiet_cut_requests)  # after Config: it sets up uvicorn's logs
    return uvicorn.Server(config)


def quiet_cut_requests(record: logging.LogRecord) -> bool:
    """Drop uvicorn's traceback for each request cut after --drain-seconds: its line "Cancel N running
    task(s), timeout graceful shutdown exceeded" already says so, and a stop is no error of the program."""
    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, asyncio.CancelledError) and "graceful shutdown" in str(exc))
