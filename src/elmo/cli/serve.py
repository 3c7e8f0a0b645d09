"""`elmo serve`: an HTTP embedding service with dynamic batching (docs/serving.md)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

from elmo.errors import InputError
from elmo.files.output_paths import CONTROL_CHARACTERS

from . import add_model_flags
from .lab import bind, positive

ARCHIVE_ENDINGS = (".tar.gz", ".tgz", ".tar", ".zip", ".hdf5", ".json")
STOP_GRACE = 1.0  # seconds the workers get to end after the server stops (an idle one ends at once)
THREADS_DEFAULT = 1  # torch threads per worker when --threads is not given: measured, docs/serving.md#threads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve embeddings over HTTP (OpenAI's /v1/embeddings, /embed, /metrics)",
                       description="An HTTP service: POST /v1/embeddings (OpenAI's format), POST /embed (each token's "
                       "layers), GET /v1/models, GET /health (liveness), GET /ready (readiness), GET /metrics "
                       "(Prometheus), GET /openapi.json. Concurrent requests are batched; every sentence starts from "
                       "zero state; a worker process that dies is replaced. SIGTERM finishes the requests in flight "
                       "(at most --drain-seconds), then exits. Needs the serve extra: pip install 'elmo-bilm[serve]'.")
    add_model_flags(p)
    p.add_argument("--name", help="the model's name in answers, /health and /v1/models (default: the --model name, or "
                   "the last part of its path or URL: never a path of this machine)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port (default: 8080; 0 picks a free one)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the server answers to besides IP addresses, localhost and --host (repeatable; "
                   "needed to reach it by name when bound to 0.0.0.0 or ::, against DNS rebinding)")
    p.add_argument("--api-key", metavar="env:VAR|file:PATH",
                   help="require 'Authorization: Bearer KEY' (except /health and /ready): the key from environment "
                   "variable VAR (several: comma-separated) or the lines of file PATH; never the key itself, which "
                   "every user of the machine could read in the process list")
    p.add_argument("--int8", action="store_true", help="int8 matrix products on the CPU (docs/performance.md#int8-on-cpu)")
    p.add_argument("--layers", help="the layers the answers use, such as 1,2 (0 = token layer; default: all): "
                   "/v1/embeddings averages them, /embed returns them")
    p.add_argument("--max-batch-tokens", type=positive, default=4096, metavar="N",
                   help="tokens per model call, from as many waiting requests as fit (default: 4096; 1: one request "
                   "per call)")
    p.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                   help="how long the oldest waiting request may wait for others to join its batch (default: 5)")
    p.add_argument("--workers", type=positive, default=1, metavar="N",
                   help="worker processes, each with its own copy of the model: model calls at once (default: 1; at "
                   "most the CPUs this process may use)")
    p.add_argument("--threads", type=positive, metavar="N",
                   help=f"torch threads per worker (default: {THREADS_DEFAULT}, measured best on shared and dedicated "
                   "cores alike: docs/serving.md)")
    p.add_argument("--max-request-tokens", type=positive, default=16_384, metavar="N",
                   help="tokens in one request (default: 16384)")
    p.add_argument("--max-body-bytes", type=positive, default=4_000_000, metavar="N",
                   help="request body size (default: 4000000)")
    p.add_argument("--max-queue-tokens", type=positive, default=65_536, metavar="N",
                   help="tokens waiting for the model; beyond that a request gets 503 + Retry-After (default: 65536)")
    p.add_argument("--max-answer-floats", type=positive, default=2_097_152, metavar="N",
                   help="numbers in one answer written as JSON text; more gets 413 asking for base64 (default: "
                   "2097152)")
    p.add_argument("--max-answer-bytes", type=positive, default=268_435_456, metavar="N",
                   help="bytes of answers being computed or sent at once, all requests together; beyond it a request "
                   "gets 503 + Retry-After (default: 268435456)")
    p.add_argument("--send-timeout", type=float, default=30.0, metavar="S",
                   help="seconds a client may stop reading its answer before its connection is closed (default: 30)")
    p.add_argument("--drain-seconds", type=float, default=30.0, metavar="S",
                   help="after SIGTERM, how long the requests in flight may take before they are cut (default: 30)")
    p.add_argument("--no-access-log", action="store_true",
                   help="no access-log line per request (default: one JSON line on stderr per request, no bodies)")
    p.add_argument("--max-connections", type=positive, default=1000, metavar="N",
                   help="open connections at once, kept below the open-file limit (default: 1000)")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for a request's headers to arrive before the connection is closed (default: 10)")
    p.set_defaults(func=run)


def check_text(value: str | None, flag: str) -> None:
    """A host, name or path flag: no NUL or other control character (one line naming the flag)."""
    bad = next((c for c in value or "" if c in CONTROL_CHARACTERS), None)
    if bad is not None:
        shown = "".join(f"\\x{ord(c):02x}" if c in CONTROL_CHARACTERS else c for c in value)
        raise InputError(f"{flag} '{shown}': holds the control character \\x{ord(bad):02x}; give it without control "
                         "characters")


def check_args(args: argparse.Namespace) -> tuple[int, ...] | None:
    """What argparse's types do not check, before the model loads."""
    from elmo.embed.output_file import parse_layers
    from elmo.model.threads import usable_cpus

    for flag in ("host", "name", "model", "options", "weights", "api_key", "layers"):
        check_text(getattr(args, flag), "--" + flag.replace("_", "-"))
    for name in args.allowed_host:
        check_text(name, "--allowed-host")
    for flag, value, most in (("--header-timeout", args.header_timeout, 3600), ("--send-timeout", args.send_timeout,
                              3600), ("--drain-seconds", args.drain_seconds, 3600)):
        if not 0 < value <= most:
            raise InputError(f"{flag} {value:g}: must be above 0 and at most {most} seconds")
    if not 0 <= args.max_wait_ms <= 60_000:
        raise InputError(f"--max-wait-ms {args.max_wait_ms:g}: must be between 0 and 60000")
    if args.max_queue_tokens < args.max_request_tokens:
        raise InputError(f"--max-queue-tokens {args.max_queue_tokens} is below --max-request-tokens "
                         f"{args.max_request_tokens}: a request of the largest size could never be queued")
    cpus = usable_cpus()
    if args.workers > cpus:
        raise InputError(f"--workers {args.workers}: this process may use {cpus} CPU(s) (its affinity and cgroup "
                         f"quota), so at most {cpus} workers can run at once; each more only adds a model copy")
    if args.threads is not None and args.threads > cpus:
        raise InputError(f"--threads {args.threads}: this process may use {cpus} CPU(s); at most {cpus}")
    return parse_layers(args.layers)


def api_keys(source: str | None) -> tuple[bytes, ...]:
    """The keys `--api-key env:VAR|file:PATH` names (none without the flag)."""
    if source is None:
        return ()
    kind, _, where = source.partition(":")
    if kind == "env" and where:
        text = os.environ.get(where, "")
        keys = [k.strip() for k in text.split(",") if k.strip()]
        origin = f"environment variable {where}"
    elif kind == "file" and where:
        try:
            lines = Path(where).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"--api-key {source}: cannot read the key file ({getattr(e, 'strerror', None) or e})") \
                from None
        keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        origin = f"file {where}"
    else:
        raise InputError("--api-key: give env:VAR (the key in environment variable VAR) or file:PATH (one key a line), "
                         "not the key itself: a command line is readable by every user of the machine (ps)")
    if not keys:
        raise InputError(f"--api-key {source}: the {origin} holds no key")
    bad = next((k for k in keys if not k.isascii() or not k.isprintable() or " " in k), None)
    if bad is not None:
        raise InputError(f"--api-key {source}: a key must be printable ASCII without spaces (it travels in an HTTP "
                         "header)")
    return tuple(k.encode("ascii") for k in keys)


def served_name(args: argparse.Namespace) -> str:
    """The model's public name: --name, a registry name as given, or the last part of a path or URL (a
    path of the server's machine is nobody else's business)."""
    if args.name:
        return args.name
    text = str(args.weights if args.options is not None else args.model or "default")
    if "://" in text:
        text = urlsplit(text).path.rstrip("/").rsplit("/", 1)[-1] or urlsplit(text).hostname or "model"
    elif Path(text).expanduser().exists() or text.startswith((os.sep, ".", "~")):
        path = Path(text).expanduser().resolve()
        text = (path.parent.name if path.is_file() else path.name) or "model"
    for ending in ARCHIVE_ENDINGS:
        text = text.removesuffix(ending)
    return text or "model"


def warn_if_open(host: str, keys: tuple[bytes, ...]) -> None:
    from elmo.lab.hosts import LOOPBACK

    if not keys and host.strip("[]").lower() not in LOOPBACK and not host.startswith("127."):
        print(f"elmo serve: warning: --host {host} without --api-key: anyone who can reach this address can use the "
              "service (give --api-key env:VAR or file:PATH)", file=sys.stderr, flush=True)


def setup_logs(access: bool) -> None:
    """The server's own lines (worker deaths, replacements, stalled readers) and, unless turned off, the access
    log, one JSON line per request, on stderr."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name, level in (("elmo.serve", logging.WARNING), ("elmo.serve.access", logging.INFO if access else 100)):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False


def run(args: argparse.Namespace) -> int:
    try:
        from elmo.lab.hosts import host_names
        from elmo.lab.server import ServerLimits
        from elmo.serve.api import ModelShape, ServeLimits
        from elmo.serve.app import create_app
        from elmo.serve.http import make_server
        from elmo.serve.pool import ProcessRunner
    except ImportError as e:
        raise InputError(f"elmo serve needs its extra ({e.name} is missing): pip install 'elmo-bilm[serve]'") from e
    from elmo.embed.embedder import check_int8_choice
    from elmo.embed.output_file import OutputSpec
    from elmo.models import resolve

    layers = check_args(args)
    hosts = host_names(args.host, args.allowed_host)
    keys = api_keys(args.api_key)
    check_int8_choice(args.int8, "cpu", False)
    if args.int8:
        from elmo.model.int8 import check_kernel

        check_kernel()  # here, as one clear line, rather than as a worker that failed to start
    model = resolve(args.model, args.options, args.weights)  # downloads once, here; the workers get local files
    name = served_name(args)
    check_text(name, "--name")
    sock = bind(args.host, args.port)
    runner = ProcessRunner(model, args.int8, args.threads or THREADS_DEFAULT, args.workers)
    try:
        shape = ModelShape(*runner.start())  # a model that does not load: one line (ModelFileError)
        if layers is not None:
            OutputSpec("all", layers).check_model(shape.num_layers)
        limits = ServeLimits(args.max_body_bytes, max_request_tokens=args.max_request_tokens,
                             max_queue_tokens=args.max_queue_tokens, max_answer_floats=args.max_answer_floats,
                             max_answer_bytes=args.max_answer_bytes, send_seconds=args.send_timeout)
        app = create_app(shape, name, layers, limits, allowed_hosts=hosts, max_batch_tokens=args.max_batch_tokens,
                         max_wait_ms=args.max_wait_ms, runner=runner, api_keys=keys)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        warn_if_open(args.host, keys)
        setup_logs(not args.no_access_log)
        print(f"elmo serve: {name} at http://{shown}:{port}/  (POST /v1/embeddings, /embed; SIGTERM or Ctrl+C to "
              "stop)", flush=True)
        # uvicorn stops on SIGTERM (no new connections, the requests in flight answered within --drain-seconds),
        # then raises the signal again for the handler found before it: this one lets the command end normally.
        signal.signal(signal.SIGTERM, lambda *_: None)
        make_server(app, ServerLimits(args.header_timeout, args.max_connections), args.send_timeout,
                    args.drain_seconds).run(sockets=[sock])
    finally:
        # after the drain nobody waits for a batch still running (its requests were cut): a short grace, then
        # the busy worker is killed, so the stop takes --drain-seconds and about a second at most
        runner.close(timeout=STOP_GRACE)
    return 0
