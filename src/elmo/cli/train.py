"""`elmo train`: a biLM trained on a tokenized corpus (bilm-tf's recipe), or fine-tuned from a model (--init-from)."""

from __future__ import annotations

import argparse
import sys

from elmo.model.options import read_options
from elmo.training.batchers import BATCHINGS
from elmo.training.presets import PRESETS
from elmo.training.settings import FINETUNE_DEFAULTS, LR_DEFAULTS, OBJECTIVES, WEIGHT_INITS

from . import settings_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a biLM (bilm-tf's recipe) on a tokenized corpus",
                       description="Train forward and backward LMs sharing the char CNN and softmax. Unset "
                       "training values come from the options' training keys, else the original recipe. "
                       "SIGTERM saves a checkpoint and stops after the current step (under torchrun, signal "
                       "torchrun); SIGUSR1 saves one and goes on (under torchrun, signal the ranks: "
                       "pkill -USR1 -P TORCHRUN_PID).")
    p.add_argument("--train", nargs="+", help="files or globs of tokenized text, one sentence per line (.gz ok)")
    p.add_argument("--vocab", help="vocabulary file (`elmo vocab`); with --init-from, default: the model's vocab.txt")
    arch = p.add_mutually_exclusive_group()
    arch.add_argument("--options", help="options.json with the architecture (training keys are read too)")
    arch.add_argument("--preset", choices=list(PRESETS), help="a built-in architecture (docs/training.md)")
    p.add_argument("--init-from", metavar="MODEL",
                   help="fine-tune a model: a name (bundled or published, `elmo models`), a model directory, the URL of "
                   "a model archive, or a training run. Its softmax rows are carried over by word into --vocab; a model "
                   "without a softmax first learns one with the biLM frozen (--softmax-steps). Unset --lr, --optimizer "
                   "and --epochs take fine-tuning values (docs/finetuning.md)")
    p.add_argument("--softmax-steps", type=int,
                   help="with --init-from: steps that train only the softmax, every biLM weight frozen, before all "
                   "weights train (default: 200 for a model without a softmax, 0 for one with it); part of --max-steps, "
                   "added to --epochs' steps")
    p.add_argument("--valid", metavar="FILE",
                   help="held-out text scored (full softmax, in sentence mode, or document mode with --batching document) "
                   "before training, every --valid-every steps and at the end, into metrics.jsonl")
    p.add_argument("--valid-every", type=int, help="steps between --valid scorings (default 500)")
    p.add_argument("--out", required=True, help="run directory (checkpoints, metrics.jsonl, options.json)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--batch-size", type=int, help="rows per process (default 128)")
    p.add_argument("--unroll-steps", type=int, help="window length, truncated BPTT (default 20)")
    p.add_argument("--dropout", type=float, help="default 0.1")
    p.add_argument("--no-first-layer-dropout", dest="first_layer_dropout", action="store_const", const=False,
                   help="no dropout on the first LSTM layer's input, as Kim et al. 2016 (bilm-tf drops it out)")
    p.add_argument("--freeze", nargs="+", metavar="GLOB",
                   help="keep the parameters whose names match these patterns fixed, e.g. 'bilm.char_encoder.*' to "
                   "fine-tune only the LSTMs (a pattern that matches nothing is refused, with the names listed)")
    p.add_argument("--clip-norm", type=float, help="global gradient-norm clip (default 10)")
    p.add_argument("--lr", type=float, help="learning rate (default 0.2 for adagrad, 0.001 for adam, 1.0 for sgd; "
                   f"with --init-from {FINETUNE_DEFAULTS['lr']:g}, {FINETUNE_DEFAULTS['optimizer']}); with --resume, the new rate from there on")
    p.add_argument("--optimizer", choices=list(LR_DEFAULTS), help="default adagrad (initial accumulator 1.0)")
    soft = p.add_mutually_exclusive_group()
    soft.add_argument("--full-softmax", dest="sampled", action="store_const", const=False, help="exact softmax over the vocabulary")
    soft.add_argument("--sampled-softmax", dest="sampled", action="store_const", const=True, help="sampled softmax (default)")
    p.add_argument("--negatives", type=int, help="negatives per batch for the sampled softmax (default 8192)")
    p.add_argument("--batching", choices=BATCHINGS,
                   help="sentence (default): each sentence its own row from zero LSTM state, as `elmo embed` runs "
                   "a model; use it for models you will embed with. stream: bilm-tf's shuffled sentences packed into "
                   "rows with the state carried; such a model may fail from zero state (docs/training.md). ordered: "
                   "the corpus in file order as contiguous streams, state carried (Kim et al.), for text whose "
                   "order carries meaning (PTB, documents) and scoring with the state carried. document: each row "
                   "one document (blank lines or -DOCSTART- lines separate them) from zero state, the backward LM "
                   "over the reversed document, for embedding with --context document (docs/documents.md)")
    p.add_argument("--reset-rate", type=float,
                   help="with --batching document: the share of sentence starts where the document is cut and the "
                   "state starts from zero (0: whole documents, the default; 1: every sentence alone)")
    p.add_argument("--objective", choices=list(OBJECTIVES),
                   help="what the update differentiates: mean (default, bilm-tf) or sum of the two directions' losses, "
                   "or the forward LM's alone (for comparisons with one-direction LMs)")
    p.add_argument("--weight-init", choices=WEIGHT_INITS,
                   help="how fresh weights are drawn: bilm-tf (default) or kim, Kim et al. 2016's U(-0.05, 0.05) for "
                   "every weight (what each gave on PTB: docs/training.md)")
    p.add_argument("--max-steps", type=int, help="stop after this many updates (default: from --epochs)")
    p.add_argument("--epochs", type=float, help="passes over the corpus' token count (default 10)")
    p.add_argument("--max-minutes", type=float,
                   help="stop cleanly, with a checkpoint, after this much wall time in this invocation (resume later)")
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default 1250)")
    p.add_argument("--checkpoint-minutes", type=float, help="also checkpoint this often (default 30)")
    p.add_argument("--keep-checkpoints", type=int, help="how many recent checkpoints to keep (default 2)")
    p.add_argument("--log-every", type=int, help="steps per metrics.jsonl record (default 10)")
    p.add_argument("--threads", type=int, help="torch CPU threads per process")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast, float32 weights: GPUs, and CPUs with AVX512-BF16 or AMX (refused on CPUs without; "
                   "speed: docs/training.md)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    from elmo.training.presets import preset_options
    from elmo.training.settings import TrainSettings
    from elmo.training.trainer import train

    options = None
    if args.preset:
        options = preset_options(args.preset)
    elif args.options:
        options = read_options(args.options).to_options()
    settings = settings_from_args(TrainSettings, args, options=options)  # --options is a path; this is its dict
    summary = train(settings)
    if "step" in summary and summary.get("checkpoint"):
        print(f"step {summary['step']}: loss {summary['loss']:.4f}, ppl {summary['ppl']:.2f}; checkpoint {summary['checkpoint']}",
              file=sys.stderr)
    if summary.get("valid"):
        from elmo.training.heldout import summary_lines

        for line in summary_lines(summary["valid"]):
            print(line, file=sys.stderr)
    if summary.get("stopped_by") and summary.get("checkpoint"):  # rank 0 speaks for all
        print(f"stopped by {summary['stopped_by']} at step {summary.get('step')} of {summary['max_steps']}; continue with "
              f"`elmo train --out {summary['run_dir']} --resume`", file=sys.stderr)
    return 0
