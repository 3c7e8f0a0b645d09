"""The lab's web app (Starlette): the page, its static files, and one JSON endpoint per panel.

The model and the reference set are loaded before the app is made and only read afterwards, so
requests share nothing else. Model work runs in a worker thread, never on the event loop, admitted by
`Admission` (a bounded number run and wait; more get 503 with Retry-After; a client that hangs up has
its work dropped or stopped). Every error is JSON, `{"error": "..."}`, with a 4xx status for bad input.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from dataclasses import asdict
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from elmo.errors import ElmoError

from . import panels_tasks, panels_words
from .admission import Admission, ClientGone, LabBusy, install_checkpoints, wait_for_disconnect
from .examples import AMBIGUOUS
from .hosts import LOOPBACK, check_host
from .inputs import LabInputError, Limits
from .lab_models import LabModels
from .panels_layers import layer_views
from .reference import ReferenceSet

STATIC = Path(__file__).parent / "static"
# Everything comes from this server: no CDN, no outside fonts; the page works offline.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
]


async def read_json(request: Request, limits: Limits) -> dict:
    """The request body as a JSON object, refusing bodies over the limit before reading them whole.

    Only `application/json` is taken: a cross-site page can POST text/plain without asking, but not
    JSON. A body that stops short of its Content-Length is given `limits.body_seconds` to arrive.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise LabInputError(f"the request body must be sent as application/json, found {kind or 'no content-type'}",
                            415)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise LabInputError(f"request body is {declared} bytes; this server takes at most {limits.max_body_bytes}",
                            413)
    try:
        body = await asyncio.wait_for(read_body(request, limits), limits.body_seconds)
    except asyncio.TimeoutError:
        raise LabInputError(f"the request body did not arrive within {limits.body_seconds:g} s (Content-Length "
                            f"{declared or 'not given'})", 408) from None
    return parse_json_object(body)


async def read_body(request: Request, limits: Limits) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limits.max_body_bytes:
            raise LabInputError(f"request body is over {limits.max_body_bytes} bytes; this server takes at most that",
                                413)
    return bytes(body)


def parse_json_object(body: bytes) -> dict:
    """A JSON object whose strings are valid Unicode (a lone surrogate such as "\\ud800" is refused here,
    not when a panel encodes it), nested no deeper than Python's JSON parser manages."""
    try:
        payload = json.loads(body.decode("utf-8"))
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise LabInputError(f"the request body holds a lone surrogate ({e.object[e.start:e.end]!a}), which is not "
                            "text; send valid Unicode") from None
    except RecursionError:
        raise LabInputError("the request body is nested too deeply to be a request here") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise LabInputError(f"the request body is not valid JSON ({e})") from None
    if not isinstance(payload, dict):
        raise LabInputError("the request body must be a JSON object")
    return payload


def security_headers(app):
    """ASGI wrapper adding the headers above to every response."""
    async def wrapped(scope, receive, send):
        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + SECURITY_HEADERS
            await send(message)
        await app(scope, receive, send_with_headers if scope["type"] == "http" else send)
    return wrapped


def create_app(lab: LabModels, ref: ReferenceSet, limits: Limits = Limits(),
               allowed_hosts: Collection[str] = LOOPBACK, admission: Admission | None = None):
    """The ASGI app serving `lab` with neighbours from `ref`, to requests naming an IP address or one of
    `allowed_hosts` (see hosts.py), its model work admitted by `admission` (default: from `limits`)."""
    views = layer_views(ref)
    admission = admission or Admission(limits.max_running, limits.max_waiting)
    install_checkpoints(lab.bilm)
    info = {**lab.info(), "examples": AMBIGUOUS, "limits": asdict(limits),
            "reference": {"tokens": ref.size, "sentences": len(ref.sources),
                          "sources": sorted(set(ref.sources.tolist())),
                          "data": str(lab.data_dir) if lab.data_dir else ""}}

    def post(fn):
        async def endpoint(request: Request) -> JSONResponse:
            payload = await read_json(request, limits)
            result = await admission.run(lambda: fn(lab, ref, payload, limits),
                                         lambda: wait_for_disconnect(request.receive))
            return JSONResponse(result)
        return endpoint

    async def index(request: Request) -> FileResponse:
        return FileResponse(STATIC / "index.html")

    # Rendered once: these light answers cost the event loop a copy, not a JSON encoding of every point.
    info_body, views_body = JSONResponse(info).body, JSONResponse(views).body

    async def get_info(request: Request) -> Response:
        return Response(info_body, media_type="application/json")

    async def get_layers(request: Request) -> Response:
        return Response(views_body, media_type="application/json")

    async def get_results(request: Request) -> JSONResponse:
        return JSONResponse(panels_tasks.results(lab, ref, {}, limits))

    async def get_load(request: Request) -> JSONResponse:
        return JSONResponse(admission.snapshot())

    async def busy(request: Request, exc: LabBusy) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"retry-after": str(exc.retry_after)})

    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    async def input_error(request: Request, exc: LabInputError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = f"{exc.detail}: {request.method} {request.url.path}"
        return JSONResponse({"error": message}, status_code=exc.status_code)

    async def model_error(request: Request, exc: ElmoError) -> JSONResponse:
        return JSONResponse({"error": f"the model could not answer: {exc}"}, status_code=500)

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"internal error ({type(exc).__name__}); the lab's log has the details"},
                            status_code=500)

    routes = [
        Route("/", index),
        Route("/api/info", get_info),
        Route("/api/contextual", post(panels_words.contextual), methods=["POST"]),
        Route("/api/build", post(panels_words.build), methods=["POST"]),
        Route("/api/mix", post(panels_words.mix), methods=["POST"]),
        Route("/api/tag", post(panels_tasks.tag), methods=["POST"]),
        Route("/api/layers", get_layers),
        Route("/api/directions", post(panels_tasks.directions), methods=["POST"]),
        Route("/api/results", get_results),
        Route("/api/load", get_load),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        LabInputError: input_error, LabBusy: busy, ClientGone: client_gone, HTTPException: http_error,
        ElmoError: model_error, Exception: internal_error})
    return security_headers(check_host(app, allowed_hosts))
