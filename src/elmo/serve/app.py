"""The embedding server's ASGI app (Starlette): the endpoints, their errors, the metrics around them.

Model work goes through the `Batcher` (concurrent requests batched, a bounded line, 503 + Retry-After
beyond it); the request limits, the JSON body reader, the Host check and the HTTP server's header
deadline are the lab's (elmo.lab: app.read_json, hosts.check_host, server.make_server), shared rather
than copied. Every error is JSON, `{"error": {"message": ..., "type": ...}}` as OpenAI's API answers,
with a 4xx status for bad input.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..embed_file import OutputSpec
from ..embedder import Embedder
from ..errors import ElmoError
from ..lab.app import read_json
from ..lab.hosts import LOOPBACK, check_host
from ..lab.inputs import LabInputError
from .api import EmbeddingsRequest, EmbedRequest, ServeLimits
from .batcher import Batcher, QueueFull
from .metrics import Metrics
from .openapi import openapi_schema

log = logging.getLogger("elmo.serve")


def embedder_compute(embedder: Embedder, batch_size: int = 64):
    """The batcher's `compute` in this process: every sentence of a batch from zero state, sorted by length."""
    def compute(sentences: list[Sequence[str]]) -> list[np.ndarray]:
        return list(embedder.embed_sentences(sentences, layers="all", batch_size=batch_size))
    return compute


@dataclass(frozen=True)
class ModelShape:
    """What the app needs to know of a model that runs elsewhere (worker processes)."""

    num_layers: int
    dim: int

    @classmethod
    def of(cls, embedder: Embedder) -> ModelShape:
        if embedder.stateful:
            raise LabInputError("elmo serve runs stateless models only: each request's vectors must not depend "
                                "on others")
        return cls(embedder.bilm.num_layers, embedder.bilm.output_dim())


def error(message: str, status: int, kind: str = "invalid_request_error", headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status, headers=headers)


def create_app(model: Embedder | ModelShape, model_name: str, layers: tuple[int, ...] | None = None,
               limits: ServeLimits = ServeLimits(), batcher: Batcher | None = None,
               allowed_hosts: Collection[str] = LOOPBACK, max_batch_tokens: int = 4096, max_wait_ms: float = 5.0,
               workers: int = 1, compute=None, executor: Executor | None = None):
    """The ASGI app serving `model` under `model_name`: an `Embedder` (stateless) run in threads of this
    process, or the shape of one that `compute` runs in `executor` (the command's worker processes).
    `layers`: the layer numbers the answers use (None: all), checked against the model here."""
    shape = model if isinstance(model, ModelShape) else ModelShape.of(model)
    if layers is not None:
        OutputSpec("all", tuple(layers)).check_model(shape.num_layers)
    metrics = Metrics()
    batcher = batcher or Batcher(compute or embedder_compute(model), max_batch_tokens, max_wait_ms, workers,
                                 limits.max_queue_tokens, on_batch=metrics.observe_batch, executor=executor)
    info = {"status": "ok", "model": model_name, "layers": list(layers) if layers else None,
            "num_layers": shape.num_layers, "dim": shape.dim,
            "batching": {"max_batch_tokens": batcher.max_batch_tokens, "max_wait_ms": batcher.max_wait * 1000,
                         "workers": batcher.workers}, "limits": asdict(limits)}

    def endpoint(path: str, parse):
        async def handle(request: Request) -> Response:
            started = time.monotonic()
            try:
                parsed = parse(await read_json(request, limits), limits)
                arrays = await batcher.submit(parsed.sentences)
                response = JSONResponse(parsed.answer(arrays, layers, model_name))
            except Exception as e:
                response = await answer_error(request, e, batcher)
            metrics.requests.labels(path, str(response.status_code)).inc()
            metrics.latency.labels(path).observe(time.monotonic() - started)
            return response
        return handle

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({**info, "queued_tokens": batcher.queued_tokens, "running_tokens": batcher.running_tokens})

    async def get_metrics(request: Request) -> Response:
        metrics.queued_tokens.set(batcher.queued_tokens)
        return Response(metrics.render(), media_type=metrics.content_type)

    schema = openapi_schema(model_name)

    async def get_schema(request: Request) -> JSONResponse:
        return JSONResponse(schema)

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error(f"{exc.detail}: {request.method} {request.url.path}", exc.status_code)

    routes = [
        Route("/v1/embeddings", endpoint("/v1/embeddings", EmbeddingsRequest.parse), methods=["POST"]),
        Route("/embed", endpoint("/embed", EmbedRequest.parse), methods=["POST"]),
        Route("/health", health),
        Route("/metrics", get_metrics),
        Route("/openapi.json", get_schema),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    app.state.batcher, app.state.metrics = batcher, metrics
    guarded = check_host(app, allowed_hosts, "server")
    guarded.state = app.state  # the batcher and metrics, for the command and the tests
    return guarded


async def answer_error(request: Request, exc: Exception, batcher: Batcher) -> JSONResponse:
    """One JSON error for whatever went wrong: the caller's input (4xx), a full line (503), the model (500)."""
    if isinstance(exc, LabInputError):
        return error(str(exc), exc.status)
    if isinstance(exc, QueueFull):
        return error(str(exc), 503, "server_busy", {"retry-after": str(exc.retry_after)})
    if isinstance(exc, ElmoError):
        return error(f"the model could not answer: {exc}", 500, "model_error")
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error(f"internal error ({type(exc).__name__}); the server's log has the details", 500, "server_error")
