"""PTB word-level perplexity of a biLM the size of Kim et al. (2016)'s LSTM-Char-Small (test ppl 92.3).

Kim et al.'s Small: char embedding 15, 525 tanh filters (25*w for widths 1-6), one highway layer,
2 LSTM layers of 300, dropout 0.5 between the LSTM layers and before the softmax (not on the
first layer's input: `model/LSTMTDNN.lua` in yoonkim/lstm-char-cnn), SGD at lr 1 halved whenever
validation perplexity improves by less than 1, gradient norm clipped at 5, batch 20, unroll 35,
25 epochs. Here the same sizes train as a biLM with `elmo train` (both directions, full softmax, no
skip connections, `--no-first-layer-dropout`). In the file format every layer, the token layer
included, has the LSTM's output width, so to feed the 525 highway outputs to the first LSTM as Kim
does, each LSTM's 300 cell outputs go through a projection fixed at [I 0] (frozen in training): they
become the first 300 of its 525 outputs and the rest stay zero, so the model computes exactly
LSTM-Char-Small, saved as an ordinary ELMo model. Projecting the highway outputs down to 300
instead (`--projection-dim 300`, the earlier runs) made training stall far above the target, and
a trained 300 -> 525 projection made the first steps unstable (docs/training.md). `--lr` and `--clip` are there
for experiments (docs/training.md: lr 2 with clip 5/sqrt(2), Kim's step per direction, trained worse).

Perplexity is per word over Mikolov's test set, end of sentence included (82,430 tokens), with one
row reading the text in order and the LSTM state carried across sentences: the usual PTB protocol.
Every epoch appends a record to OUT/benchmark.jsonl; rerunning the same command continues.

    python benchmarks/ptb_char_small.py --out runs/ptb_char_small --threads 2

The text is read in order for training too (`--batching ordered`, Kim's 20 contiguous streams,
state carried): issue #26's comparisons at matched epochs chose it over shuffled sentences
(docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from elmo.cli import main as elmo
from elmo.formats.lm_vocab import Vocab
from elmo.formats.weights import save_bilm
from elmo.model.options import BiLMConfig
from elmo.training.batchers import BATCHINGS
from elmo.training.checkpoint import latest_checkpoint, list_checkpoints
from elmo.training.corpus import count_targets
from elmo.training.export import load_run
from elmo.training.model import new_language_model
from elmo.training.perplexity import perplexity
from elmo.training.settings import OBJECTIVES, WEIGHT_INITS, TrainSettings
from elmo.training.softmax import save_softmax
from elmo.training.trainer import train

SHARED = Path(os.environ.get("ELMO_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
DATA = SHARED / "data" / "ptb_mikolov"


FIXED_PROJECTIONS = "bilm.*_lstm.layers.*.W_P_0"


def kim_small(projection_dim: int = 525) -> dict:
    """The options of a biLM with LSTM-Char-Small's sizes; `projection_dim` is the LSTM's output width.

    525 (the default): no projection after the highway layer, as Kim et al.; each LSTM's 300 cells
    are projected to 525 (fixed at [I 0] by `write_initial_model`). 300: the highway outputs are
    projected to 300 (the earlier runs; that projection trains badly).
    """
    return {
        "lstm": {"dim": 300, "projection_dim": projection_dim, "n_layers": 2, "cell_clip": None, "proj_clip": None,
                 "use_skip_connections": False},
        "char_cnn": {"activation": "tanh", "embedding": {"dim": 15}, "filters": [[w, 25 * w] for w in range(1, 7)],
                     "n_highway": 1, "max_characters_per_token": 50, "n_characters": 261},
    }


def write_initial_model(model_dir: Path, seed: int, init: str = "bilm-tf", vocab: Path | None = None) -> None:
    """A fresh 525-wide biLM whose LSTM projections are [I 0]: each layer's 300 cell outputs, padded with zeros.

    The weights are drawn by `elmo train --weight-init`'s code (training.model.new_language_model).
    `init="kim"`: Kim et al.'s initialisation instead of bilm-tf's (`main.lua`: every weight
    U(-0.05, 0.05), the highway's -2 a constant on its gate): the character vectors too (bilm-tf:
    U(-1, 1)), the padding character's starting at zero (Kim's stays zero; here it then trains),
    the LSTM's forget bias without TensorFlow's built-in +1, and a softmax (written beside the
    weights, with `vocab`'s size) drawn the same way (bilm-tf: normal, std 1/sqrt(525)). With
    bilm-tf's draw the softmax is left to `elmo train` (no vocabulary needed here).
    """
    torch.manual_seed(seed)
    vocab_size = len(Vocab.load(vocab)) if vocab is not None else 1  # 1: a softmax drawn after the biLM, not kept
    model = new_language_model(BiLMConfig.from_options(kim_small(525)), vocab_size, init)
    model_dir.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        for stack in (model.bilm.forward_lstm, model.bilm.backward_lstm):
            for layer in stack.layers:
                layer.W_P_0.copy_(torch.eye(*layer.W_P_0.shape))
    if init == "kim":
        save_softmax(model.softmax, model_dir / "softmax.hdf5")
    save_bilm(model.bilm, model_dir / "options.json", model_dir / "weights.hdf5")


def score(out: Path, text: Path, lines: int | None, device: str = "cpu", mode: str = "stream") -> dict:
    """Word-level perplexity; `stream`: the text in order, state carried (the PTB protocol);
    `sentence`: every sentence from zero state, which shows how much the model uses earlier sentences."""
    if lines:
        head = out / f"{text.stem}.head{lines}.txt"
        head.write_text("".join(text.read_text().splitlines(keepends=True)[:lines]))
        text = head
    model, vocab, _ = load_run(out)
    if mode == "sentence":
        return perplexity(model, vocab, [str(text)], mode="sentence", batch_size=64, device=device)
    return perplexity(model, vocab, [str(text)], mode="stream", batch_size=1, unroll=35, device=device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="run directory (created; rerun the command to continue)")
    p.add_argument("--data", default=str(DATA), help="folder with ptb.train.txt, ptb.valid.txt, ptb.test.txt")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--steps-per-epoch", type=int, help="default: one pass over ptb.train.txt (1,328 steps)")
    p.add_argument("--eval-lines", type=int, help="score only the first N lines of valid/test (a quick check)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=1.0, help="initial SGD learning rate (Kim's: 1)")
    p.add_argument("--clip", type=float, default=5.0, help="global gradient-norm clip (Kim's: 5)")
    p.add_argument("--projection-dim", type=int, default=525, choices=[300, 525],
                   help="the LSTM's output width (300: the earlier runs, a 525 -> 300 projection after the highway layer)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--batching", default="ordered", choices=BATCHINGS,
                   help="ordered (default): the text in order as 20 contiguous streams, as Kim et al.; stream: "
                   "shuffled sentences packed into rows (the sessions 8-14 run; issue #26's comparisons: 4.5%% worse "
                   "after 4 epochs)")
    p.add_argument("--objective", default="mean", choices=list(OBJECTIVES),
                   help="mean (bilm-tf's, the 25-epoch run) or sum of the direction losses, or the forward LM alone")
    p.add_argument("--weight-init", "--init", dest="init", default="bilm-tf", choices=WEIGHT_INITS,
                   help="`elmo train --weight-init`: bilm-tf's draw or Kim et al.'s (new_language_model), applied here by "
                   "write_initial_model before training because the projections are fixed (only with --projection-dim "
                   "525; --init is its earlier name)")
    args = p.parse_args()
    data, out = Path(args.data), Path(args.out)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(args.threads)
    out.mkdir(parents=True, exist_ok=True)
    vocab, log = out / "ptb.vocab.txt", out / "benchmark.jsonl"
    if not vocab.exists():
        elmo(["vocab", str(data / "ptb.train.txt"), "-o", str(vocab)])
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    if records and records[-1].get("init", "bilm-tf") != args.init:
        raise SystemExit(f"{log}: this run started with --weight-init {records[-1].get('init', 'bilm-tf')}, not {args.init}")
    lr = records[-1]["next_lr"] if records else args.lr
    best = min((r["valid"]["forward"] for r in records), default=float("inf"))
    if args.projection_dim == 525:
        initial = out / "initial-model"
        if not (initial / "weights.hdf5").exists():
            write_initial_model(initial, args.seed, args.init, vocab)
        # a fresh model, not a fine-tune: no softmax-only phase (`elmo train --softmax-steps 0`)
        architecture = {"init_from": str(initial), "freeze": [FIXED_PROJECTIONS], "softmax_steps": 0}
    else:
        if args.init != "bilm-tf":
            raise SystemExit("--weight-init kim needs --projection-dim 525 (the model is written before training)")
        architecture = {"options": kim_small(300)}
    per_epoch = args.steps_per_epoch or count_targets([str(data / "ptb.train.txt")]) // (20 * 35)
    started = time.time() - (records[-1]["wall_s"] if records else 0.0)
    for epoch in range(len(records) + 1, args.epochs + 1):
        train(TrainSettings(
            out=str(out), train=[str(data / "ptb.train.txt")], vocab=str(vocab), seed=args.seed, **architecture,
            optimizer="sgd", lr=lr, clip_norm=args.clip, dropout=0.5, first_layer_dropout=False, batch_size=20, unroll_steps=35, sampled=False,
            max_steps=epoch * per_epoch, threads=args.threads, device=device, checkpoint_every=min(per_epoch, 200), log_every=50,
            batching=args.batching, objective=args.objective,
            resume=latest_checkpoint(out) is not None))
        reached = list_checkpoints(out)[-1][0]
        if reached < epoch * per_epoch:  # stopped early (SIGTERM saves and returns): not an epoch to score
            raise SystemExit(f"{out}: training stopped at step {reached}, before the end of epoch {epoch} "
                             f"(step {epoch * per_epoch}); rerun the same command to continue")
        valid = score(out, data / "ptb.valid.txt", args.eval_lines, device)
        next_lr = lr / 2 if valid["forward"] > best - 1.0 else lr
        best = min(best, valid["forward"])
        record = {"epoch": epoch, "step": epoch * per_epoch, "lr": lr, "clip": args.clip, "projection_dim": args.projection_dim, "batching": args.batching, "objective": args.objective, "init": args.init, "next_lr": next_lr, "valid": valid,
                  "wall_s": round(time.time() - started, 1), "device": device}
        if epoch == args.epochs:
            record["test"] = score(out, data / "ptb.test.txt", args.eval_lines, device)
            # issue #26 (a): a model trained on shuffled sentences gains little from the carried state
            record["valid_zero_state"] = score(out, data / "ptb.valid.txt", args.eval_lines, device, mode="sentence")
        with log.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)
        lr = next_lr


if __name__ == "__main__":
    main()
