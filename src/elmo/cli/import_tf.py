"""`elmo import-tf`: a bilm-tf TensorFlow checkpoint as a model directory (elmo.tf.bilm_import), without TensorFlow."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import-tf", help="write a bilm-tf checkpoint (with its softmax) as a model directory",
        description="Read a TensorFlow checkpoint written by bilm-tf's training (model.ckpt-N.index + .data-*) and "
        "write OUT in the original format: options.json (for prediction), weights.hdf5 (as bilm-tf's dump_weights "
        "writes it), softmax.hdf5 and vocab.txt, so `elmo perplexity OUT`, `elmo train --init-from OUT` and the "
        "lab's word predictions work on it. TensorFlow is not needed.")
    p.add_argument("checkpoint", metavar="CKPT_PREFIX",
                   help="the checkpoint's prefix (model.ckpt-N) or one of its files, or a bilm-tf run directory "
                   "(its `checkpoint` file names the newest)")
    p.add_argument("output", metavar="OUT", help="model directory to write")
    p.add_argument("--options", help="the options.json it was trained with (default: the one beside the checkpoint)")
    p.add_argument("--vocab", help="its training vocabulary, one word per softmax row (default: vocab.txt beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace the model files of an existing OUT")
    p.set_defaults(func=run_import_tf)


def run_import_tf(args: argparse.Namespace) -> int:
    from ..tf.bilm_import import find_bilm_checkpoint, import_bilm_checkpoint

    source = find_bilm_checkpoint(args.checkpoint, args.options, args.vocab)
    out = import_bilm_checkpoint(source, args.output, overwrite=args.overwrite)
    print(f"wrote {out} from {source.prefix} (options {source.options_file}, vocabulary {source.vocab_file})")
    if source.vocab_file is None:
        print("no vocabulary given: vectors work; to score text pass the training vocabulary to `elmo perplexity "
              "--vocab`, or import again with --vocab")
    return 0
