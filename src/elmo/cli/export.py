"""`elmo export`: a training run written as a model directory in the original format."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a training run as a model directory in the original format")
    p.add_argument("run_dir", help="training run directory")
    p.add_argument("-o", "--output", required=True, help="MODEL_DIR to write")
    p.add_argument("--checkpoint", help="a checkpoint file of the run (default: the latest)")
    p.add_argument("--softmax-float16", action="store_true", help="store the softmax W as float16")
    p.add_argument("--float16", action="store_true",
                   help="store every weight (biLM and softmax) as float16: half the size, read back as float32; "
                   "the original tools expect float32")
    p.add_argument("--clip-float16", action="store_true",
                   help="with --float16/--softmax-float16: clip weights beyond float16's range to +-65504 "
                   "(without it such weights are refused, never stored as infinity)")
    p.add_argument("--overwrite", action="store_true", help="replace existing files in MODEL_DIR")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from elmo.training.export import export_run

    files = export_run(args.run_dir, args.output, args.checkpoint, args.softmax_float16, args.overwrite, float16=args.float16,
                       clip_float16=args.clip_float16)
    print(f"{files.options_file.parent}: options.json, weights.hdf5, softmax.hdf5, vocab.txt", file=sys.stderr)
    return 0
