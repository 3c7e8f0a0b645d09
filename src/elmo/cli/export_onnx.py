"""`elmo export-onnx MODEL OUT.onnx [--int8]`: the frozen biLM as one stateless ONNX graph (docs/serving.md)."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import sys

from elmo.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-onnx", help="write a model's biLM as one ONNX graph (for ONNX Runtime)",
                       description="Write the frozen biLM as one stateless ONNX graph: input char_ids (batch, tokens, "
                       "50) int64 as elmo.batch_to_ids makes them, outputs layers (batch, layers, tokens, dim) and "
                       "mask (batch, tokens). Every sentence starts from zero state; the graph cannot carry state "
                       "between calls (docs/serving.md).")
    p.add_argument("model", metavar="MODEL",
                   help="any model reference `elmo embed --model` takes: a bundled or published name, a model "
                   "directory (original, ManyLangs, NLPL, TensorFlow checkpoint) or an archive URL")
    p.add_argument("output", metavar="OUT.onnx", help="the ONNX file to write (written to a temporary name, renamed)")
    p.add_argument("--int8", action="store_true",
                   help="quantize the matrix products with ONNX Runtime's dynamic quantization (needs onnxruntime)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT.onnx if it exists (never MODEL's own files)")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the check after export (the written graph run in ONNX Runtime against the PyTorch "
                   "model on a few sentences; without it a graph that computes something else is not noticed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from elmo.files.output_paths import check_not_input
    from elmo.formats.onnx_export import export_onnx
    from elmo.models import resolve

    model_files = [args.model, glob.escape(args.model) + ".*"]  # a folder, a file, a checkpoint's prefix
    for path in (args.output, args.output + ".data"):  # the graph, and its tensors past 2 GB
        check_not_input(path, {"MODEL": model_files}, flag="OUT.onnx")
    if os.path.exists(args.output) and not args.overwrite:
        raise InputError(f"{args.output}: exists; pass --overwrite to replace it")
    needed = ["onnx", *(["onnxruntime"] if args.int8 or args.check else [])]
    missing = [name for name in needed if not importlib.util.find_spec(name)]
    if missing:
        raise InputError(f"export-onnx needs {' and '.join(missing)}: pip install 'elmo-bilm[onnx]'"
                         + ("" if args.int8 or "onnxruntime" not in missing else " (or --no-check)"))
    bilm = resolve(args.model).load()
    measured = export_onnx(bilm, args.output, int8=args.int8, check=args.check, reference=args.model)
    size = sum(os.path.getsize(p) for p in (args.output, args.output + ".data") if os.path.exists(p)) / 1e6
    data = f" (tensors in {os.path.basename(args.output)}.data)" if os.path.exists(args.output + ".data") else ""
    print(f"{args.output}: {size:.1f} MB{data}, {'int8' if args.int8 else 'float32'}, {bilm.num_layers} layers of "
          f"{bilm.output_dim()}{'; ' + measured if measured else ''}", file=sys.stderr)
    return 0
