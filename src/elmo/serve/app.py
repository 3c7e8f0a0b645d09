"""The embedding server's ASGI app (Starlette): the endpoints, their errors, the metrics around them.

Model work goes through the `Batcher` (concurrent requests batched, a bounded line, 503 + Retry-After
beyond it); the request limits and the JSON body reader are the lab's (elmo.lab: app.read_json), the
Host check its rule (hosts.host_allowed), shared rather than copied. Every error is JSON in OpenAI's
shape, `{"error": {"message", "type", "param", "code"}}`, with a 4xx status for bad input, 503 +
Retry-After while the server cannot take the work. Before any model work a request's answer size is
known and reserved (`AnswerBudget`); while it waits, its client's disconnect takes it out of the line.
`/health` is liveness (200 while the server works or heals itself), `/ready` readiness (200 while a
worker can take a batch).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from elmo.embed.embedder import Embedder
from elmo.embed.output_file import OutputSpec
from elmo.errors import ElmoError
from elmo.lab.admission import wait_for_disconnect
from elmo.lab.app import read_json
from elmo.lab.hosts import LOOPBACK
from elmo.lab.inputs import LabInputError

from .api import EmbeddingsRequest, EmbedRequest, ModelShape, RequestError, ServeLimits
from .batcher import Batcher, ClientGone, QueueFull, WorkerLost
from .http import AnswerBudget, ChunkedResponse, Stalls
from .metrics import Metrics
from .middleware import error_body, guard
from .openapi import openapi_schema

log = logging.getLogger("elmo.serve")
ENDPOINTS = ("/v1/embeddings", "/embed", "/v1/models", "/health", "/ready", "/metrics", "/openapi.json")
CREATED = int(time.time())


def embedder_compute(embedder: Embedder, batch_size: int = 64):
    """The batcher's `compute` in this process: every sentence of a batch from zero state, sorted by length."""
    def compute(sentences: list[Sequence[str]]) -> list[np.ndarray]:
        return list(embedder.embed_sentences(sentences, layers="all", batch_size=batch_size))
    return compute


def shape_of(embedder: Embedder) -> ModelShape:
    if embedder.stateful:
        raise LabInputError("elmo serve runs stateless models only: each request's vectors must not depend on others")
    return ModelShape(embedder.bilm.num_layers, embedder.bilm.output_dim())


def error(message: str, status: int, kind: str = "invalid_request_error", headers: dict | None = None,
          param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param, code), status_code=status, headers=headers)


def create_app(model: Embedder | ModelShape, model_name: str, layers: tuple[int, ...] | None = None,
               limits: ServeLimits = ServeLimits(), batcher: Batcher | None = None,
               allowed_hosts: Collection[str] = LOOPBACK, max_batch_tokens: int = 4096, max_wait_ms: float = 5.0,
               workers: int = 1, compute=None, runner=None, api_keys: Collection[bytes] = ()):
    """The ASGI app serving `model` under `model_name`: an `Embedder` (stateless) run in threads of this
    process, or the shape of one that `runner` runs (the command's worker processes, pool.ProcessRunner).
    `layers`: the layer numbers the answers use (None: all), checked against the model here. `api_keys`:
    the keys a request may carry (none: no key asked)."""
    shape = model if isinstance(model, ModelShape) else shape_of(model)
    if layers is not None:
        OutputSpec("all", tuple(layers)).check_model(shape.num_layers)
    budget = AnswerBudget(limits.max_answer_bytes)
    metrics = Metrics(lambda: live_state(batcher, budget))
    batcher = batcher or Batcher(compute or embedder_compute(model), max_batch_tokens, max_wait_ms, workers,
                                 limits.max_queue_tokens, on_batch=metrics.observe_batch, runner=runner)
    served = Served(shape, layers, limits, model_name, batcher, budget, metrics)
    info = {"model": model_name, "layers": list(layers) if layers else None, "num_layers": shape.num_layers,
            "dim": shape.dim, "batching": {"max_batch_tokens": batcher.max_batch_tokens,
                                           "max_wait_ms": batcher.max_wait * 1000, "workers": batcher.workers},
            "limits": asdict(limits)}

    async def health(request: Request) -> JSONResponse:
        failing = getattr(batcher.runner, "failing", False)
        return JSONResponse({"status": "failing" if failing else "ok", **info, **workers_state(batcher),
                             "queued_tokens": batcher.queued_tokens, "running_tokens": batcher.running_tokens},
                            status_code=503 if failing else 200)

    async def ready(request: Request) -> JSONResponse:
        state = workers_state(batcher)
        ok = state["workers_ready"] > 0
        return JSONResponse({"ready": ok, "model": model_name, **state}, status_code=200 if ok else 503)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [model_card(model_name)]})

    async def one_model(request: Request) -> JSONResponse:
        if request.path_params["name"] != model_name:
            return error(f"the model {request.path_params['name']!r} is not served here; this server serves "
                         f"{model_name!r}", 404, param="model", code="model_not_found")
        return JSONResponse(model_card(model_name))

    async def get_metrics(request: Request) -> Response:
        metrics.queued_tokens.set(batcher.queued_tokens)
        return Response(metrics.render(), media_type=metrics.content_type)

    schema = openapi_schema(model_name)

    async def get_schema(request: Request) -> JSONResponse:
        return JSONResponse(schema)

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error(f"{exc.detail}: {request.method} {request.url.path}", exc.status_code,
                     code="not_found" if exc.status_code == 404 else None)

    routes = [
        Route("/v1/embeddings", embedding_endpoint("/v1/embeddings", EmbeddingsRequest.parse, served),
              methods=["POST"]),
        Route("/embed", embedding_endpoint("/embed", EmbedRequest.parse, served), methods=["POST"]),
        Route("/v1/models", models), Route("/v1/models/{name:path}", one_model),
        Route("/health", health), Route("/ready", ready), Route("/metrics", get_metrics),
        Route("/openapi.json", get_schema),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    guarded = guard(app, allowed_hosts, tuple(api_keys),
                    lambda path, status: metrics.requests.labels(path, str(status)).inc(), ENDPOINTS)
    guarded.state = app.state
    app.state.batcher, app.state.metrics, app.state.budget = batcher, metrics, budget
    return guarded


@dataclass(frozen=True)
class Served:
    """What the embedding endpoints share."""

    shape: ModelShape
    layers: tuple[int, ...] | None
    limits: ServeLimits
    model_name: str
    batcher: Batcher
    budget: AnswerBudget
    metrics: Metrics


def embedding_endpoint(path: str, parse, served: Served):
    """POST /v1/embeddings or /embed: checked, its answer's bytes reserved, batched (leaving the line if its
    client leaves), answered in pieces; the reservation given back once the answer is sent."""
    limits, budget, batcher, layers = served.limits, served.budget, served.batcher, served.layers

    async def handle(request: Request) -> Response:
        started, size = time.monotonic(), 0
        try:
            parsed = parse(await read_json(request, limits), limits, served.shape, layers)
            request.scope["elmo.log"] = {"tokens": sum(len(s) for s in parsed.sentences)}
            admit(parsed.answer_bytes, budget, batcher)
            size = parsed.answer_bytes
            arrays = await batcher.submit(parsed.sentences, parsed.output,
                                          lambda: wait_for_disconnect(request.receive))
            body = JSONResponse(parsed.answer(arrays, layers, served.model_name)).body
            del arrays
            response = ChunkedResponse(body, lambda held=size: budget.give_back(held),
                                       media_type="application/json")
            size = 0  # the response gives it back once sent
        except Exception as e:
            response = await answer_error(request, e)
        finally:
            budget.give_back(size)
        served.metrics.latency.labels(path).observe(time.monotonic() - started)
        return response
    return handle


def model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": CREATED, "owned_by": "elmo"}


def workers_state(batcher: Batcher) -> dict:
    runner = batcher.runner
    ready = getattr(runner, "ready_workers", batcher.workers)
    counts = getattr(runner, "counts", None)
    pids = getattr(runner, "pids", dict)()
    return {"workers_ready": ready, "workers": batcher.workers, "worker_pids": [pids.get(i) for i in range(
            batcher.workers)] if pids else [], "worker_restarts": counts.restarts if counts else 0,
            "worker_deaths": counts.deaths if counts else 0}


def live_state(batcher: Batcher | None, budget: AnswerBudget) -> dict:
    """What the metrics read at each scrape."""
    runner = batcher.runner if batcher is not None else None
    pids = getattr(runner, "pids", dict)()
    workers = workers_state(batcher) if batcher is not None else {"workers_ready": 0, "worker_restarts": 0}
    return {"dropped_waiting": batcher.dropped.waiting if batcher else 0,
            "dropped_running": batcher.dropped.running if batcher else 0, "send_timeouts": Stalls.count,
            "answer_bytes_held": budget.held, "workers_ready": workers["workers_ready"],
            "worker_restarts": workers["worker_restarts"],
            "processes": {"http": os.getpid(), **{f"worker-{i}": pid for i, pid in pids.items()}}}


def admit(size: int, budget: AnswerBudget, batcher: Batcher) -> None:
    """Reserve an answer's bytes, or 503 while the answers already admitted hold too much."""
    if not budget.fits(size):
        raise QueueFull(batcher.retry_after(), batcher.queued_tokens, batcher.max_queue_tokens, answer_bytes=(
            budget.held, budget.limit))
    budget.take(size)


async def answer_error(request: Request, exc: Exception) -> Response:
    """One JSON error for whatever went wrong: the caller's input (4xx), a full line or a lost worker (503),
    the model (500); nothing for a client that left (499 in the counts and the log)."""
    if isinstance(exc, ClientGone):
        return Response(status_code=499)
    if isinstance(exc, RequestError):
        return error(str(exc), exc.status, param=exc.param, code=exc.code)
    if isinstance(exc, LabInputError):
        return error(str(exc), exc.status)
    if isinstance(exc, QueueFull):
        return error(str(exc), 503, "server_busy", {"retry-after": str(exc.retry_after)}, code="server_busy")
    if isinstance(exc, WorkerLost):
        return error(str(exc), 503, "server_error", {"retry-after": str(exc.retry_after)}, code="worker_restarting")
    if isinstance(exc, ElmoError):
        return error(f"the model could not answer: {exc}", 500, "model_error")
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error(f"internal error ({type(exc).__name__}); the server's log has the details", 500, "server_error")
