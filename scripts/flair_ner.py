"""CoNLL-2003 NER with flair's SequenceTagger: our ELMo (flair's "all" mode) stacked with static word2vec, or the
static vectors alone (issue #57, "flair on the real task").

    python scripts/flair_ner.py --arm elmo --seed 1 --epochs 10 --out benchmarks/results/flair-ner/elmo-s1.json
    python scripts/flair_ner.py --arm static --seed 1 --epochs 10 --out benchmarks/results/flair-ner/static-s1.json

The static vectors are the ones our own tagger uses (`elmo static train`, word2vec binary), loaded into
flair's WordEmbeddings; ELMo is `elmo.integrations.flair.ELMoEmbeddings(--model, embedding_mode="all")`.
The tagger is flair's usual recipe (BiLSTM-CRF, SGD with learning-rate annealing on dev F1), with
the sizes given by the flags. ELMo is frozen, so with --storage cpu (default) each sentence is embedded
once, in the first epoch, and kept in memory (about 6 KB per token for the bundled model). Writes a JSON
of dev/test micro F1 (flair's span F1, as conlleval), the settings, and the wall and CPU time of each epoch.
`--max-sentences N` takes the first N sentences of each split (a smoke test).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
DATA = REPO.parent / "shared" / "data" / "conll2003"
SPLITS = {"train": "eng.train.gz", "dev": "eng.testa.gz", "test": "eng.testb.gz"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", choices=("elmo", "static"), required=True)
    p.add_argument("--model", default="default", help="ELMo model reference (elmo.models.resolve)")
    p.add_argument("--static", type=Path, default=REPO.parent / "runs" / "static" / "wiki-w2v300.bin")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--rnn-layers", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--storage", choices=("cpu", "none"), default="cpu", help="flair's embeddings_storage_mode")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-sentences", type=int, default=None)
    p.add_argument("--work", type=Path, default=None,
                   help="flair's base path: column files, best-model.pt (default ../runs/flair-ner/OUT_STEM, outside the repo)")
    p.add_argument("--rescore", action="store_true",
                   help="no training: score the run's best-model.pt again and update --out (a tagger saved before "
                   "elmo kept a stacked ELMo's name, read with its embeddings in the order it was trained with)")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def write_column_files(data: Path, folder: Path, max_sentences: int | None) -> None:
    """CoNLL-2003's gzipped splits as flair column files, without -DOCSTART- lines (flair reads plain text)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, name in SPLITS.items():
        with gzip.open(data / name, "rt", encoding="utf-8") as f:
            blocks = [b for b in f.read().split("\n\n") if b.strip() and not b.startswith("-DOCSTART-")]
        (folder / f"{split}.txt").write_text("\n\n".join(blocks[:max_sentences]) + "\n", encoding="utf-8")


def repo_relative(value: object) -> str:
    """A path as the docs write it (relative to the checkout, e.g. ../shared/...), so results name no machine."""
    return os.path.relpath(value, REPO) if isinstance(value, Path) and value.is_absolute() else str(value)


def build_embeddings(args: argparse.Namespace):
    from flair.embeddings import StackedEmbeddings, WordEmbeddings

    if not args.static.is_file():
        sys.exit(f"{args.static}: static vectors not found (`elmo static train`, see docs/results.md)")
    stack = [WordEmbeddings(str(args.static))]
    if args.arm == "elmo":
        from elmo.integrations.flair import ELMoEmbeddings

        stack.insert(0, ELMoEmbeddings(args.model, embedding_mode="all"))
    return StackedEmbeddings(stack)


class EpochTimes:
    """A flair trainer plugin that records the wall time of each epoch."""

    def __new__(cls):
        from flair.trainers.plugins import TrainerPlugin

        class Plugin(TrainerPlugin):
            def __init__(self):
                super().__init__()
                self.seconds, self.cpu_seconds, self._start = [], [], None

            @TrainerPlugin.hook
            def before_training_epoch(self, **kwargs):
                self._start = (time.perf_counter(), time.process_time())

            @TrainerPlugin.hook
            def after_training_epoch(self, **kwargs):
                self.seconds.append(round(time.perf_counter() - self._start[0], 1))
                self.cpu_seconds.append(round(time.process_time() - self._start[1], 1))

        return Plugin()


def run(args: argparse.Namespace) -> dict:
    import flair
    import torch
    from flair.datasets import ColumnCorpus
    from flair.models import SequenceTagger
    from flair.trainers import ModelTrainer

    torch.set_num_threads(args.threads)
    flair.set_seed(args.seed)
    work = args.work or REPO.parent / "runs" / "flair-ner" / args.out.stem
    write_column_files(args.data, work / "data", args.max_sentences)
    corpus = ColumnCorpus(work / "data", {0: "text", 3: "ner"}, train_file="train.txt", dev_file="dev.txt",
                          test_file="test.txt")
    tagger = SequenceTagger(hidden_size=args.hidden, embeddings=build_embeddings(args), rnn_layers=args.rnn_layers,
                            tag_dictionary=corpus.make_label_dictionary("ner"), tag_type="ner", use_crf=True)
    times = EpochTimes()
    start = time.perf_counter()
    ModelTrainer(tagger, corpus).train(work / "flair", learning_rate=args.lr, mini_batch_size=args.batch_size,
                                       max_epochs=args.epochs, embeddings_storage_mode=args.storage,
                                       save_final_model=False, plugins=[times])
    best = SequenceTagger.load(work / "flair" / "best-model.pt") if (work / "flair" / "best-model.pt").is_file() \
        else tagger
    scores = {split: best.evaluate(getattr(corpus, split), gold_label_type="ner", mini_batch_size=64,
                                   embedding_storage_mode="none").main_score * 100 for split in ("dev", "test")}
    return {"arm": args.arm, "model": args.model if args.arm == "elmo" else None, "static": os.path.basename(args.static),
            "seed": args.seed, "epochs": args.epochs, "epoch_seconds": times.seconds, "epoch_cpu_seconds": times.cpu_seconds,
            "total_seconds": round(time.perf_counter() - start, 1), "dev_f1": round(scores["dev"], 2),
            "test_f1": round(scores["test"], 2), "max_sentences": args.max_sentences,
            "settings": {k: repo_relative(v) for k, v in vars(args).items()}, "flair": flair.__version__,
            "torch_threads": torch.get_num_threads()}


def restore_stack_names(tagger) -> list[str]:
    """A stack saved before ELMoEmbeddings kept its stacked name ("0-elmo-default") loads it as "elmo-default";
    flair concatenates by sorted name, so the old name puts it after the static vectors. Give it back its place."""
    renamed = []
    for i, embedding in enumerate(tagger.embeddings.embeddings):
        if not embedding.name.startswith(f"{i}-"):
            renamed.append(f"{embedding.name} -> {i}-{embedding.name}")
            embedding.name = f"{i}-{embedding.name}"
    return renamed


def rescore(args: argparse.Namespace) -> dict:
    """The run's best-model.pt scored on dev and test again; the --out JSON's other fields kept."""
    import torch
    from flair.datasets import ColumnCorpus
    from flair.models import SequenceTagger

    torch.set_num_threads(args.threads)
    work = args.work or REPO.parent / "runs" / "flair-ner" / args.out.stem
    corpus = ColumnCorpus(work / "data", {0: "text", 3: "ner"}, train_file="train.txt", dev_file="dev.txt",
                          test_file="test.txt")
    best = SequenceTagger.load(work / "flair" / "best-model.pt")
    result = json.loads(args.out.read_text())
    result["rescored"] = {"renamed": restore_stack_names(best), "before": {k: result[k] for k in ("dev_f1", "test_f1")}}
    for split in ("dev", "test"):
        score = best.evaluate(getattr(corpus, split), gold_label_type="ner", mini_batch_size=64,
                              embedding_storage_mode="none").main_score
        result[f"{split}_f1"] = round(score * 100, 2)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    result = rescore(args) if args.rescore else run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(json.dumps({k: result[k] for k in ("arm", "seed", "dev_f1", "test_f1", "epoch_seconds", "epoch_cpu_seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
