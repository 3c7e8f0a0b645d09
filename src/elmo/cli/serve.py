"""`elmo serve`: an HTTP embedding service with dynamic batching (docs/serving.md)."""

from __future__ import annotations

import argparse
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..errors import InputError, ModelFileError
from . import add_model_flags
from .lab import bind, positive


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve embeddings over HTTP (OpenAI's /v1/embeddings, /embed, /metrics)",
                       description="An HTTP service: POST /v1/embeddings (OpenAI's format), POST /embed (each token's "
                       "layers), GET /health, GET /metrics (Prometheus), GET /openapi.json. Concurrent requests are "
                       "batched; every sentence starts from zero state. SIGTERM finishes the requests in flight, then "
                       "exits. Needs the serve extra: pip install 'elmo-bilm[serve]'.")
    add_model_flags(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port (default: 8080; 0 picks a free one)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the server answers to besides IP addresses, localhost and --host (repeatable; "
                   "needed to reach it by name when bound to 0.0.0.0 or ::, against DNS rebinding)")
    p.add_argument("--int8", action="store_true", help="int8 matrix products on the CPU (docs/performance.md#int8-on-cpu)")
    p.add_argument("--layers", help="the layers the answers use, such as 1,2 (0 = token layer; default: all): "
                   "/v1/embeddings averages them, /embed returns them")
    p.add_argument("--max-batch-tokens", type=positive, default=4096, metavar="N",
                   help="tokens per model call, from as many waiting requests as fit (default: 4096; 1: one request "
                   "per call)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                   help="how long the oldest waiting request may wait for others to join its batch (default: 5)")
    p.add_argument("--workers", type=positive, default=1, metavar="N", help="model calls at once (default: 1)")
    p.add_argument("--threads", type=positive, metavar="N", help="torch threads per model call (default: torch's)")
    p.add_argument("--max-request-tokens", type=positive, default=16_384, metavar="N",
                   help="tokens in one request (default: 16384)")
    p.add_argument("--max-body-bytes", type=positive, default=4_000_000, metavar="N",
                   help="request body size (default: 4000000)")
    p.add_argument("--max-queue-tokens", type=positive, default=65_536, metavar="N",
                   help="tokens waiting for the model; beyond that a request gets 503 + Retry-After (default: 65536)")
    p.add_argument("--max-connections", type=positive, default=1000, metavar="N",
                   help="open connections at once, kept below the open-file limit (default: 1000)")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for a request's headers to arrive before the connection is closed (default: 10)")
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> tuple[int, ...] | None:
    """The numbers that argparse's types do not check, before the model loads."""
    from ..embed_file import parse_layers

    if not 0 < args.header_timeout <= 3600:
        raise InputError(f"--header-timeout {args.header_timeout:g}: must be above 0 and at most 3600 seconds")
    if not 0 <= args.max_wait_ms <= 60_000:
        raise InputError(f"--max-wait-ms {args.max_wait_ms:g}: must be between 0 and 60000")
    if args.max_queue_tokens < args.max_request_tokens:
        raise InputError(f"--max-queue-tokens {args.max_queue_tokens} is below --max-request-tokens "
                         f"{args.max_request_tokens}: a request of the largest size could never be queued")
    return parse_layers(args.layers)


def run(args: argparse.Namespace) -> int:
    try:
        from ..lab.hosts import host_names
        from ..lab.server import ServerLimits, make_server
        from ..serve.api import ServeLimits
        from ..serve.app import ModelShape, create_app
    except ImportError as e:
        raise InputError(f"elmo serve needs its extra ({e.name} is missing): pip install 'elmo-bilm[serve]'") from e
    from ..embed_file import OutputSpec
    from ..embedder import check_int8_choice
    from ..models import resolve
    from ..serve import worker

    layers = check_args(args)
    hosts = host_names(args.host, args.allowed_host)
    check_int8_choice(args.int8, "cpu", False)
    if args.int8:
        from ..int8 import check_kernel

        check_kernel()  # here, as one clear line, rather than as a worker that failed to start
    model = resolve(args.model, args.options, args.weights)  # downloads once, here; the workers get local files
    name = getattr(model, "name", None) or str(args.model or "default")
    sock = bind(args.host, args.port)
    executor = ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=worker.start, initargs=(model, args.int8, args.threads))
    try:
        try:
            shape = ModelShape(*executor.submit(worker.describe).result())
        except BrokenProcessPool as e:  # the worker's initializer failed; its traceback is on stderr above
            raise ModelFileError(f"{name}: the model could not be loaded in a worker process (its error is "
                                 "printed above)") from e
        if layers is not None:
            OutputSpec("all", layers).check_model(shape.num_layers)
        limits = ServeLimits(args.max_body_bytes, max_request_tokens=args.max_request_tokens,
                             max_queue_tokens=args.max_queue_tokens)
        app = create_app(shape, name, layers, limits, allowed_hosts=hosts, max_batch_tokens=args.max_batch_tokens,
                         max_wait_ms=args.max_wait_ms, workers=args.workers, compute=worker.compute, executor=executor)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"elmo serve: {name} at http://{shown}:{port}/  (POST /v1/embeddings, /embed; SIGTERM or Ctrl+C to "
              "stop)", flush=True)
        # uvicorn stops on SIGTERM (no new connections, the requests in flight answered), then raises the signal
        # again for the handler found before it: this one lets the command end normally, its workers shut down.
        signal.signal(signal.SIGTERM, lambda *_: None)
        make_server(app, ServerLimits(args.header_timeout, args.max_connections)).run(sockets=[sock])
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return 0
