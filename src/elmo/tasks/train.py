"""Train and evaluate a task model (NER, POS, SST-5) on cached frozen-biLM features; select on dev only."""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from elmo.embed.documents import check_context
from elmo.errors import InputError
from elmo.files.output_paths import check_not_input
from elmo.model.devices import move_tensors

from .classifier import SentenceClassifier
from .data import TaskData
from .features import ElmoSpec, build_cache, document_ids
from .layers import ModelConfig
from .metrics import accuracy, span_f1, write_json
from .model_file import task_model_state, write_task_model
from .readers import Example, read_task_file
from .tagger import Tagger

# task -> model kind, CRF, the dev metric that selects the epoch
TASKS = {
    "ner": {"kind": "tagger", "crf": True, "metric": "f1"},
    "pos": {"kind": "tagger", "crf": False, "metric": "accuracy"},
    "sst5": {"kind": "classifier", "crf": False, "metric": "accuracy"},
}


@dataclass
class TrainOptions:
    task: str
    train: str
    dev: str
    test: str
    elmo: ElmoSpec | None = None
    context: str = "sentence"  # biLM features from each sentence alone, or from its whole document
    static: str | None = None
    output_mix: bool = False
    train_fraction: float = 1.0
    seed: int = 1
    epochs: int = 20
    patience: int = 5  # dev evaluations without improvement before stopping
    eval_every: int = 1  # epochs between dev evaluations (and always after the last epoch)
    batch_size: int = 32
    lr: float = 1e-3
    hidden: int = 200
    num_layers: int = 1
    dropout: float = 0.5
    char_filters: int = 50
    limit: int | None = None  # first N sentences of each split: for smoke tests on slices
    cache_dir: str = "runs/cache"
    save: str | None = None
    device: str = "cpu"
    progress: bool = True
    extra: dict = field(default_factory=dict)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def subset_rows(n: int, fraction: float, seed: int) -> list[int]:
    """The training sentences kept at `fraction`: chosen by the seed alone, so both arms see the same ones."""
    if not 0 < fraction <= 1:
        raise InputError(f"--train-fraction must be in (0, 1], found {fraction}")
    if fraction == 1:
        return list(range(n))
    k = max(1, round(fraction * n))
    return sorted(random.Random(seed).sample(range(n), k))


def label_set(task: str, splits: list[list[Example]]) -> list[str]:
    if task == "sst5":
        return ["0", "1", "2", "3", "4"]
    tags = sorted({t for examples in splits for e in examples for t in e.tags})
    return (["O"] + [t for t in tags if t != "O"]) if "O" in tags else tags


def evaluate(model, data: TaskData, vocab: dict, labels: dict, task: str, batch_size: int = 64) -> dict:
    """The task's metrics on one split: span F1 for NER, token accuracy for POS, accuracy for SST-5."""
    model.eval()
    names = {i: n for n, i in labels.items()}
    predicted: list = [None] * len(data)
    device = next(model.parameters()).device
    for idx, batch in data.batches(vocab, labels, batch_size):
        for i, out in zip(idx, model.decode(_to(batch, device))):
            predicted[i] = [names[k] for k in out] if isinstance(out, list) else names[out]
    if task == "ner":
        return span_f1([e.tags for e in data.examples], predicted)
    if task == "pos":
        return {"accuracy": accuracy([e.tags for e in data.examples], predicted)}
    return {"accuracy": accuracy([e.label for e in data.examples], predicted)}


def build_model(cfg: ModelConfig):
    return Tagger(cfg) if cfg.kind == "tagger" else SentenceClassifier(cfg)


def run_task(opts: TrainOptions, metrics_path: str | None = None) -> dict:
    """Read, cache, train with early stopping on dev, evaluate dev and test; returns the metrics dict."""
    _check_options(opts)
    spec = TASKS[opts.task]
    started = time.time()
    splits = {name: read_task_file(opts.task, getattr(opts, name), limit=opts.limit) for name in ("train", "dev", "test")}
    rows = subset_rows(len(splits["train"]), opts.train_fraction, opts.seed)
    labels = {n: i for i, n in enumerate(label_set(opts.task, list(splits.values())))}
    vocab_words, table = _word_table(opts, splits)
    vocab = {w: i for i, w in enumerate(vocab_words)}
    caches = _elmo_caches(opts, splits)
    data = {
        "train": TaskData([splits["train"][r] for r in rows], caches.get("train"), rows),
        "dev": TaskData(splits["dev"], caches.get("dev")),
        "test": TaskData(splits["test"], caches.get("test")),
    }
    cfg, model = _new_model(opts, spec, list(labels), vocab_words, table, caches.get("train"))
    history, best_epoch = _train_with_early_stopping(model, data, vocab, labels, opts, spec["metric"])
    metrics = {
        "task": opts.task,
        "arm": "elmo" if opts.elmo else "static",
        "elmo": opts.elmo.describe() if opts.elmo else None,
        "context": opts.context,
        "static": opts.static,
        "output_mix": cfg.output_mix,
        "train_fraction": opts.train_fraction,
        "seed": opts.seed,
        "n_train": len(data["train"]),
        "metric": spec["metric"],
        "best_epoch": best_epoch,
        "dev": evaluate(model, data["dev"], vocab, labels, opts.task),
        "test": evaluate(model, data["test"], vocab, labels, opts.task),
        "scalar_mix": model.mixes(),
        "history": history,
        "config": cfg.to_dict(),
        "files": {"train": opts.train, "dev": opts.dev, "test": opts.test},
        "seconds": round(time.time() - started, 1),
    }
    for cache in caches.values():
        cache.close()
    if opts.save:
        save_task_model(opts.save, model, cfg, vocab_words, opts, metrics)
    if metrics_path:
        write_json(metrics_path, metrics)
    return metrics


def _check_options(opts: TrainOptions) -> None:
    if opts.task not in TASKS:
        raise InputError(f"unknown task {opts.task!r}; expected one of {', '.join(TASKS)}")
    inputs = {"--train": opts.train, "--dev": opts.dev, "--test": opts.test, "--static": opts.static}
    if opts.elmo:
        inputs.update({"--options": opts.elmo.options_file, "--weights": opts.elmo.weight_file})
    if opts.save:
        check_not_input(opts.save, inputs, "--save")
    if check_context(opts.context) == "document" and opts.elmo is None:
        raise InputError("--context document is about biLM features; the static arm (--model none) has none")
    if opts.elmo is None and opts.static is None and opts.char_filters == 0:
        raise InputError("nothing to feed the model: give --model, --static or a char CNN")
    for name in ("epochs", "patience", "eval_every"):
        if getattr(opts, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, found {getattr(opts, name)}")


def _word_table(opts: TrainOptions, splits: dict) -> tuple[list[str], np.ndarray | None]:
    """The word vocabulary (padding, unknown, then the static vectors' words that occur) and their vectors."""
    if not opts.static:
        return ["<pad>", "<unk>"], None
    from .static import embedding_table, load_vectors
    return embedding_table(load_vectors(opts.static), (t for ex in splits.values() for e in ex for t in e.tokens))


def _elmo_caches(opts: TrainOptions, splits: dict) -> dict:
    """Each split's biLM layers, computed once into the cache (none for the static arm)."""
    if opts.elmo is None:
        return {}
    embedder = opts.elmo.embedder(device=opts.device)
    caches = {}
    for name, examples in splits.items():
        source = getattr(opts, name)
        tag = f"{opts.task}-{os.path.basename(source)}-{len(examples)}"
        caches[name] = build_cache(opts.elmo, [e.tokens for e in examples], opts.cache_dir, tag, embedder=embedder,
                                   documents=document_ids(examples, opts.context, source))
    return caches


def _new_model(opts: TrainOptions, spec: dict, labels: list[str], vocab_words: list[str], table: np.ndarray | None,
               train_cache) -> tuple[ModelConfig, torch.nn.Module]:
    """The task model, seeded, with the static vectors copied in, on the device."""
    elmo_layers, elmo_dim = (train_cache.num_layers, train_cache.dim) if train_cache is not None else (0, 0)
    cfg = ModelConfig(kind=spec["kind"], labels=labels, vocab_size=len(vocab_words),
                      static_dim=0 if table is None else table.shape[1], char_filters=opts.char_filters,
                      hidden=opts.hidden, num_layers=opts.num_layers, dropout=opts.dropout,
                      elmo_layers=elmo_layers, elmo_dim=elmo_dim, output_mix=opts.output_mix and elmo_layers > 0,
                      crf=spec["crf"])
    set_seed(opts.seed)
    model = build_model(cfg)
    if table is not None:
        model.words.static.weight.data.copy_(torch.from_numpy(table))
    model.to(opts.device)
    return cfg, model


def _train_with_early_stopping(model, data: dict, vocab: dict, labels: dict, opts: TrainOptions,
                               metric: str) -> tuple[list[dict], int]:
    """Epochs until `patience` dev scorings bring no better score; the model ends with its best weights."""
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=opts.lr)
    rng = random.Random(opts.seed)
    history, best, best_state, best_epoch, stale = [], -1.0, None, 0, 0
    for epoch in range(1, opts.epochs + 1):
        train_loss = _train_epoch(model, optimizer, data["train"], vocab, labels, opts, rng, epoch)
        if epoch % opts.eval_every and epoch != opts.epochs:
            history.append({"epoch": epoch, "train_loss": train_loss})
            continue
        dev = evaluate(model, data["dev"], vocab, labels, opts.task)
        history.append({"epoch": epoch, "train_loss": train_loss, "dev": dev})
        if dev[metric] > best:
            best, best_state, best_epoch, stale = dev[metric], copy.deepcopy(model.state_dict()), epoch, 0
        else:
            stale += 1
            if stale >= opts.patience:
                break
    model.load_state_dict(best_state)
    return history, best_epoch


def _train_epoch(model, optimizer, train: TaskData, vocab: dict, labels: dict, opts: TrainOptions,
                 rng: random.Random, epoch: int) -> float:
    """One pass over the training sentences; returns the mean loss per sentence."""
    model.train()
    total, count = 0.0, 0
    bar = tqdm(total=len(train), desc=f"{opts.task} epoch {epoch}", unit="sent", dynamic_ncols=True,
               disable=not opts.progress, file=sys.stderr)
    for idx, batch in train.batches(vocab, labels, opts.batch_size, rng):
        loss = model.loss(_to(batch, opts.device))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        total += loss.item() * len(idx)
        count += len(idx)
        bar.update(len(idx))
        bar.set_postfix(loss=f"{total / count:.4f}")
    bar.close()
    return total / max(count, 1)


def _to(batch, device):
    return batch if str(device) == "cpu" else move_tensors(batch, device)


def save_task_model(path: str, model, cfg: ModelConfig, vocab_words: list[str], opts: TrainOptions, metrics: dict) -> None:
    """Everything `load_task_model` needs, including the learned scalar-mix weights (presets for the lab)."""
    kept = {k: metrics[k] for k in ("dev", "test", "best_epoch", "seed", "train_fraction")}
    state = task_model_state(opts.task, cfg, model.state_dict(), vocab_words, asdict(opts.elmo) if opts.elmo else None,
                             os.path.abspath(opts.static) if opts.static else None, model.mixes(), kept)
    write_task_model(path, state)
