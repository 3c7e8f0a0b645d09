"""`elmo lab`: start the local web lab (the paper's demonstrations) and print its URL."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import webbrowser

from elmo.errors import InputError

from . import add_model_flags

SIZES = {"small": (40, 150, 4), "default": (150, 400, 12), "large": (600, 1200, 30)}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="start the interactive lab (the paper's demonstrations) in the browser",
                       description="Serve the lab page on 127.0.0.1 and print its URL. Every number on it is "
                       "computed by the model given here. Needs the lab extra: pip install 'elmo-bilm[lab]'.")
    add_model_flags(p)
    p.add_argument("--vocab", help="vocabulary for the LM predictions (default: the model directory's vocab.txt)")
    p.add_argument("--softmax", help="softmax weights, HDF5 with W (V, P) and b (V,) (default: softmax.hdf5)")
    p.add_argument("--ner", metavar="PATH", help="NER tagger trained with ELMo (panel 4)")
    p.add_argument("--ner-baseline", metavar="PATH", help="NER tagger trained without ELMo (panel 4)")
    p.add_argument("--preset", action="append", default=[], metavar="NAME=PATH",
                   help="a learned layer mix for panel 3: a task model folder or JSON with scalar_parameters "
                   "and gamma (repeatable)")
    p.add_argument("--results", metavar="PATH", help="measured results for panel 7: the task runs' metrics folder, "
                   "docs/results.md or a JSON file (default: $ELMO_RESULTS, else the first of docs/results.json, "
                   "runs/results/, docs/results.md in the current folder)")
    p.add_argument("--data", metavar="DIR", help="the shared data folder (default: $ELMO_DATA, $ELMO_SHARED/data, "
                   "else ../shared/data beside the current folder)")
    p.add_argument("--reference-size", choices=sorted(SIZES), default="default",
                   help="how many real sentences to embed for neighbours and panel 5 (cached after the first start)")
    p.add_argument("--cache-dir", help="where the embedded reference set is cached (default: ~/.cache/elmo/lab)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0 picks a free one)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the lab answers to besides IP addresses, localhost and --host (repeatable; "
                   "needed to open it by name when bound to 0.0.0.0 or ::, against DNS rebinding)")
    p.add_argument("--max-running", type=positive, default=2, metavar="N",
                   help="model computations at once (default: 2)")
    p.add_argument("--max-waiting", type=non_negative, default=8, metavar="N",
                   help="computations waiting for a free one; beyond that a request gets 503 + Retry-After "
                   "(default: 8)")
    p.add_argument("--max-connections", type=positive, default=1000, metavar="N",
                   help="open connections at once, kept below the open-file limit (default: 1000)")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="seconds for a request's headers to arrive before the connection is closed (default: 10)")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.set_defaults(func=run)


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}")
    return int(text)


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, found {text!r}")
    return int(text)


def parse_presets(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--preset {item!r}: expected NAME=PATH, e.g. POS=runs/pos")
        out.append((name, path))
    return out


def bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port}: must be between 0 and 65535")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port} ({e.strerror or e}); try another --port") from e
    sock.listen(64)
    return sock


def can_show_browser() -> bool:
    """Only open a browser where one can appear (a console browser would take over the terminal)."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def run(args: argparse.Namespace) -> int:
    try:
        from elmo.lab.admission import release_freed_memory
        from elmo.lab.app import create_app
        from elmo.lab.hosts import host_names
        from elmo.lab.server import ServerLimits, serve
    except ImportError as e:
        raise InputError(f"elmo lab needs its web extra ({e.name} is missing): pip install 'elmo-bilm[lab]'") from e
    from elmo.lab import LabModels, ReferenceSpec, build_reference
    from elmo.lab.corpora import find_data_dir
    from elmo.lab.inputs import Limits

    if not 0 < args.header_timeout <= 3600:
        raise InputError(f"--header-timeout {args.header_timeout:g}: must be above 0 and at most 3600 seconds")
    hosts = host_names(args.host, args.allowed_host)
    data = find_data_dir(args.data)
    if args.data and data is None:
        raise InputError(f"--data {args.data}: not a folder")
    lab = LabModels.load(args.model, args.options, args.weights, args.vocab, args.softmax, args.ner,
                         args.ner_baseline, parse_presets(args.preset), args.results, data)
    sock = bind(args.host, args.port)
    wiki, pos, per_sense = SIZES[args.reference_size]
    ref = build_reference(lab.bilm, data, ReferenceSpec(wiki, pos, per_sense), args.cache_dir)
    release_freed_memory()  # what embedding the reference set freed
    limits = Limits(max_running=args.max_running, max_waiting=args.max_waiting)
    app = create_app(lab, ref, limits, allowed_hosts=hosts)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    print(f"elmo lab: {lab.name} at {url}  (Ctrl+C to stop)", flush=True)
    if not args.no_browser and can_show_browser():
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    serve(app, sock, ServerLimits(args.header_timeout, args.max_connections))
    return 0
