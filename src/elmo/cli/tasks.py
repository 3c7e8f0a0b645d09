"""`elmo task train`, `elmo probe pos|wsd`, `elmo static train`: the downstream experiments of the paper."""

from __future__ import annotations

import argparse
import json
import os

import torch

from elmo.embed.documents import CONTEXTS
from elmo.errors import InputError, InputFileNotFound
from elmo.files.output_paths import check_not_input
from elmo.model.devices import check_device

from . import add_model_flags, settings_from_args


def _add_elmo_args(p: argparse.ArgumentParser, allow_none: bool) -> None:
    add_model_flags(p, required=True, none_for="the static baseline (no biLM)" if allow_none else None, old_name="--elmo")
    p.add_argument("--cache-dir", default="runs/cache", help="where cached biLM features go (default: runs/cache)")
    p.add_argument("--limit", type=int, default=None, help="only the first N sentences of each file (smoke tests)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--int8", action="store_true",
                   help="biLM features from the int8 model (docs/performance.md#int8-on-cpu; cached under their own key)")


def _add_context_arg(p: argparse.ArgumentParser, data: str) -> None:
    p.add_argument("--context", choices=CONTEXTS, default="sentence",
                   help="biLM features from each sentence alone (default) or from its whole document (docs/documents.md; "
                   f"{data}; cached under their own key)")


def _elmo_spec(args, allow_none: bool):
    from elmo.tasks.features import ElmoSpec
    if args.model is None and args.options is None and args.weights is None:
        raise InputError("--model MODEL" + ("|none" if allow_none else "") + " is required (or --options/--weights)")
    if args.model == "none":
        if not allow_none:
            raise InputError("a probe needs a biLM: --model none is not possible here")
        if args.options or args.weights or args.int8:
            raise InputError("--model none is the static baseline; it takes no --options/--weights/--int8")
        return None
    return ElmoSpec.resolve(args.model, args.options, args.weights, int8=args.int8)


INPUT_FLAGS = ("train", "dev", "test", "static", "options", "weights", "train_xml", "train_keys", "test_xml",
               "test_keys", "wordnet", "save")


def _setup(args) -> None:
    if args.out:
        check_not_input(args.out, {"--" + k.replace("_", "-"): getattr(args, k) for k in INPUT_FLAGS
                                   if isinstance(getattr(args, k, None), str)}, "--out")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.limit is not None and args.limit <= 0:
        raise InputError(f"--limit must be positive, found {args.limit}")


def _write(args, metrics: dict) -> None:
    from elmo.tasks.metrics import write_json
    if args.out:
        write_json(args.out, metrics)
    print(json.dumps({k: metrics[k] for k in ("dev", "test") if k in metrics}, indent=1))


def register(sub: argparse._SubParsersAction) -> None:
    task = sub.add_parser("task", help="train and evaluate a downstream task model (NER, POS, SST-5)")
    task_sub = task.add_subparsers(dest="task_command", required=True, metavar="ACTION")
    t = task_sub.add_parser("train", help="train on cached biLM features, select on dev, write metrics JSON",
                            description="Train a task model with the static baseline's word representation "
                            "(word2vec + char CNN), plus ELMo unless --model none.")
    t.add_argument("task", choices=["ner", "pos", "sst5"],
                   help="ner: CoNLL-2003 (IOB1 read, IOB2 used); pos: CoNLL-U UPOS or CoNLL-2000 PTB; sst5: PTB trees")
    for split in ("train", "dev", "test"):
        t.add_argument(f"--{split}", required=True, help=f"{split} file")
    _add_elmo_args(t, allow_none=True)
    _add_context_arg(t, "needs data marked in documents: CoNLL-2003's -DOCSTART- lines, CoNLL-U's # newdoc")
    t.add_argument("--static", default=None, metavar="VECTORS|none",
                   help="word2vec file from `elmo static train` ('none': no static vectors)")
    t.add_argument("--output-mix", action="store_true", help="also concatenate a second ELMo mix to the encoder output")
    t.add_argument("--train-fraction", type=float, default=1.0, help="use this fraction of the training sentences")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--epochs", type=int, default=20)
    t.add_argument("--patience", type=int, default=5, help="stop after this many dev evaluations without a better score")
    t.add_argument("--eval-every", type=int, default=1, help="score dev every N epochs (small training sets: many "
                   "cheap epochs, few dev passes)")
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--hidden", type=int, default=200)
    t.add_argument("--num-layers", type=int, default=1, help="BiLSTM layers of the tagger")
    t.add_argument("--dropout", type=float, default=0.5)
    t.add_argument("--char-filters", type=int, default=50, help="char CNN filters (0: no char CNN)")
    t.add_argument("--save", default=None, help="write the trained model here (load with elmo.tasks.load_tagger)")
    t.add_argument("--device", default="cpu")
    t.add_argument("--out", default=None, help="metrics JSON")
    t.set_defaults(func=run_train)

    probe = sub.add_parser("probe", help="the paper's layer analysis: POS (linear) and WSD (1-NN) on one biLM layer")
    probe_sub = probe.add_subparsers(dest="probe_command", required=True, metavar="PROBE")
    p = probe_sub.add_parser("pos", help="linear POS classifier on one frozen layer")
    p.add_argument("--layer", type=int, required=True, help="0 (token layer), 1, 2, ...")
    p.add_argument("--train", required=True, help="CoNLL-2000 (PTB tags) or CoNLL-U (UPOS) training file")
    p.add_argument("--dev", default=None, help="dev file (default: the last 10%% of --train)")
    p.add_argument("--test", required=True)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="metrics JSON")
    _add_elmo_args(p, allow_none=False)
    _add_context_arg(p, "needs CoNLL-U files with # newdoc comments")
    p.set_defaults(func=run_probe_pos)
    w = probe_sub.add_parser("wsd", help="1-nearest-neighbour WSD with SemCor sense centroids from one layer")
    w.add_argument("--layer", type=int, required=True)
    w.add_argument("--train-xml", required=True, help="SemCor .data.xml(.gz), Raganato format")
    w.add_argument("--train-keys", required=True, help="SemCor .gold.key.txt(.gz)")
    w.add_argument("--test-xml", required=True, help="e.g. Evaluation_Datasets/ALL/ALL.data.xml")
    w.add_argument("--test-keys", required=True)
    w.add_argument("--wordnet", required=True, help="WordNet 3.0 dict directory (index.sense or index.sense.gz)")
    w.add_argument("--out", default=None, help="metrics JSON")
    _add_elmo_args(w, allow_none=False)
    w.set_defaults(func=run_probe_wsd)

    static = sub.add_parser("static", help="the static word-vector baseline (word2vec)")
    static_sub = static.add_subparsers(dest="static_command", required=True, metavar="ACTION")
    s = static_sub.add_parser("train", help="train word2vec with gensim on a tokenized corpus",
                              description="Train word2vec on the biLM's own corpus, one tokenized sentence per line.")
    s.add_argument("corpus", nargs="+", help="text files (plain or .gz), one tokenized sentence per line")
    s.add_argument("-o", "--output", required=True, help="word2vec binary file to write")
    s.add_argument("--dim", type=int, default=300)
    s.add_argument("--window", type=int, default=5)
    s.add_argument("--min-count", type=int, default=5)
    s.add_argument("--epochs", type=int, default=5)
    s.add_argument("--cbow", action="store_true", help="CBOW instead of skip-gram")
    s.add_argument("--workers", type=int, default=1,
                   help="gensim threads (default 1: the same file on every run; more are faster but their "
                        "threads race, so each run differs)")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--max-sentences", type=int, default=None, help="only the first N sentences (a slice)")
    s.set_defaults(func=run_static)


def run_train(args) -> int:
    from elmo.tasks.train import TrainOptions, run_task
    _setup(args)
    check_device(args.device, "--device")
    static = None if args.static in (None, "none") else args.static
    if static and not os.path.isfile(static):
        raise InputFileNotFound(f"{static}: static vectors not found (train them with `elmo static train`)")
    opts = settings_from_args(TrainOptions, args, elmo=_elmo_spec(args, True), static=static)
    _write(args, run_task(opts))
    return 0


def run_probe_pos(args) -> int:
    from elmo.tasks.probes import pos_probe
    _setup(args)
    _write(args, pos_probe(_elmo_spec(args, False), args.layer, args.train, args.test, dev=args.dev,
                           cache_dir=args.cache_dir, epochs=args.epochs, lr=args.lr, seed=args.seed, limit=args.limit,
                           context=args.context))
    return 0


def run_probe_wsd(args) -> int:
    from elmo.tasks.probes import wsd_probe
    _setup(args)
    _write(args, wsd_probe(_elmo_spec(args, False), args.layer, args.train_xml, args.train_keys, args.test_xml,
                           args.test_keys, args.wordnet, cache_dir=args.cache_dir, limit=args.limit))
    return 0


def run_static(args) -> int:
    from elmo.tasks.static import Corpus, train_word2vec
    check_not_input(args.output, {"CORPUS": args.corpus}, "--output")
    n = train_word2vec(Corpus(args.corpus, args.max_sentences), args.output, dim=args.dim, window=args.window,
                       min_count=args.min_count, epochs=args.epochs, skipgram=not args.cbow, workers=args.workers,
                       seed=args.seed)
    print(f"wrote {n} vectors of dimension {args.dim} to {args.output}")
    return 0
