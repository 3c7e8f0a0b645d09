"""Which Host headers the lab answers: the defence against DNS rebinding, for every `--host`.

A page on another site can make a browser send requests to the lab under the page's own name (its
DNS answer changed to this machine's address); the Host header then carries that name. The lab
answers only:
- an IP address literal (a browser reaches it by that address; DNS plays no part, so it cannot be
  rebound), any port;
- `localhost` (browsers resolve it themselves);
- the address or name given with `--host`, and for a wildcard bind (0.0.0.0, ::) this machine's own
  host name;
- every name given with `--allowed-host` (repeatable).
Everything else gets a 403, for every method, before the app runs.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Collection, Iterable

from starlette.responses import JSONResponse

from elmo.errors import InputError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def host_names(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a lab bound to `bind_host` answers to (IP literals are always answered)."""
    names = set(LOOPBACK)
    bind = bind_host.strip("[]").lower()
    if bind in WILDCARDS:
        own = socket.gethostname().lower()
        names.update({own, own.split(".")[0]})
    else:
        names.add(bind)
    for name in extra:
        clean = name.strip().strip("[]").lower().rstrip(".")
        if not clean or clean == "*" or any(c in clean for c in "/:@ *"):
            raise InputError(f"--allowed-host {name!r}: give one host name as a browser would send it "
                             "(e.g. lab.example.org), not a pattern, port or URL")
        names.add(clean)
    return frozenset(names)


def header_name(host: str) -> str:
    """The name part of a Host header: "[::1]:8765" -> "::1", "Lab.Example.:80" -> "lab.example"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0].rstrip(".") if host.count(":") == 1 else host.rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(host: str, names: Collection[str]) -> bool:
    name = header_name(host)
    return bool(name) and (name in names or is_ip_literal(name))


def check_host(app, names: Collection[str], what: str = "lab"):
    """ASGI wrapper answering 403 to a Host header that names another server (DNS rebinding); `what`
    names this one in the message (`elmo serve` shares it)."""
    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if not host_allowed(host, names):
                response = JSONResponse({"error": f"Host {host or '(none)'!r} is not this {what}; open it by its "
                                         "address (http://127.0.0.1:PORT/) or start it with --allowed-host "
                                         "NAME"}, status_code=403)
                await response(scope, receive, send)
                return
        await app(scope, receive, send)
    return wrapped
