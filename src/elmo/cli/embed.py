"""`elmo embed INPUT OUTPUT`: one HDF5 dataset of ELMo vectors per input line, on 1 or N ranks (torchrun)."""

from __future__ import annotations

import argparse
import os
import sys

from elmo.embed.corpus import Ranks, embed_corpus
from elmo.embed.documents import CONTEXTS
from elmo.embed.embedder import Embedder, check_batch_size, check_int8_choice
from elmo.embed.input_file import MAX_LINE_TOKENS, LineLimits, check_input
from elmo.embed.long_lines import LONG_LINE_WINDOW
from elmo.embed.output_file import COMPRESSIONS, DTYPES, POOLS, OutputSpec, check_output, parse_layers
from elmo.embed.stream import embed_file
from elmo.errors import InputError
from elmo.files.output_paths import check_not_input
from elmo.files.text_lines import MAX_LINE_BYTES
from elmo.model.devices import check_device, rank_device
from elmo.model.threads import check_threads
from elmo.models import default_model_name, resolve

from . import add_model_flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("embed", help="embed a tokenized text file (one sentence per line) into HDF5",
                       description="Embed a UTF-8 file, one whitespace-tokenized sentence per line, into HDF5 "
                       "in the layout of AllenNLP's former `allennlp elmo` command. Under `torchrun --no-python "
                       "--nproc_per_node=N elmo embed ...` the lines are split between the N processes and "
                       "rank 0 joins the parts; `--resume` continues a run that was killed.")
    p.add_argument("input", help="UTF-8 text, one whitespace-tokenized sentence per line (.gz is read too)")
    p.add_argument("output", help="HDF5 file to write (written to a temporary name, renamed at the end)")
    add_model_flags(p)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--all", dest="output_format", action="store_const", const="all",
                     help="all layers, (L+1, n, D) (default)")
    fmt.add_argument("--top", dest="output_format", action="store_const", const="top", help="top layer only, (n, D)")
    fmt.add_argument("--average", dest="output_format", action="store_const", const="average",
                     help="mean of the layers, (n, D)")
    p.add_argument("--layers", help="a subset of layers such as 1,2 (0 = token layer), with --all or --average")
    p.add_argument("--pool", choices=POOLS, help="one masked mean or max vector per line instead of one per token")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="stored precision (computed in float32; float16 halves the file)")
    p.add_argument("--compression", choices=COMPRESSIONS, help="HDF5 compression of each dataset (lossless)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (with --context document: documents)")
    p.add_argument("--context", choices=CONTEXTS, default="sentence",
                   help="sentence (default): each line's vectors from that line alone; document: from its whole "
                   "document, the forward LM reading it left to right and the backward LM right to left, each from "
                   "zero state (docs/documents.md); blank lines and -DOCSTART- lines separate documents and get what an "
                   "empty line gets, a dataset of 0 tokens")
    p.add_argument("--stateful", action="store_true",
                   help="carry LSTM state per batch row in file order, as the original tools did (default: "
                   "stateless); one process, no --resume")
    p.add_argument("--forget-sentences", action="store_true", help="do not write the sentence_to_index dataset")
    p.add_argument("--use-sentence-keys", action="store_true", help="key datasets by sentence text instead of line number")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT (and the parts of an earlier run) if they exist")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished parts in OUTPUT.parts/ of a killed run and embed only the rest")
    p.add_argument("--part-lines", type=int, default=10_000,
                   help="lines per part file (default 10000): a crash loses at most one part per process")
    p.add_argument("--max-line-tokens", type=int, default=MAX_LINE_TOKENS,
                   help=f"refuse, by line number and before any work, a line of more tokens (default "
                   f"{MAX_LINE_TOKENS:,}; without --stateful a line of more than {LONG_LINE_WINDOW} tokens is embedded "
                   "in windows, so its memory is its output: (layers) x (dim) x 4 bytes per token, 6 KB for the "
                   "bundled model)")
    p.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES,
                   help=f"refuse, by line number, a line of more bytes, before it is read into memory (default "
                   f"{MAX_LINE_BYTES:,})")
    p.add_argument("--bf16", action="store_true",
                   help="bfloat16 autocast (for GPUs; outputs are stored in --dtype; slow on CPUs without bf16)")
    p.add_argument("--int8", action="store_true",
                   help="int8 matrix products on the CPU: faster, at a small measured accuracy cost "
                   "(docs/performance.md#int8-on-cpu); not with --bf16 or a GPU")
    p.add_argument("--device", default="cpu",
                   help="cpu, cuda or cuda:N (under torchrun, cuda means one GPU per local rank)")
    p.add_argument("--threads", type=int,
                   help="torch threads per process (default: OMP_NUM_THREADS if set, else the usable CPUs shared "
                   "among torchrun's local ranks; docs/performance.md#threads-on-shared-cores)")
    p.set_defaults(func=run, output_format="all")


def load_embedder(args: argparse.Namespace) -> Embedder:
    check_batch_size(args.batch_size, "--batch-size")
    check_device(args.device, "--device")
    model = args.model
    if model is None and args.options is None and args.context == "document":
        model = default_model_name("document")
        print(f"elmo: no --model: --context document runs the bundled model `{model}`", file=sys.stderr)
    model = resolve(model, args.options, args.weights)
    return Embedder.from_model(model, stateful=args.stateful, device=args.device, batch_size=args.batch_size, bf16=args.bf16,
                               int8=args.int8, threads=args.threads)


def run(args: argparse.Namespace) -> int:
    spec = OutputSpec(args.output_format, parse_layers(args.layers), args.pool, args.dtype, args.compression)
    limits = LineLimits(args.max_line_bytes, args.max_line_tokens)
    check_input(args.input)  # before the model loads: fail fast
    check_output(args.output, args.overwrite, args.input)
    check_int8_choice(args.int8, args.device, args.bf16)
    check_not_input(args.output, {"--options": args.options, "--weights": args.weights})
    check_device(args.device, "--device")
    if args.threads is not None:
        check_threads(args.threads, "--threads")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.stateful and args.context == "document":
        raise InputError("--context document and --stateful exclude each other: document context replaces the state "
                         "carried between batches; drop --stateful")
    if args.stateful and (args.resume or world > 1):
        raise InputError("--stateful runs in one process and cannot be resumed: each line's vectors depend on "
                         "every earlier line (drop --resume / torchrun, or drop --stateful)")
    if args.stateful:
        embed_file(load_embedder(args), args.input, args.output, args.output_format, batch_size=args.batch_size,
                   forget_sentences=args.forget_sentences, use_sentence_keys=args.use_sentence_keys,
                   overwrite=args.overwrite, layers=spec.layers, pool=spec.pool, dtype=spec.dtype,
                   compression=spec.compression, limits=limits)
        return 0
    ranks = Ranks.from_env()
    args.device = rank_device(args.device, ranks.world)
    try:
        embed_corpus(load_embedder(args), args.input, args.output, spec, batch_size=args.batch_size,
                     forget_sentences=args.forget_sentences, use_sentence_keys=args.use_sentence_keys,
                     overwrite=args.overwrite, resume=args.resume, part_lines=args.part_lines, ranks=ranks,
                     context=args.context, limits=limits)
    finally:
        ranks.close()
    return 0
