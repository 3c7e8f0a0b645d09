"""What every request passes through before and after the endpoints, in one ASGI wrapper: its request id
(`X-Request-Id` echoed when it is a sane one, else made), the Host check against DNS rebinding (the lab's
rule, `lab.hosts.host_allowed`), the API key (Bearer, compared in constant time; the probes `/health` and
`/ready` are open), the count by endpoint and status, and one access-log line (JSON, no bodies).
Refusals here have OpenAI's error shape, as the endpoints' do."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection

from starlette.responses import JSONResponse

from elmo.lab.hosts import host_allowed

access_log = logging.getLogger("elmo.serve.access")
OPEN_PATHS = ("/health", "/ready")  # probes answer without a key
REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# a request still running after --drain-seconds (uvicorn cancels it): 503, to be sent again (to another server)
STOPPING = JSONResponse(error_body("the server is stopping and this request was still running after its "
                                   "--drain-seconds; send it again", "server_error", None, "server_stopping"), 503,
                        headers={"retry-after": "1", "connection": "close"})


def key_matches(given: str, keys: Collection[bytes]) -> bool:
    """Whether `given` is one of `keys`, comparing every key in constant time (no early exit either)."""
    given_bytes = given.encode("utf-8", "surrogateescape")
    found = False
    for key in keys:
        found |= hmac.compare_digest(given_bytes, key)
    return found


def _refusal(scope, headers: dict) -> JSONResponse | None:
    """The Host check's and the key check's answer, or None to go on."""
    host = headers.get(b"host", b"").decode("latin-1")
    if not host_allowed(host, scope["elmo.hosts"]):
        return JSONResponse(error_body(f"Host {host or '(none)'!r} is not this server; reach it by its address "
                                       "(http://127.0.0.1:PORT/) or start it with --allowed-host NAME",
                                       "permission_error", None, "host_not_allowed"), 403)
    keys = scope["elmo.keys"]
    if keys and scope["path"] not in OPEN_PATHS:
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() != "bearer" or not key_matches(given.strip(), keys):
            what = "no API key was given" if not auth else "the API key given is not this server's"
            return JSONResponse(error_body(f"{what}: send the header 'Authorization: Bearer KEY'",
                                           "invalid_request_error", None, "invalid_api_key"), 401,
                                headers={"www-authenticate": "Bearer"})
    return None


def guard(app, hosts: Collection[str], keys: Collection[bytes], count: Callable[[str, int], None],
          endpoints: Collection[str]):
    """`app` behind the request id, the Host and key checks, the counts (`count(endpoint, status)`,
    paths outside `endpoints` counted as "other") and the access log."""
    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.monotonic()
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        seen = {"status": 500, "bytes": 0, "started": False}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                seen["status"], seen["started"] = message["status"], True
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode("latin-1"))]}
            elif message["type"] == "http.response.body":
                seen["bytes"] += len(message.get("body", b""))
            await send(message)

        scope = {**scope, "elmo.hosts": hosts, "elmo.keys": keys, "elmo.request_id": request_id}
        try:
            refusal = _refusal(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, send_with_id)
            else:
                await app(scope, receive, send_with_id)
        except asyncio.CancelledError as e:
            if "graceful shutdown" in str(e) and not seen["started"]:  # cut after --drain-seconds: say so
                await STOPPING(scope, receive, send_with_id)
            raise
        finally:
            path = scope["path"]
            count(path if path in endpoints else "other", seen["status"])
            access_log.info(json.dumps({
                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()), "request_id": request_id,
                "client": (scope.get("client") or ("",))[0], "method": scope["method"], "path": path[:200],
                "status": seen["status"], "bytes": seen["bytes"], "seconds": round(time.monotonic() - started, 4),
                **scope.get("elmo.log", {})}, ensure_ascii=True))
    return wrapped
