"""The lab's HTTP server: uvicorn's h11 protocol with a header deadline and a connection cap.

uvicorn has neither: a client that sends its headers a byte every few seconds keeps its connection
(and a file descriptor) forever, and enough of them exhaust the process's file limit, after which
nobody gets in and the log fills with "Too many open files". Here each request's headers must be
complete within `header_seconds` of the connection becoming ready for them (new, or done with the
previous response), or the connection is closed with a 408; and the number of open connections is
capped below the file limit. At the cap, a new connection takes the place of the one that has waited
longest for its headers, if that one has waited at least `EVICT_AFTER` seconds (slow clients make room
for quick ones, and a quick client is never pushed out before it could send its headers); otherwise the
newcomer gets a 503. A refused connection is half-closed and what the client still sends is read and
dropped until it closes (at most `LINGER_SECONDS`), so the client reads the 503 rather than a reset.
"""

from __future__ import annotations

import asyncio
import functools
import resource
import socket
import time
from dataclasses import dataclass

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

FILES_KEPT_FREE = 64  # file descriptors left for the process itself (model files, logs, threads' pipes)
# The listen queue is also how many connections asyncio accepts in one turn of the event loop before any
# is checked against the cap. Below the file limit the cap keeps room for two such turns, the connections
# it closed whose descriptors close on the next turn, and the refused ones lingering: 4 backlogs.
MAX_BACKLOG = 64
EVICT_AFTER = 1.0  # seconds a connection may wait for its headers before a newcomer may take its place
LINGER_SECONDS = 2.0  # a refused connection's wait for its client to close (beyond the backlog's worth: none)
TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
               b"content-length: 44\r\n\r\nthe request headers did not arrive in time\r\n")
FULL_503 = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            b"retry-after: 1\r\ncontent-length: 42\r\n\r\nthe server has too many open connections\r\n")


@dataclass(frozen=True)
class ServerLimits:
    header_seconds: float = 10.0  # for a request's headers to arrive (`elmo lab --header-timeout`)
    max_connections: int = 1000  # open at once, capped below the file limit (`--max-connections`)


def file_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def backlog() -> int:
    return max(8, min(MAX_BACKLOG, file_limit() // 16))


def connection_cap(requested: int) -> int:
    """`requested`, or fewer so that the process's open-file limit is never reached (704 at 1,024 files)."""
    return max(1, min(requested, file_limit() - FILES_KEPT_FREE - 4 * backlog()))


class GuardedProtocol(H11Protocol):
    """H11Protocol plus the header deadline and the connection cap (one instance per connection)."""

    lingering: set[GuardedProtocol] = set()  # refused connections waiting for their client to close

    def __init__(self, *args, limits: ServerLimits, **kwargs):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.waiting_since: float | None = None  # when this connection began waiting for request headers
        self._armed_cycle = None
        self._deadline: asyncio.TimerHandle | None = None
        self._bytes_since_armed = False
        self.refused = False

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._evict_slowest():
            self._refuse()
            return
        self._arm()

    def _refuse(self) -> None:
        self.connections.discard(self)
        self.refused = True
        self.transport.write(FULL_503)
        if len(self.lingering) < backlog() and self.transport.can_write_eof():
            self.lingering.add(self)
            self.transport.write_eof()
            self._deadline = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # read and dropped: closing with unread data would send the client a reset
        self._bytes_since_armed = True
        super().data_received(data)
        if self.cycle is not self._armed_cycle:  # headers complete: a new request began
            self.waiting_since = None
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete:  # not already on a pipelined one
            self._arm()

    def connection_lost(self, exc) -> None:
        self.lingering.discard(self)
        self._disarm()
        self.waiting_since = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._armed_cycle, self._bytes_since_armed = self.cycle, False
        self.waiting_since = time.monotonic()
        self._deadline = self.loop.call_later(self.limits.header_seconds, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self.cycle is self._armed_cycle and not self.transport.is_closing():
            if self._bytes_since_armed:  # a request was under way: say why it ends
                self.transport.write(TIMEOUT_408)
            self.transport.close()

    def _evict_slowest(self) -> bool:
        """Close the connection that has waited longest for its headers; False when none has waited long."""
        oldest = time.monotonic() - min(EVICT_AFTER, self.limits.header_seconds / 2)
        waiting = [c for c in self.connections
                   if c is not self and isinstance(c, GuardedProtocol) and c.waiting_since is not None
                   and c.waiting_since <= oldest and not c.transport.is_closing()]
        if not waiting:
            return False
        slowest = min(waiting, key=lambda c: c.waiting_since)
        slowest.waiting_since = None
        slowest.transport.close()
        self.connections.discard(slowest)
        return True


def make_server(app, limits: ServerLimits = ServerLimits(), log_level: str = "warning") -> uvicorn.Server:
    """A uvicorn server for `app` with the guarded protocol (call `.run(sockets=[sock])`)."""
    limits = ServerLimits(limits.header_seconds, connection_cap(limits.max_connections))
    protocol = functools.partial(GuardedProtocol, limits=limits)
    config = uvicorn.Config(app, http=protocol, log_level=log_level, access_log=False, lifespan="off",
                            timeout_keep_alive=5, backlog=backlog())
    return uvicorn.Server(config)


def serve(app, sock: socket.socket, limits: ServerLimits = ServerLimits()) -> None:
    """Serve `app` on the bound socket `sock` until interrupted."""
    make_server(app, limits).run(sockets=[sock])
