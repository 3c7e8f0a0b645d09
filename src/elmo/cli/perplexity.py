"""`elmo perplexity`: forward, backward and average perplexity of a model on held-out text."""

from __future__ import annotations

import argparse

from elmo.errors import InputError
from elmo.files.fileio import json_text
from elmo.model.devices import check_device
from elmo.training.perplexity import PERPLEXITY_MODES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perplexity", help="forward/backward/average perplexity of a model on held-out text")
    p.add_argument("model", help="MODEL_DIR (with softmax.hdf5), bundled model name, or a training run directory")
    p.add_argument("--test", nargs="+", required=True, help="files or globs of tokenized text, one sentence per line")
    p.add_argument("--vocab", help="vocabulary (default: the model's vocab.txt)")
    p.add_argument("--mode", choices=PERPLEXITY_MODES, default="stream",
                   help="stream: state carried across sentences per row, as bilm-tf's test (default); sentence: each "
                   "from zero state; document: each document (blank lines separate them) from zero state, each "
                   "direction reading it in its own direction")
    p.add_argument("--batch-size", type=int, default=128,
                   help="rows scored at once; every target is scored whatever the size (see --bilm-tf-batches)")
    p.add_argument("--unroll-steps", type=int, default=20,
                   help="window length in stream mode (at --batch-size 1 it does not change the result)")
    p.add_argument("--bilm-tf-batches", action="store_true",
                   help="bilm-tf's run_test figure at this --batch-size: one step at a time, and the batch in which "
                   "the text runs out dropped with what follows it, as bilm-tf's batcher does (stream mode)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int)
    p.add_argument("--json", action="store_true", help="print one JSON object: forward, backward, average, tokens")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar (it goes to stderr, so --json output on stdout stays clean)")
    p.set_defaults(func=run_perplexity)


def run_perplexity(args: argparse.Namespace) -> int:
    import torch

    from elmo.training.perplexity import load_for_scoring, perplexity, scored_tokens
    from elmo.training.settings import MAX_TOKENS_PER_STEP

    if args.batch_size <= 0 or args.unroll_steps <= 0:
        raise InputError("--batch-size and --unroll-steps must be positive")
    if args.batch_size * args.unroll_steps > MAX_TOKENS_PER_STEP:
        raise InputError(f"--batch-size {args.batch_size} x --unroll-steps {args.unroll_steps} is more than "
                         f"{MAX_TOKENS_PER_STEP:,} tokens per step")
    check_device(args.device, "--device")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, vocab = load_for_scoring(args.model, args.vocab)
    result = perplexity(model, vocab, args.test, mode=args.mode, batch_size=args.batch_size, unroll=args.unroll_steps,
                        device=args.device, progress=args.progress, complete_batches=args.bilm_tf_batches)
    if args.json:
        print(json_text(result))  # an infinite perplexity is null, so the line stays JSON
    else:
        print(f"forward {result['forward']:.2f}  backward {result['backward']:.2f}  average {result['average']:.2f}  "
              f"({scored_tokens(result)})")
    return 0
