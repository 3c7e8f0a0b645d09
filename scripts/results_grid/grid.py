"""The grid: the command line read once (Grid), the data files, and every run in a cheap-first order (plan)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]

# The paper's figures (Peters et al. 2018) live in the package: elmo.tasks.paper (TABLE1, PROBES).
TASK_NAMES = {"ner": "NER (CoNLL-2003 test, span F1)", "pos": "POS (UD EWT test, UPOS accuracy)",
              "sst5": "SST-5 (test, accuracy)"}
ARMS = ("static", "elmo")
FRACTIONS = [0.01, 0.1, 1.0]
# Epochs for the subsets, both arms alike: at 1% an epoch is five updates, so 15 epochs with patience 3
# stop before the tagger predicts its first entity (F1 0 in a first run). Dev is scored every few
# epochs, so its cost does not grow with the number of (cheap) epochs; patience counts dev scorings.
LOW_RESOURCE_SCHEDULE = {0.01: ["--epochs", "100", "--eval-every", "5", "--patience", "3"],
                         0.1: ["--epochs", "40", "--eval-every", "2", "--patience", "3"]}


def rel(path: Path) -> Path:
    """Paths beside the checkout (../shared, runs/) relative to the repo root, so the report names no machine."""
    path = Path(os.path.abspath(path))
    return Path(os.path.relpath(path, REPO)) if path.is_relative_to(REPO.parent) else path


def data_files(data: Path) -> dict:
    w = data / "wsd_raganato"
    return {
        "ner": [data / "conll2003" / f for f in ("eng.train.gz", "eng.testa.gz", "eng.testb.gz")],
        "pos": [data / "ud_english_ewt" / f"en_ewt-ud-{s}.conllu.gz" for s in ("train", "dev", "test")],
        "sst5": [data / "sst5" / "trees" / f"{s}.txt" for s in ("train", "dev", "test")],
        "pos-ptb": [data / "conll2000" / "train.txt.gz", None, data / "conll2000" / "test.txt.gz"],
        "pos-ud": [data / "ud_english_ewt" / f"en_ewt-ud-{s}.conllu.gz" for s in ("train", "dev", "test")],
        "wsd": {"train_xml": w / "Training_Corpora" / "SemCor" / "semcor.data.xml.gz",
                "train_keys": w / "Training_Corpora" / "SemCor" / "semcor.gold.key.txt.gz",
                "test_xml": w / "Evaluation_Datasets" / "ALL" / "ALL.data.xml",
                "test_keys": w / "Evaluation_Datasets" / "ALL" / "ALL.gold.key.txt",
                "wordnet": data / "wordnet30" / "dict"},
        "corpus": data / "wiki_corpus" / "train.txt.gz",
    }


@dataclass(frozen=True)
class Grid:
    """What to run and render: the command line, read once (`parse_args`)."""

    elmo: str
    options: Path | None
    weights: Path | None
    data: Path
    static: Path
    out: Path
    cache_dir: Path
    docs: Path
    ner_arms: Path
    seeds: tuple[int, ...]
    tasks: tuple[str, ...]
    probes: bool
    num_layers: int
    output_mix: bool
    threads: int
    limit: int | None
    arms: tuple[str, ...]
    shard: tuple[int, int]
    render_only: bool
    conditions: str
    force: bool
    in_process: bool
    smoke: bool
    train_args: dict  # task (or "all") -> `elmo task train` flags
    probe_args: tuple[str, ...]
    low_resource: dict  # fraction -> flags
    static_args: tuple[str, ...]


class Run(NamedTuple):
    """One run of the grid: its metrics file's name and the `elmo` command (without --out) that writes it."""

    name: str
    command: list[str]


def plan(grid: Grid) -> list[Run]:
    """Every run of the grid, in a cheap-first order."""
    f = data_files(grid.data)
    elmo = ["--options", str(grid.options), "--weights", str(grid.weights)] if grid.options else ["--elmo", grid.elmo]
    common = ["--cache-dir", str(grid.cache_dir)] + (["--threads", str(grid.threads)] if grid.threads else [])
    common += ["--limit", str(grid.limit)] if grid.limit else []
    train_extra = grid.train_args.get("all", [])
    # Low-resource NER runs first (cheap), then the full-data runs seed by seed, so every table row has a
    # first reading before the second seed starts. Several processes share the grid (see `claim`).
    cells = [(task, fraction, seed) for fraction in FRACTIONS[:-1] for task in grid.tasks if task == "ner"
             for seed in grid.seeds]
    cells += [(task, 1.0, seed) for seed in grid.seeds for task in grid.tasks]
    runs = []
    for task, fraction, seed in cells:
        train, dev, test = (str(p) for p in f[task])
        for arm in ("static", "elmo"):
            name = f"{task}-{arm}-{fraction:g}-s{seed}.json"
            cmd = ["task", "train", task, "--train", train, "--dev", dev, "--test", test,
                   *(elmo if arm == "elmo" else ["--elmo", "none"]), "--static", str(grid.static),
                   "--seed", str(seed), *common, *train_extra, *grid.train_args.get(task, [])]
            if fraction < 1:
                # fewer sentences need more passes to reach the same number of updates
                cmd += ["--train-fraction", f"{fraction:g}", *grid.low_resource.get(fraction, [])]
            if arm == "elmo" and grid.output_mix:
                cmd.append("--output-mix")
            if task == "ner" and fraction == 1.0 and seed == grid.seeds[0]:
                cmd += ["--save", str(grid.out / name.replace(".json", ".model.pt"))]  # for `elmo lab --ner`
            runs.append(Run(name, cmd))
    if grid.probes:
        for data_name in ("pos-ptb", "pos-ud"):
            train, dev, test = f[data_name]
            for layer in range(grid.num_layers):
                cmd = ["probe", "pos", "--layer", str(layer), "--train", str(train), "--test", str(test), *elmo,
                       *common, *grid.probe_args]
                runs.append(Run(f"probe-{data_name}-layer{layer}.json", cmd + (["--dev", str(dev)] if dev else [])))
        w = f["wsd"]
        for layer in range(grid.num_layers):
            cmd = ["probe", "wsd", "--layer", str(layer), *[a for k, v in w.items() for a in (f"--{k.replace('_', '-')}", str(v))],
                   *elmo, *common]
            runs.append(Run(f"probe-wsd-layer{layer}.json", cmd))
    return runs


def static_command(grid: Grid) -> list[str]:
    return ["static", "train", str(data_files(grid.data)["corpus"]), "-o", str(grid.static), *grid.static_args]


def arm_of(name: str) -> str:
    """The arm a run of `plan` belongs to: static runs use no biLM; +ELMo runs and the probes do."""
    return "static" if "-static-" in name else "elmo"

