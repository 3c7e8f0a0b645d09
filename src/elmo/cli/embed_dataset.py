"""`elmo embed-dataset INPUT OUTPUT`: a dataset's rows embedded on Ray Data into a folder of Parquet parts."""

from __future__ import annotations

import argparse
import json
import os
import sys

from elmo.embed.embedder import check_batch_size
from elmo.embed.output_file import DTYPES, POOLS, OutputSpec, parse_layers
from elmo.errors import InputError
from elmo.files.text_lines import MAX_LINE_BYTES
from elmo.model.threads import check_threads


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("embed-dataset", help="embed a dataset (text, JSONL, Parquet, FASTA) on Ray Data into Parquet parts",
                       description="Embed every row of INPUT (a file, or a folder of files of one format) with a pool "
                       "of Ray Data actors, each loading the model once, into OUTPUT, a folder of Parquet parts "
                       "(id, the text or tokens, the vectors); a FASTA record's row is its id and its residues, one a token. A rerun after a crash skips the parts already written; "
                       "each id is written exactly once (docs/at-scale.md).")
    p.add_argument("input", help="a .txt (one whitespace-tokenized sentence per line), .jsonl, .parquet or FASTA "
                   "(.fasta, .fa, .faa, .gz) file, or a folder of them")
    p.add_argument("output", help="the folder of Parquet parts to write (resumed if it holds an earlier run's parts)")
    p.add_argument("--model", dest="model", default=None, metavar="MODEL",
                   help="a model name (`elmo models`), a model directory or the URL of an archive, as elmo embed "
                   "--model (default: the bundled model); every Ray node resolves it itself")
    p.add_argument("--format", dest="input_format", choices=("text", "jsonl", "parquet", "fasta"),
                   help="the input's format (default: from its file names)")
    p.add_argument("--text-column", default="text", help="the column of whitespace-tokenized text (default: text)")
    p.add_argument("--tokens-column", help="instead, a column of token lists (FASTA: the residues' column, "
                   "default residues)")
    p.add_argument("--uppercase", action="store_true", help="FASTA: upper-case lower-case residues (else refused)")
    p.add_argument("--id-column", help="the column of row ids to keep (default: each row's number in the input, "
                   "files in name order, from 0: a text file's line number)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--all", dest="output_format", action="store_const", const="all", help="all layers (default)")
    fmt.add_argument("--top", dest="output_format", action="store_const", const="top", help="top layer only")
    fmt.add_argument("--average", dest="output_format", action="store_const", const="average",
                     help="mean of the layers")
    p.add_argument("--layers", help="a subset of layers such as 1,2 (0 = token layer), with --all or --average")
    p.add_argument("--pool", choices=POOLS, help="one mean or max vector per row (a fixed-shape tensor column)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="stored precision (computed in float32)")
    p.add_argument("--int8", action="store_true", help="int8 matrix products on the CPU, as elmo embed --int8")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default 64)")
    p.add_argument("--part-rows", type=int, default=10_000,
                   help="rows per part file (default 10000): the unit a rerun skips and a failure repeats")
    p.add_argument("--actors", type=int, help="embedding actors (default: the cluster's CPUs / --threads-per-actor)")
    p.add_argument("--threads-per-actor", type=int, default=1,
                   help="CPUs Ray reserves for each actor and torch threads it runs (default 1)")
    p.add_argument("--address", help="an existing Ray cluster (ray://HOST:10001 or HOST:6379; `auto`: the one this "
                   "machine joined); default: a local cluster on 127.0.0.1, stopped at the end")
    p.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES,
                   help=f"refuse a text or JSONL line of more bytes (default {MAX_LINE_BYTES:,})")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT's parts made with other settings")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run, output_format="all")


def run(args: argparse.Namespace) -> int:
    from elmo.files.output_paths import check_not_input

    check_not_input(args.output, {"INPUT": args.input}, flag="OUTPUT", folder=True)  # the writers' one rule, first
    try:
        from elmo.integrations.ray_dataset import DatasetSettings, embed_dataset, local_only

        if args.address is None:
            local_only()
        import ray  # noqa: F401
    except ImportError as e:
        raise InputError(f"elmo embed-dataset needs Ray Data: pip install 'elmo-bilm[ray]' ({e})") from None
    spec = OutputSpec(args.output_format, parse_layers(args.layers), args.pool, args.dtype)
    check_batch_size(args.batch_size, "--batch-size")
    check_threads(args.threads_per_actor, "--threads-per-actor")
    if args.actors is not None:
        check_threads(args.actors, "--actors")
    if args.tokens_column and args.input_format == "text":
        raise InputError("--tokens-column needs JSONL or Parquet input: a text file's lines are text")
    output = os.path.normpath(args.output)
    settings = DatasetSettings(model=args.model, text_column=args.text_column, tokens_column=args.tokens_column,
                               id_column=args.id_column, output_format=spec.output_format, layers=spec.layers,
                               pool=spec.pool, dtype=spec.dtype, int8=args.int8, part_rows=args.part_rows,
                               input_format=args.input_format, max_line_bytes=args.max_line_bytes,
                               uppercase=args.uppercase)
    summary = embed_dataset(args.input, output, settings, actors=args.actors, threads_per_actor=args.threads_per_actor,
                            batch_size=args.batch_size, address=args.address, progress=not args.no_progress,
                            overwrite=args.overwrite)
    print(json.dumps(summary), file=sys.stderr)
    return 0
