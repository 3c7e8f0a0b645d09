"""`elmo embed INPUT OUTPUT`: one HDF5 dataset of ELMo vectors per input line."""

from __future__ import annotations

import argparse

import torch

from ..embed_file import embed_file
from ..embedder import Embedder
from ..errors import InputError
from ..models import resolve_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("embed", help="embed a tokenized text file (one sentence per line) into HDF5",
                       description="Embed a UTF-8 file, one whitespace-tokenized sentence per line, into HDF5 "
                       "in the layout of AllenNLP's former `allennlp elmo` command.")
    p.add_argument("input", help="UTF-8 text, one whitespace-tokenized sentence per line")
    p.add_argument("output", help="HDF5 file to write (written to a temporary name, renamed at the end)")
    p.add_argument("--model", default=None, help="bundled model name or model directory (default: the bundled model)")
    p.add_argument("--options", help="options.json (with --weights, instead of --model)")
    p.add_argument("--weights", help="weights.hdf5 (with --options)")
    layers = p.add_mutually_exclusive_group()
    layers.add_argument("--all", dest="layers", action="store_const", const="all", help="all layers, (L+1, n, D) (default)")
    layers.add_argument("--top", dest="layers", action="store_const", const="top", help="top layer only, (n, D)")
    layers.add_argument("--average", dest="layers", action="store_const", const="average", help="mean of the layers, (n, D)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--stateful", action="store_true",
                   help="carry LSTM state per batch row in file order, as the original tools did (default: stateless)")
    p.add_argument("--forget-sentences", action="store_true", help="do not write the sentence_to_index dataset")
    p.add_argument("--use-sentence-keys", action="store_true", help="key datasets by sentence text instead of line number")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.set_defaults(func=run, layers="all")


def load_embedder(args: argparse.Namespace) -> Embedder:
    if args.batch_size <= 0:
        raise InputError(f"--batch-size must be positive, found {args.batch_size}")
    if (args.options is None) != (args.weights is None):
        raise InputError("--options and --weights go together")
    if args.options and args.model:
        raise InputError("give either --model or --options/--weights, not both")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {args.device}: CUDA is not available on this machine")
    if args.options:
        return Embedder.from_files(args.options, args.weights, stateful=args.stateful, device=args.device,
                                   batch_size=args.batch_size)
    return Embedder.from_model(resolve_model(args.model or "default"), stateful=args.stateful, device=args.device,
                               batch_size=args.batch_size)


def run(args: argparse.Namespace) -> int:
    embedder = load_embedder(args)
    embed_file(embedder, args.input, args.output, output_format=args.layers, batch_size=args.batch_size,
               forget_sentences=args.forget_sentences, use_sentence_keys=args.use_sentence_keys,
               overwrite=args.overwrite)
    return 0
