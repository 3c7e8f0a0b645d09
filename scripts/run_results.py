#!/usr/bin/env python
"""Run the paper's downstream grid and write docs/results.md with its tables and PNG figures.

Grid: NER (CoNLL-2003), POS (UD EWT UPOS), SST-5 - static baseline vs +ELMo, 3 seeds; NER at 1%,
10% and 100% of the training data; POS probes (CoNLL-2000 PTB tags, UD EWT UPOS) and WSD probes
per biLM layer. Every run writes its own metrics JSON under --out and is skipped when that file
exists, so the grid can be stopped and resumed. Every number in the report comes from those files,
next to the exact command that produced it.
Several copies of the same command share the grid: each takes the next run no live process holds.

    python scripts/run_results.py --elmo default                      # the full grid (hours on a CPU)
    python scripts/run_results.py --arms static --docs runs/partial   # the half that needs no biLM
    python scripts/run_results.py --render-only                       # rewrite docs from what exists
    python scripts/run_results.py --smoke --out runs/smoke --docs runs/smoke-docs  # tiny slices, fixture biLM
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from elmo.fileio import atomic_path, hash_file
from elmo.tasks.paper import (PROBES, TABLE1, TASK_BENCHMARK, aggregate_runs, compare_arms, comparison_table,
                              error_reduction, pair_by_seed, read_seed_run, seed_noise_verdict)

REPO = Path(__file__).resolve().parents[1]

# The paper's figures (Peters et al. 2018) live in the package: elmo.tasks.paper (TABLE1, PROBES).
TASK_NAMES = {"ner": "NER (CoNLL-2003 test, span F1)", "pos": "POS (UD EWT test, UPOS accuracy)",
              "sst5": "SST-5 (test, accuracy)"}
ARMS = ("static", "elmo")
FRACTIONS = [0.01, 0.1, 1.0]
PTB_RESULTS = REPO / "benchmarks" / "results"
PTB_RUNS = [  # (short name, what, per-epoch log, command); the first is the default recipe
    ("in order", "in order (Kim's 20 contiguous streams, `--batching ordered`), the recipe issue #26's comparisons chose",
     PTB_RESULTS / "ptb-char-small-ordered.jsonl",
     "python benchmarks/ptb_char_small.py --out ../runs/ptb-ordered-mean-25 --threads 2"),
    ("shuffled", "shuffled sentences packed into rows (`--batching stream`), sessions 8-14",
     PTB_RESULTS / "ptb-char-small-cpu.jsonl",
     "python benchmarks/ptb_char_small.py --out ../runs/ptb-525 --batching stream --threads 2"),
    ("Kim's init", "in order, as run 1, with Kim et al.'s initialisation (`--init kim`: every weight U(-0.05, 0.05)), "
     "issue #26's (c)",
     PTB_RESULTS / "ptb-char-small-kim-init.jsonl",
     "python benchmarks/ptb_char_small.py --out ../runs/ptb-kim-init-25 --init kim --threads 2"),
]
PTB_EPOCHS = 25
PTB_TARGET = 92.3  # Kim et al. (2016), LSTM-Char-Small, test perplexity
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


def elmo_command() -> list[str]:
    exe = Path(sys.executable).parent / "elmo"
    return [str(exe)] if exe.exists() else [shutil.which("elmo") or "elmo"]


def static_command(grid: Grid) -> list[str]:
    return ["static", "train", str(data_files(grid.data)["corpus"]), "-o", str(grid.static), *grid.static_args]


def arm_of(name: str) -> str:
    """The arm a run of `plan` belongs to: static runs use no biLM; +ELMo runs and the probes do."""
    return "static" if "-static-" in name else "elmo"


def run_grid(grid: Grid, runs: list[Run]) -> None:
    grid.out.mkdir(parents=True, exist_ok=True)
    runs = [run for run in runs if arm_of(run.name) in grid.arms]
    if not grid.static.exists():
        grid.static.parent.mkdir(parents=True, exist_ok=True)
        cmd = static_command(grid)
        print("+ elmo " + shlex.join(cmd), flush=True)
        _run(grid, cmd)
    for i, (name, cmd) in enumerate(runs, 1):
        target = grid.out / name
        if target.exists() or (i - 1) % grid.shard[1] != grid.shard[0]:
            continue
        lock = claim(target)
        if lock is None:
            print(f"[{i}/{len(runs)}] {name}: running in another process", flush=True)
            continue
        try:
            if target.exists():  # finished by another process after our first look
                continue
            cmd = cmd + ["--out", str(target)]
            print(f"[{i}/{len(runs)}] + elmo {shlex.join(cmd)}", flush=True)
            started = time.time()
            _run(grid, cmd)
            print(f"    done in {time.time() - started:.0f}s", flush=True)
        finally:
            lock.unlink(missing_ok=True)


def claim(target: Path) -> Path | None:
    """Take a run for this process: a lock file beside its metrics, created exclusively, naming host and pid.

    So several copies of the same command share the grid, each taking the next run nobody holds. A lock
    whose process is gone (a killed run) is taken over; one from another host is respected.
    """
    lock = target.with_name(f".{target.name}.lock")
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if _lock_alive(lock):
                return None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}\n")
        return lock
    return None


def _lock_alive(lock: Path) -> bool:
    try:
        host, pid = lock.read_text().split()
        if host != socket.gethostname():
            return True
        os.kill(int(pid), 0)
    except FileNotFoundError:
        return False
    except ValueError:  # being written right now, or a crash between create and write
        return time.time() - lock.stat().st_mtime < 60 if lock.exists() else False
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _run(grid: Grid, cmd: list[str]) -> None:
    if grid.in_process:
        from elmo.cli import main
        code = main(cmd)
    else:
        code = subprocess.call(elmo_command() + cmd)
    if code != 0:
        sys.exit(f"run failed with exit code {code}: elmo {shlex.join(cmd)}")


# ---------------------------------------------------------------- report


def report_names(grid: Grid, runs: list[Run]) -> list[str]:
    """The metrics files the report can show: the plan's, and every task, arm, fraction and layer it tabulates."""
    names = [run.name for run in runs]
    names += [f"{task}-{arm}-{fraction:g}-s{s}.json" for task in ("ner", "pos", "sst5") for arm in ARMS
              for fraction in FRACTIONS for s in grid.seeds]
    names += [f"probe-{probe}-layer{layer}.json" for probe in ("pos-ptb", "pos-ud", "wsd")
              for layer in range(max(grid.num_layers, 3))]
    return list(dict.fromkeys(names))


def load_metrics(grid: Grid, runs: list[Run]) -> dict[str, dict]:
    """The metrics files that exist, by name, each read once."""
    return {name: json.loads((grid.out / name).read_text()) for name in report_names(grid, runs) if (grid.out / name).exists()}


def main_score(m: dict, split: str = "test") -> float:
    return m[split][m["metric"]]


def mean_std(values: list[float]) -> str:
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def reduction(base: list[float], elmo: list[float]) -> str:
    """Relative error reduction of the means, as the paper reports it (error = 100 - score)."""
    if not base or not elmo or statistics.mean(base) >= 100:
        return ""
    return f"{error_reduction(statistics.mean(base), statistics.mean(elmo)):.1f}%"


def paper_cells(task: str) -> tuple[str, str, str]:
    """The paper's baseline, +ELMo (± std) and error reduction for a task, as published; dashes for POS."""
    bench = TABLE1.get(TASK_BENCHMARK[task])
    if bench is None:
        return "—", "—", "— (not in the paper's Table 1)"
    d = bench.decimals
    elmo = f"{bench.elmo:.{d}f}" + (f" ± {bench.elmo_std:.{d}f}" if bench.elmo_std is not None else "")
    return f"{bench.baseline:.{d}f}", elmo, f"{bench.reduction:.1f}%"


def scores(grid: Grid, metrics: dict, task: str, arm: str, fraction: float, split: str = "test") -> list[float]:
    found = [metrics.get(f"{task}-{arm}-{fraction:g}-s{s}.json") for s in grid.seeds]
    return [main_score(m, split) for m in found if m]


def paired_gain(grid: Grid, metrics: dict, task: str, fraction: float) -> tuple[float, int, int] | None:
    """Mean +ELMo minus static score over the seeds both arms have, how many seeds that is, and in
    how many of them +ELMo is ahead (a gain smaller than the seed-to-seed spread shows up here)."""
    pairs = [(metrics.get(f"{task}-static-{fraction:g}-s{s}.json"), metrics.get(f"{task}-elmo-{fraction:g}-s{s}.json"))
             for s in grid.seeds]
    diffs = [main_score(e) - main_score(b) for b, e in pairs if b and e]
    return (statistics.mean(diffs), len(diffs), sum(d > 0 for d in diffs)) if diffs else None


def describe_gain(gain: tuple[float, int, int]) -> str:
    mean, seeds, ahead = gain
    return f"{mean:+.2f}, ahead in {ahead} of {seeds} seed{'s' if seeds > 1 else ''}"


# Why we think +ELMo falls behind on a task, shown only for the tasks where it does.
TASK_WHY = {
    "sst5": "SST-5 is sentence-level sentiment from 8,544 training sentences: the seed-to-seed spread (about one "
            "point) is larger than anything our biLM adds, the biLM saw Wikipedia rather than opinionated text, and "
            "our classifier mixes ELMo in at its input only (the paper's BCN also at its output; `--output-mix`, "
            "not used in this grid so that every task has the same recipe).",
    "ner": "the NER tagger's word2vec vectors and character CNN already carry most of what a small biLM adds.",
    "pos": "POS tags are mostly decided by the word and its neighbours, which the tagger's own BiLSTM already sees.",
}

def model_facts(grid: Grid) -> dict | None:
    """What docs/model-card.json measured of the bundled biLM the grid used; None for any other biLM."""
    card = REPO / "docs" / "model-card.json"
    if grid.options or grid.elmo != "default" or not card.exists():
        return None
    c = json.loads(card.read_text())
    layers = {int(k): v for k, v in c["contextuality"]["layers"].items()}
    return {"tokens": c["training"]["tokens_seen_per_direction"], "hours": c["training"]["wall_time_hours"],
            "perplexity": c["perplexity"]["test"]["average"], "width": 2 * c["options"]["lstm"]["projection_dim"],
            "words": c["contextuality"]["words"], "margin": {k: v["mean_margin"] for k, v in layers.items()},
            "positive": {k: v["positive"] for k, v in layers.items()}}


def model_line(facts: dict | None) -> list[str]:
    """The measurements of the biLM that the failed bars' explanations lean on."""
    if not facts:
        return []
    return [f"The biLM behind every +ELMo cell (docs/model-card.md): {facts['tokens'] / 1e6:.1f}M tokens per "
            f"direction, {facts['hours']:.1f} h of training, test perplexity {facts['perplexity']:.0f}, against the "
            "paper's 39.7 from 4096-cell LSTMs trained on about 8 billion tokens (10 epochs of the 1B Word "
            f"Benchmark); its mean SemCor sense margins are {facts['margin'][1]:.3f} at layer 1 and "
            f"{facts['margin'][2]:.3f} at layer 2, positive for {facts['positive'][1]} and {facts['positive'][2]} of "
            f"{facts['words']} words.", ""]


def why_failed(name: str, facts: dict | None) -> str:
    """Why we think a bar fails, shown only when it does (the verdict itself is computed)."""
    width = facts["width"] if facts else "its"
    if facts:
        layers = ("layer 1 " + (">" if facts["margin"][1] > facts["margin"][2] else "<=") + " layer 2 in the "
                  "SemCor margins above")
    else:
        layers = "see the model's card"
    smaller = ("a biLM this much smaller and shorter-trained than the paper's (above) adds less to a task model "
               "that already has word2vec vectors from the same text and a character CNN.")
    return {
        "every task": smaller,
        "ner target": smaller,
        "low resource": f"at 1% (140 sentences) the ELMo arm's seeds spread by more than the gain (its std in the "
                        f"table), and the task model has to learn what to do with {width} extra inputs per token "
                        "from very few examples.",
        "pos": f"the biLM's layers are close in what they encode ({layers}).",
        "wsd": "in the paper the top layer of a well-trained biLM carries most sense information, and the 1-NN "
               "probe beats the first-sense baseline only where the vectors separate senses better than sense "
               "frequency does: the paper's biLM is 3.1 points above it (69.0 against 65.9). Ours is far smaller "
               f"(above; {layers}); docs/training.md follows the probe across the training checkpoints.",
    }[name]


def bar_verdicts(grid: Grid, metrics: dict, probe_rows: list, facts: dict | None) -> list[str]:
    """One line per bar of the issue: holds / does not hold / not measured yet, with its numbers.

    Gains are means over the seeds both arms have, so a seed present in one arm only cannot tilt them.
    """
    def verdict(name: str, label: str, ok: bool | None, numbers: str, seeds: int = 0) -> str:
        state = "not measured yet" if ok is None else "**holds**" if ok else "**does not hold**"
        if ok is not None and seeds < len(grid.seeds) and seeds:
            state += f" so far (provisional: {seeds} of {len(grid.seeds)} seeds in some cells)"
        why = f" Why we think so: {why_failed(name, facts)}" if ok is False else ""
        return f"- {label}: {state}{' (' + numbers + ')' if numbers else ''}.{why}"

    gains, seeds = {}, [len(grid.seeds)]
    for task in ("ner", "pos", "sst5"):
        found = paired_gain(grid, metrics, task, 1.0)
        if found:
            gains[task] = found
            seeds.append(found[1])
    every = None if len(gains) < 3 else all(g[0] > 0 for g in gains.values())
    behind = [t for t, g in gains.items() if g[0] <= 0]
    if behind:
        every = False
    lines = [verdict("every task", "+ELMo beats the static baseline on every task", every,
                     "; ".join(f"{t} {describe_gain(g)}" for t, g in gains.items()) + (" so far" if 0 < len(gains) < 3 else ""),
                     min(seeds))]
    for task in behind:  # is the selection set of the same opinion? then it is not a test-set accident
        dev = {arm: scores(grid, metrics, task, arm, 1.0, split="dev") for arm in ("static", "elmo")}
        lines[-1] += (f" {TASK_WHY[task]} On {task} the dev set, where epochs are chosen, agrees: static "
                      f"{statistics.mean(dev['static']):.2f}, +ELMo {statistics.mean(dev['elmo']):.2f} (mean over seeds).")
    lines.append(ner_target_verdict(grid, metrics, verdict))
    low, full = paired_gain(grid, metrics, "ner", FRACTIONS[0]), paired_gain(grid, metrics, "ner", 1.0)
    ok, numbers, counted = None, "", 0
    if low and full:
        ok, numbers = low[0] > full[0], f"gain at 1%: {describe_gain(low)}; at 100%: {describe_gain(full)} (F1)"
        counted = min(low[1], full[1])
    lines.append(verdict("low resource", "The gain is larger at 1% of the NER data than at 100%", ok, numbers, counted))
    score = {(p, layer): v for p, layer, v in probe_rows}
    probes = ("pos-ptb", "pos-ud")
    pairs = [(p, score.get((p, 1)), score.get((p, 2))) for p in probes]
    pairs = [x for x in pairs if x[1] is not None and x[2] is not None]
    ok = None if len(pairs) < len(probes) else all(one > two for _, one, two in pairs)
    numbers = ", ".join(f"{p}: layer 1 {one:.2f}, layer 2 {two:.2f}" for p, one, two in pairs)
    lines.append(verdict("pos", "POS probe: layer 1 > layer 2", ok, numbers))
    lines.append(wsd_target_verdict(metrics, score, verdict))
    return lines


NER_TARGET = 10.0  # percent relative error reduction at 100% of the data, +ELMo ahead in every seed (#25)


def ner_target_verdict(grid: Grid, metrics: dict, verdict) -> str:
    """The bundled model's NER bar: relative error reduction of the means at least NER_TARGET, and +ELMo
    ahead in every seed; when missed, by how much."""
    base, elmo = scores(grid, metrics, "ner", "static", 1.0), scores(grid, metrics, "ner", "elmo", 1.0)
    gain = paired_gain(grid, metrics, "ner", 1.0)
    label = f"NER: relative error reduction at least {NER_TARGET:g}%, +ELMo ahead in every seed"
    if not (base and elmo and gain):
        return verdict("ner target", label, None, "")
    found = error_reduction(statistics.mean(base), statistics.mean(elmo))
    ok = found >= NER_TARGET and gain[2] == gain[1] == len(grid.seeds)
    short = "" if found >= NER_TARGET else f", {NER_TARGET - found:.1f} points short of the target"
    return verdict("ner target", label, ok, f"{found:.1f}%{short}; {describe_gain(gain)}", gain[1])


def wsd_target_verdict(metrics: dict, score: dict, verdict) -> str:
    """The bundled model's WSD bar: layer 2 at least layer 1 and above WordNet's first sense; when missed,
    by how much."""
    label = "WSD probe: layer 2 at least layer 1 and above the WordNet first-sense baseline"
    top, below = score.get(("wsd", 2)), score.get(("wsd", 1))
    probe = metrics.get("probe-wsd-layer2.json")
    if top is None or below is None or probe is None:
        return verdict("wsd", label, None, "")
    first = probe["first_sense_baseline"]
    ok = top >= below and top > first
    gap = "above" if top > first else "under"
    return verdict("wsd", label, ok, f"layer 2 {top:.1f}, layer 1 {below:.1f}, first sense {first:.1f}: "
                                             f"layer 2 {abs(top - first):.1f} {gap} it")


GRID_STATIC_SHA256 = "f33b73d2c0ab68d5"  # the vectors Table 1's runs read (a rebuild on another CPU differs)


def static_fingerprint(path: Path) -> str:
    """The vectors' checksum: one gensim worker rebuilds the same file on one machine, so a copy can be checked."""
    found = hash_file(path).hexdigest()[:16] if path.is_file() else None
    if found in (None, GRID_STATIC_SHA256):
        return f" (sha256 `{GRID_STATIC_SHA256}`)"
    return f" (sha256 `{GRID_STATIC_SHA256}` when the grid ran; the file there now is `{found}`)"


def header_section(grid: Grid, metrics: dict, runs: list[Run]) -> list[str]:
    done = [run.name for run in runs if run.name in metrics]
    return [
        "# Results: ELMo against a static-embedding baseline",
        "",
        "Generated by `scripts/run_results.py` from the metrics files it lists; cells stay empty until",
        "their runs exist. Numbers are test-set scores of the epoch chosen on dev (never on test),",
        f"mean ± sample std over seeds {', '.join(map(str, grid.seeds))}. Both arms use the same task",
        "model and the same word representation (frozen word2vec trained on `wiki_corpus`, the biLM's own",
        "corpus, plus a character CNN for OOV words); the ELMo arm adds a learned scalar mix of the frozen",
        "biLM's layers, so the only difference between the arms is context.",
        "",
        f"biLM: `{grid.elmo if not grid.options else grid.options}`; static vectors: `{grid.static}`"
        f"{static_fingerprint(grid.static)}; {len(done)} of {len(runs)} runs present"
        + (f", {sum(metrics.get(n).get('seconds', 0) for n in done) / 3600:.1f} h of wall-clock time "
           "(the sum of the runs' own times)." if done else ".")
        + (f" {grid.conditions}" if grid.conditions else ""),
        "",
        "Reproduce (resumable: finished runs are skipped; start the same command N times and the N processes "
        "share the grid, each taking the next run nobody holds): "
        f"`python scripts/run_results.py --elmo {grid.elmo} --static {grid.static} --out {grid.out} "
        f"--cache-dir {grid.cache_dir}`; "
        "`--render-only` rewrites this page from the metrics files.",
        "",
        "## Table 1: static baseline vs +ELMo",
        "",
        "| task | paper baseline | paper +ELMo | paper rel. error reduction | ours: static | ours: +ELMo | ours: rel. error reduction |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]


def table1_section(grid: Grid, metrics: dict) -> list[str]:
    lines = []
    for task in ("ner", "pos", "sst5"):
        b, e = scores(grid, metrics, task, "static", 1.0), scores(grid, metrics, task, "elmo", 1.0)
        lines.append(f"| {TASK_NAMES[task]} | {' | '.join(paper_cells(task))} | {mean_std(b)} | "
                     f"{mean_std(e)} | {reduction(b, e)} |")
    return lines + ["", "The paper's baselines are different, stronger task models (and its biLM is far larger);",
                    "the comparison that matters here is the two arms of each row, and the direction of the gain.", ""]


def low_resource_section(grid: Grid, metrics: dict) -> tuple[list[str], dict]:
    """The NER learning curve's table, and the scores per fraction for its figure."""
    lines = ["## Low-resource: NER with 1%, 10%, 100% of the training sentences", "",
              "The same random subset for both arms at a given seed. The paper shows this effect for SNLI and",
              "SRL (Figure 1: with 1% of the SRL data the ELMo model matches the baseline trained on 10%); it",
              "reports no NER curve.", "",
              "| fraction of eng.train | ours: static | ours: +ELMo | gain (F1 points) | rel. error reduction |",
              "| --- | --- | --- | --- | --- |"]
    curve = {}
    for fraction in FRACTIONS:
        b, e = scores(grid, metrics, "ner", "static", fraction), scores(grid, metrics, "ner", "elmo", fraction)
        curve[fraction] = (b, e)
        gain = f"{statistics.mean(e) - statistics.mean(b):+.2f}" if b and e else ""
        lines.append(f"| {fraction:.0%} | {mean_std(b)} | {mean_std(e)} | {gain} | {reduction(b, e)} |")
    return lines + ["", "![NER F1 against training data, both arms](results_lowres.png)", ""], curve


def probe_section(grid: Grid, metrics: dict) -> tuple[list[str], list]:
    """The one-layer probes' table, and (probe, layer, score) rows for the figure and the verdicts."""
    lines = ["## Layer analysis: one frozen biLM layer on its own", "",
              "POS: a linear classifier on the layer (epoch chosen on dev; CoNLL-2000 has no dev split, so the",
              "last 10% of its training sentences serve). WSD: 1-nearest-neighbour to SemCor sense centroids",
              "(cosine), among the instance lemma's WordNet senses seen in SemCor, else WordNet's first sense;",
              "scored on the Raganato ALL set with the framework's rules. Paper: Tables 5 and 6 (PTB POS, WSD ALL).",
              "", "| probe | layer | paper biLM | ours |", "| --- | --- | --- | --- |"]
    probe_rows = []
    for probe, label, key in (("pos-ptb", "POS, CoNLL-2000 (WSJ, PTB tags), accuracy", "accuracy"),
                              ("pos-ud", "POS, UD EWT (UPOS), accuracy", "accuracy"),
                              ("wsd", "WSD, Raganato ALL, F1", "f1")):
        for layer in range(grid.num_layers):
            m = metrics.get(f"probe-{probe}-layer{layer}.json")
            ours = f"{m['test'][key]:.1f}" if m else ""
            paper = f"{PROBES[(probe, layer)]:.1f}" if (probe, layer) in PROBES else "—"
            probe_rows.append((probe, layer, m["test"][key] if m else None))
            lines.append(f"| {label} | {layer} | {paper} | {ours} |")
    wsd_any = next((metrics.get(f"probe-wsd-layer{k}.json") for k in range(grid.num_layers)
                    if metrics.get(f"probe-wsd-layer{k}.json")), None)
    return lines + ["", "WordNet first-sense baseline on ALL: paper 65.9; ours "
                    + (f"{wsd_any['first_sense_baseline']:.1f}" if wsd_any else "(computed by `elmo probe wsd`)")
                    + " (Raganato et al. 2017 publish 65.2 for this set; `tests/test_tasks_readers.py` checks our "
                    "scorer gives it).", "", "![Probe accuracy per layer](results_probes.png)", ""], probe_rows


def layer_weights_section(grid: Grid, metrics: dict) -> tuple[list[str], dict]:
    """The learned scalar mixes' table, and the mean weights per (task, where) for the figure."""
    lines = ["## Learned layer weights (softmax-normalised scalar mix, +ELMo arm, 100% data, mean over seeds)", "",
              "Paper (Figure 2 and its discussion): at the input the task models favour the first biLSTM layer;",
              "the output weights are more balanced.", "",
              "| task | mix | s_0 (token layer) | s_1 | s_2 | gamma |", "| --- | --- | --- | --- | --- | --- |"]
    weights = {}
    for task in ("ner", "pos", "sst5"):
        found = [m for m in (metrics.get(f"{task}-elmo-1-s{s}.json") for s in grid.seeds) if m]
        for where in ("input", "output"):
            mixes = [m["scalar_mix"][where] for m in found if m["scalar_mix"][where]]
            if mixes:
                w = [statistics.mean(x["weights"][j] for x in mixes) for j in range(len(mixes[0]["weights"]))]
                weights[(task, where)] = w
                cells = " | ".join(f"{v:.3f}" for v in w)
                lines.append(f"| {task} | {where} | {cells} | {statistics.mean(x['gamma'] for x in mixes):.3f} |")
    if not weights:
        lines.append("| | | | | | |")
    return lines + ["", "![Learned layer weights per task](results_layer_weights.png)", ""], weights


def bars_section(grid: Grid, metrics: dict, probe_rows: list) -> list[str]:
    facts = model_facts(grid)
    return ["## The bars this is held to", "",
              "Each verdict is computed from the metrics files when the page is rendered; a gain is the mean over the seeds both arms have. "
              "A verdict says which way the means point, not that the difference is beyond chance: with three seeds, "
              "a gain smaller than the arms' std (the tables above) is within seed-to-seed noise, and \"ahead in k of n "
              "seeds\" says how consistent it is.", "",
            *model_line(facts), *bar_verdicts(grid, metrics, probe_rows, facts), ""]


def commands_section(grid: Grid, runs: list[Run]) -> list[str]:
    commands = ["elmo " + shlex.join(run.command + ["--out", str(grid.out / run.name)]) for run in runs]
    return ["## Commands", "", "Every number above comes from the metrics file named in its command.", "",
            "```", "elmo " + shlex.join(static_command(grid)), *commands, "```", ""]


TASK_FILES = {"ner": "--train ../shared/data/conll2003/eng.train.gz --dev ../shared/data/conll2003/eng.testa.gz "
                        "--test ../shared/data/conll2003/eng.testb.gz",
              "sst5": "--train ../shared/data/sst5/trees/train.txt --dev ../shared/data/sst5/trees/dev.txt "
                      "--test ../shared/data/sst5/trees/test.txt"}
TASK_FLAGS = {"ner": "--epochs 15 --patience 3 --num-layers 2", "sst5": "--epochs 15 --patience 3"}
ARM_COMMAND = ("elmo task train {task} {files} --elmo {model} {flags}--static ../runs/static/wiki-w2v300.bin "
               "--seed $s --cache-dir ../runs/cache --threads 1 {task_flags} "
               "--out benchmarks/results/ner-arms/{task}-elmo-{arm}-s$s.json")


def arm_command(task: str, model: str, flags: str, arm: str) -> str:
    """The `elmo task train` command of one arm, exactly as Table 1 runs the task, with one thing changed."""
    return ARM_COMMAND.format(task=task, files=TASK_FILES[task], model=model, flags=flags, task_flags=TASK_FLAGS[task],
                              arm=arm)


class ArmComparison(NamedTuple):
    """Two arms of a task's +ELMo run that differ in one thing, their metrics files under --ner-arms."""

    title: str
    about: str
    arms: tuple[str, str]  # file-name parts: {task}-elmo-{arm}-s{seed}.json
    flags: tuple[str, str]  # what each arm adds to ARM_COMMAND
    conditions: str  # when the runs ran and what else shared the machine
    model: str | tuple[str, str] = "default"  # --elmo of both arms, or of each
    task: str = "ner"

    def models(self) -> tuple[str, str]:
        return (self.model, self.model) if isinstance(self.model, str) else self.model


CONDITIONS_DOCUMENT_ARMS = (
    "Run on 2026-12-06 from 05:29 to 06:45 UTC, the document arm pinned to one core and the sentence arm to the other "
    "(after the model's perplexity and sense checks), one process of one thread each, the seeds in turn; beside them, "
    "niced, the checkpoint scoring of docs/documents.md (F1 does not depend on the load; the runs' times do). Each run "
    "wrote under ../runs and was copied here.")

CONDITIONS_DOMAIN_ARMS = {
    "ner": "The untuned arm ran on 2026-12-06 from 02:58 to 03:55 UTC on an AMD EPYC (the int8 comparison above); the "
           "tuned arm on 2026-12-06 from 19:42 UTC on an Intel Xeon with AVX-512, one process of one thread pinned to one "
           "core, the seeds in turn, beside the SST-5 arms on the other core and helper sessions' niced test suites "
           "(F1 does not depend on the load or, beyond float rounding, on the CPU; the runs' times do).",
    "sst5": "Run on 2026-12-06 from 19:45 to 21:17 UTC on an Intel Xeon with AVX-512, one process of one thread pinned to "
            "a core: seed 1's arms in turn beside the NER arm on the other core, seed 2's arms side by side on the two cores; "
            "helper sessions' niced test suites shared the cores (accuracy does not depend on the load; the runs' times do).",
}

ARM_COMPARISONS = (
    ArmComparison("int8 against float32 biLM features (issue #49)",
                  "The biLM's products in int8 (`--int8`, docs/performance.md#int8-on-cpu) against float32; "
                  "the task model itself trains in float32 either way.",
                  ("fp32", "int8"), ("", "--int8 "),
                  "Run on 2026-12-06 from 02:58 to 03:55 UTC, the two arms side by side, one process of one thread "
                  "pinned to each core, the seeds in turn; helper sessions' niced test suites shared the cores (F1 does "
                  "not depend on the load; the runs' times do). Each run wrote under ../runs and was copied here."),
    ArmComparison("Document against sentence context (issue #48)",
                  "The biLM reads each CoNLL-2003 document (`-DOCSTART-` to `-DOCSTART-`) whole, the forward LM left to "
                  "right and the backward LM right to left (`--context document`, docs/documents.md), against each "
                  "sentence alone; both arms use the document-trained model (`../runs/doc-model`, exported from the "
                  "reset-0.5 run of docs/documents.md), not the bundled default.",
                  ("docmodel-sentence", "docmodel-document"), ("--context sentence ", "--context document "),
                  CONDITIONS_DOCUMENT_ARMS, model="../runs/doc-model"),
    ArmComparison("NER with the biLM tuned on CoNLL-2003's training text (issue #55)",
                  "The bundled model against the bundled model fine-tuned on the task's own training sentences "
                  "(`elmo train --init-from default`, docs/finetuning.md: 4 epochs of the 203,621 training tokens at "
                  "lr 0.03, its own vocabulary and softmax, each sentence from zero state), exported to "
                  "`../runs/tuned/conll`; the tagger, its static vectors and seeds unchanged. The untuned arm is the "
                  "float32 arm above (same command, same static vectors).",
                  ("fp32", "conll-tuned"), ("", ""), CONDITIONS_DOMAIN_ARMS["ner"], model=("default", "../runs/tuned/conll")),
    ArmComparison("SST-5 with the biLM tuned on SST-5's training sentences (issue #55)",
                  "The bundled model against the bundled model fine-tuned on SST-5's 8,544 training sentences "
                  "(163,566 tokens; 4 epochs at lr 0.03 as for NER), exported to `../runs/tuned/sst5`; the "
                  "classifier, its static vectors and seeds unchanged.",
                  ("base", "sst5-tuned"), ("", ""), CONDITIONS_DOMAIN_ARMS["sst5"], model=("default", "../runs/tuned/sst5"),
                  task="sst5"),
)


class DomainTuning(NamedTuple):
    """A task whose biLM was fine-tuned on the task's own training text, and the comparison that measures it."""

    task: str
    text: str  # what the biLM was tuned on
    tuned: str  # file-name part of the tuned model's perplexity files: tuned-{tuned}-{split}.json
    splits: tuple[str, str]  # the held-out texts scored: dev, test
    comparison: int  # index into ARM_COMPARISONS


DOMAIN_TUNINGS = (
    DomainTuning("ner", "CoNLL-2003 training sentences (14,041; 203,621 tokens)", "conll", ("conll-testa", "conll-testb"), 2),
    DomainTuning("sst5", "SST-5 training sentences (8,544; 163,566 tokens)", "sst5", ("sst5-dev", "sst5-test"), 3),
)
DOMAIN_TUNING_COMMANDS = (
    "elmo train --train ../runs/domain/conll-train.txt --vocab src/elmo/bundled/default/vocab.txt --init-from "
    "src/elmo/bundled/default --out ../runs/tune/conll-lr0.03 --lr 0.03 --batch-size 64 --unroll-steps 20 --negatives 4096 "
    "--threads 1 --epochs 2 --checkpoint-every 100 --keep-checkpoints 10",
    "elmo train --out ../runs/tune/conll-lr0.03 --resume --max-steps 680 --threads 1   # on to 4 epochs",
    "elmo export ../runs/tune/conll-lr0.03 -o ../runs/tuned/conll",
    "elmo train --train ../runs/domain/sst5-train.txt --vocab src/elmo/bundled/default/vocab.txt --init-from "
    "src/elmo/bundled/default --out ../runs/tune/sst5-lr0.03 --lr 0.03 --batch-size 64 --unroll-steps 20 --negatives 4096 "
    "--threads 1 --epochs 4 --checkpoint-every 65 --keep-checkpoints 12",
    "elmo export ../runs/tune/sst5-lr0.03 -o ../runs/tuned/sst5",
    "for m in default ../runs/tuned/conll ../runs/tuned/sst5; do for f in conll-testa conll-testb sst5-dev sst5-test; do "
    "elmo perplexity $m --test ../runs/domain/$f.txt --mode sentence --threads 1 --json; done; done",
)


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def domain_tuning_section(grid: Grid) -> list[str]:
    """The paper's section 3.4 claim measured: perplexity and task score before and after tuning on the task's text."""
    folder = grid.ner_arms.parent / "domain-tuning"
    lines = ["## Domain transfer: the biLM tuned on each task's own text (issue #55)", "",
             "Section 3.4 of the paper: fine-tuning the biLM on the task's training text lowers its perplexity and raises",
             "the task's score. Here the bundled model is tuned on each task's training sentences (labels unused) and",
             "everything else of the task run is kept; perplexity is full-softmax, each sentence from zero state (as",
             "the embedder runs it), the average of the two directions, on the task's dev and test sentences. The rate",
             "and length come from the sweep of docs/finetuning.md (lr 0.03, 4 epochs). Task scores: test, mean ± sd",
             "of seeds 1-3, paired by seed; the verdict rule is the one of the paired arms below.", "",
             "| task | text the biLM is tuned on | perplexity dev / test, before -> after | test score without -> with tuning | per-seed difference | verdict |",
             "|---|---|---|---|---|---|"]
    for tuning in DOMAIN_TUNINGS:
        ppl = {}
        for model in ("default", f"tuned-{tuning.tuned}"):
            for split in tuning.splits:
                path = folder / f"{model}-{split}.json"
                ppl[model, split] = json.loads(path.read_text())["average"] if path.is_file() else None
        cells = [f"{ppl['default', s]:.1f} -> {ppl[f'tuned-{tuning.tuned}', s]:.1f}" if None not in (ppl['default', s], ppl[f'tuned-{tuning.tuned}', s]) else "" for s in tuning.splits]
        comparison = ARM_COMPARISONS[tuning.comparison]
        files = [[grid.ner_arms / f"{tuning.task}-elmo-{arm}-s{s}.json" for s in grid.seeds] for arm in comparison.arms]
        score = diffs = verdict = "runs not all present"
        if all(f.is_file() for arm_files in files for f in arm_files):
            pairs = pair_by_seed([read_seed_run(f) for f in files[0]], [read_seed_run(f) for f in files[1]])
            a, b = [[pair[k].scores["test"] for pair in pairs] for k in (0, 1)]
            score = f"{statistics.mean(a):.2f} ± {sd(a):.2f} -> {statistics.mean(b):.2f} ± {sd(b):.2f}"
            diffs = ", ".join(f"{y - x:+.2f}" for x, y in zip(a, b))
            verdict = seed_noise_verdict("test", pairs, comparison.arms).rsplit(": ", 1)[-1].rstrip(".")
        lines.append(f"| {tuning.task} | {tuning.text} | {' / '.join(cells)} | {score} | {diffs} | {verdict} |")
    lines += ["", "Perplexity files: `benchmarks/results/domain-tuning/` (also each tuned model on the other task's text).",
              "The runs and their paired tables are in the section below. Commands (tuning, export, scoring):", "",
              "```bash", *DOMAIN_TUNING_COMMANDS, "```", ""]
    return lines


def arm_comparisons_section(grid: Grid) -> list[str]:
    """Paired arms (--ner-arms): one thing changed, the same static vectors and seeds."""
    lines = ["## One change at a time: paired arms", "",
             "A +ELMo run of Table 1 with one thing changed, 3 seeds per arm, both arms with the same",
             "static vectors: `../runs/static/wiki-w2v300.bin` rebuilt by the grid's `elmo static train` command on",
             "the machines of these runs (an AMD EPYC with AVX-512; later an Intel Xeon with AVX-512, which gave the",
             "same file, sha256 `f63552321861b83a`); one gensim worker gives the same file on one machine, but the",
             "grid's differs (`f33b73d2c0ab68d5`), so these arms are not compared with Table 1's runs. Metrics files:",
             "`benchmarks/results/ner-arms/`.", ""]
    for comparison in ARM_COMPARISONS:
        files = [[grid.ner_arms / f"{comparison.task}-elmo-{arm}-s{s}.json" for s in grid.seeds] for arm in comparison.arms]
        lines += [f"### {comparison.title}", "", f"{comparison.about} {comparison.conditions}", ""]
        paired = [(a, b) for a, b in zip(*files) if a.is_file() and b.is_file()]
        if len(paired) == len(grid.seeds):
            lines += [*compare_arms(files[0], files[1], comparison.arms), ""]
        elif paired:
            pairs = pair_by_seed([read_seed_run(a) for a, _ in paired], [read_seed_run(b) for _, b in paired])
            lines += [*comparison_table(pairs, comparison.arms), "",
                      f"Not all runs are present yet: {len(paired)} of {len(grid.seeds)} seeds paired so far, no verdict.", ""]
        else:
            lines += ["Not all runs are present yet.", ""]
        lines += ["```bash", *(f"for s in {' '.join(map(str, grid.seeds))}; do "
                               f"{arm_command(comparison.task, model, flags, arm)}; done"
                               for arm, flags, model in zip(comparison.arms, comparison.flags, comparison.models())),
                  "```", ""]
    return lines


def render(grid: Grid, runs: list[Run], metrics: dict) -> tuple[str, dict]:
    """results.md's text from the loaded metrics, and what its figures are drawn from (`main` draws them)."""
    curve_lines, curve = low_resource_section(grid, metrics)
    probe_lines, probe_rows = probe_section(grid, metrics)
    weight_lines, weights = layer_weights_section(grid, metrics)
    ptb = ptb_logs()
    lines = [*header_section(grid, metrics, runs), *table1_section(grid, metrics), *curve_lines, *probe_lines,
             *weight_lines, *domain_tuning_section(grid), *arm_comparisons_section(grid), *ptb_section(ptb), *bars_section(grid, metrics, probe_rows), *commands_section(grid, runs)]
    return "\n".join(lines), {"curve": curve, "probe_rows": probe_rows, "weights": weights, "ptb": ptb}


def ptb_section(logs: list[list[dict]]) -> list[str]:
    """The PTB language-modelling benchmark, from the per-epoch logs `benchmarks/ptb_char_small.py` writes."""
    lines = ["## Language modelling: PTB perplexity (Kim et al. 2016's LSTM-Char-Small size)", "",
             "A biLM with LSTM-Char-Small's sizes (char CNN of 525 filters, widths 1-6, one highway layer feeding",
             "2 LSTM layers of 300 cells, each projected up to 525 as the file format needs) trained on Mikolov's",
             "PTB with Kim et al.'s schedule (25 epochs, SGD halved on plateau), the mean of the two directions' losses;",
             "word-level perplexity, end of sentence included, text read in order with the state carried.",
             f"Target: forward test perplexity at or below {PTB_TARGET} (Kim et al.'s; their Large: 78.9). Runs 1 and 3",
             "share recipe, seed and data order and differ only in the initial weights: run 1 bilm-tf's (the default",
             "of `elmo train`), run 3 Kim et al.'s (`elmo train --weight-init kim`). One seed each; the test set is",
             "scored once per run, after its last epoch. docs/training.md has the comparisons that chose the recipe.", ""]
    runs = [(what, log, command, records) for (_, what, log, command), records in zip(PTB_RUNS, logs)]
    if not any(records for *_, records in runs):
        return lines + ["No epoch of the current run has finished yet.", "", "```", PTB_RUNS[0][3], "```", ""]
    for index, (what, _, _, records) in enumerate(runs):
        lines += [f"**Run {index + 1}, {what}.** " + ptb_status(records), ""]
        if index == 0 and not ptb_finished(records):
            lines += ptb_projection(records)
    lines += ["![PTB validation perplexity per epoch](results_ptb.png)", "",
              "Validation perplexity, forward / backward, and the learning rate of each epoch:", "",
              "| epoch | " + " | ".join(f"run {i + 1}: lr | run {i + 1}: valid" for i in range(len(runs))) + " |",
              "| --- | " + " | ".join("--- | ---" for _ in runs) + " |"]
    by_epoch = [{r["epoch"]: r for r in records} for *_, records in runs]
    for epoch in sorted(set().union(*by_epoch)):
        cells = []
        for records in by_epoch:
            r = records.get(epoch)
            cells += [f"{r['lr']:g}", f"{r['valid']['forward']:.1f} / {r['valid']['backward']:.1f}"] if r else ["", ""]
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    lines.append("")
    for index, (_, log, command, records) in enumerate(runs):
        resumable = " (resumable: rerun it to continue)" if records and not ptb_finished(records) else ""
        lines += [f"Run {index + 1}: log `{log.relative_to(REPO)}` (the run's `benchmark.jsonl`); command{resumable}:",
                  "", "```", command, "```", ""]
    return lines


def ptb_finished(records: list[dict]) -> bool:
    """The last epoch scored the test set (a shorter run may have scored it at its own end, e.g. an ablation's)."""
    return bool(records) and records[-1]["epoch"] >= PTB_EPOCHS and "test" in records[-1]


def ptb_devices(records: list[dict]) -> str:
    """Where the epochs ran, e.g. "cpu (epochs 1-7), cuda (epochs 8-9)" for a run resumed on a GPU."""
    spans: list[list] = []
    for r in records:
        if spans and spans[-1][0] == r["device"]:
            spans[-1][2] = r["epoch"]
        else:
            spans.append([r["device"], r["epoch"], r["epoch"]])
    if len(spans) == 1:
        return spans[0][0]
    return ", ".join(f"{d} (epochs {a}-{b})" if a != b else f"{d} (epoch {a})" for d, a, b in spans)


def ptb_status(records: list[dict]) -> str:
    if not records:
        return "No epoch has finished yet."
    last = records[-1]
    if ptb_finished(records):
        t = last["test"]
        verdict = f"; target {'met' if t['forward'] <= PTB_TARGET else 'missed'}"
        v = last["valid"]
        valid = f"Final validation {v['forward']:.1f} / {v['backward']:.1f}"
        if "valid_zero_state" in last:
            z = last["valid_zero_state"]
            valid += f" (every sentence from zero state: {z['forward']:.1f} / {z['backward']:.1f})"
        return (f"Test perplexity after {last['epoch']} epochs: forward **{t['forward']:.1f}**, backward "
                f"**{t['backward']:.1f}**, average {t['average']:.1f} ({t['tokens']:,} tokens){verdict}. "
                f"{valid}. Wall time {last['wall_s'] / 3600:.1f} h on {ptb_devices(records)}.")
    return (f"**Not finished**: {last['epoch']} of {PTB_EPOCHS} epochs after {last['wall_s'] / 3600:.1f} h on "
            f"{ptb_devices(records)}; the test set is scored once, after the last epoch, so the target is not shown yet.")


# Two laws for a validation curve at a fixed learning rate, each a + b * shape(epoch, c): name -> (formula, shape).
CURVE_LAWS = {"power law": ("a + b·epoch^−c", lambda t, c: t ** -c),
              "exponential": ("a + b·exp(−c·epoch)", lambda t, c: np.exp(-c * t))}


def fit_curve(epochs: np.ndarray, values: np.ndarray, shape) -> tuple[float, np.ndarray, float]:
    """Least squares for a and b on a grid of c; returns (squared error, (a, b), c)."""
    best = None
    for c in np.linspace(0.05, 3.0, 591):
        design = np.stack([np.ones_like(epochs), shape(epochs, c)], axis=1)
        coef, *_ = np.linalg.lstsq(design, values, rcond=None)
        error = float(np.sum((design @ coef - values) ** 2))
        if best is None or error < best[0]:
            best = (error, coef, c)
    return best


def ptb_logs() -> list[list[dict]]:
    """Each PTB run's records, read once for the section and its figure."""
    return [ptb_records(log) for _, _, log, _ in PTB_RUNS]


def ptb_records(log: Path) -> list[dict]:
    """A PTB run's per-epoch records; none if the log is not there."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def first_rate_fits(records: list[dict]) -> tuple[list[int], list[tuple[float, str, object]]]:
    """Both laws fitted to the forward validation perplexity at the first learning rate, better fit first.

    Uses the epochs from 2 on (epoch 1 starts from random weights and follows neither law) and
    returns them with the fits, each (squared error, law's name, epoch -> perplexity); no fits
    with fewer than 4 such epochs.
    """
    points = [(r["epoch"], r["valid"]["forward"]) for r in records if r["lr"] == records[0]["lr"] and r["epoch"] >= 2]
    fitted = [e for e, _ in points]
    if len(points) < 4:
        return fitted, []
    epochs = np.array(fitted, dtype=float)
    ppl = np.array([v for _, v in points])
    fits = []
    for name, (_, shape) in CURVE_LAWS.items():
        error, (a, b), c = fit_curve(epochs, ppl, shape)
        fits.append((error, name, lambda t, a=a, b=b, c=c, shape=shape: a + b * shape(np.asarray(t, dtype=float), c)))
    return fitted, sorted(fits, key=lambda fit: fit[0])


def ptb_projection(records: list[dict]) -> list[str]:
    """Where the forward validation curve is heading at the first learning rate, for an unfinished run."""
    fitted, fits = first_rate_fits(records)
    if not fits:
        return []
    (_, best_name, best), (_, other_name, other) = fits
    best_end, other_end = float(best(PTB_EPOCHS)), float(other(PTB_EPOCHS))
    cuts = sorted(100 * (1 - PTB_TARGET / end) for end in (best_end, other_end))
    return [f"Projection, not a result: kept at lr {records[0]['lr']:g}, the forward validation perplexity would reach "
            f"about **{best_end:.0f}** by epoch {PTB_EPOCHS} ({best_name} {CURVE_LAWS[best_name][0]}, the better fit "
            f"to epochs {fitted[0]}-{fitted[-1]}; {other_name} {CURVE_LAWS[other_name][0]}: {other_end:.0f}). Reaching "
            f"{PTB_TARGET} takes the learning-rate halvings to cut about {cuts[0]:.0f}-{cuts[1]:.0f}% from there.", ""]


def ptb_plot(path: Path, logs: list[list[dict]]) -> None:
    """Validation perplexity per epoch of each run, the target, the halvings, the test scores and
    (the target's run, unfinished) the lr-1 projections."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    highest = 0.0
    for index, ((short, *_), records, color) in enumerate(zip(PTB_RUNS, logs, ("tab:blue", "tab:orange", "tab:green"))):
        if not records:
            continue
        name = f"run {index + 1}, {short}"
        epochs = [r["epoch"] for r in records]
        ax.plot(epochs, [r["valid"]["forward"] for r in records], "o-", color=color, ms=4, label=f"{name}: valid, forward")
        ax.plot(epochs, [r["valid"]["backward"] for r in records], "s:", color=color, ms=3, label=f"{name}: valid, backward")
        highest = max(highest, *(r["valid"]["forward"] for r in records))
        for before, after in itertools.pairwise(records):
            if after["lr"] != before["lr"]:
                ax.axvline(before["epoch"] + 0.5, color=color, lw=0.8, ls=":")
        if ptb_finished(records):
            ax.plot([records[-1]["epoch"]], [records[-1]["test"]["forward"]], "*", color=color, ms=12,
                    label=f"{name}: test, forward")
        elif index == 0:
            grid = np.linspace(2, PTB_EPOCHS, 100)
            for (_, law_name, law), style in zip(first_rate_fits(records)[1], ("--", "-.")):
                ax.plot(grid, law(grid), style, color=color, lw=1, label=f"{name}: kept at lr {records[0]['lr']:g}, {law_name}")
    if highest:
        ax.axhline(PTB_TARGET, color="tab:red", lw=1, label=f"target (test) {PTB_TARGET}")
        ax.set_xlim(0.5, PTB_EPOCHS + 0.5)
        ax.set_ylim(PTB_TARGET - 10, min(260, highest + 10))
    ax.set_xlabel("epoch (dotted lines: learning rate halved)")
    ax.set_ylabel("word-level perplexity")
    ax.set_title("PTB, LSTM-Char-Small-sized biLM")
    _save(fig, path, legend_size=7)


def plots(grid: Grid, curve, probe_rows, weights) -> None:
    """The three figures; drawn (possibly empty) every time, so the report's images always exist."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = grid.docs
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for arm, index, style in (("static", 0, "o--"), ("+ELMo", 1, "s-")):
        xs = [f for f in FRACTIONS if curve[f][index]]
        ys = [statistics.mean(curve[f][index]) for f in xs]
        es = [statistics.stdev(curve[f][index]) if len(curve[f][index]) > 1 else 0 for f in xs]
        if xs:
            ax.errorbar([100 * x for x in xs], ys, yerr=es, fmt=style, capsize=3, label=arm)
    ax.set_xscale("log")
    ax.set_xticks([1, 10, 100], ["1%", "10%", "100%"])
    ax.set_xlabel("fraction of CoNLL-2003 training sentences")
    ax.set_ylabel("test span F1")
    ax.set_title("NER: low-resource curve")
    _save(fig, docs / "results_lowres.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for probe, label in (("pos-ptb", "POS PTB (acc.)"), ("pos-ud", "POS UD (acc.)"), ("wsd", "WSD ALL (F1)")):
        pts = [(layer, v) for p, layer, v in probe_rows if p == probe and v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax.set_xticks(range(grid.num_layers))
    ax.set_xlabel("biLM layer (0 = token layer)")
    ax.set_ylabel("test score")
    ax.set_title("What one layer knows")
    _save(fig, docs / "results_probes.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    width = 0.8 / max(len(weights), 1)
    for i, ((task, where), w) in enumerate(sorted(weights.items())):
        ax.bar([j + i * width for j in range(len(w))], w, width, label=f"{task} ({where})")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(grid.num_layers)], [f"layer {j}" for j in range(grid.num_layers)])
    ax.set_ylabel("softmax weight s_j")
    ax.set_ylim(0, max([0.6] + [1.3 * v for w in weights.values() for v in w]))
    ax.set_title("Learned layer weights")
    _save(fig, docs / "results_layer_weights.png", legend_size="small")


def _save(fig, path: Path, legend_size=None) -> None:
    """The legend, or "no runs yet" on an empty plot; written under a temporary name, then renamed."""
    ax = fig.axes[0]
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)
    else:
        ax.text(0.5, 0.5, "no runs yet", transform=ax.transAxes, ha="center", va="center", color="grey")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--elmo", default="default", help="bundled biLM name or model directory (default: default)")
    p.add_argument("--options", type=Path, help="biLM options.json (with --weights, instead of --elmo)")
    p.add_argument("--weights", type=Path)
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--static", type=Path, default=REPO / "runs" / "static" / "wiki-w2v300.bin",
                   help="word2vec vectors; trained on wiki_corpus first if absent")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "grid",
                   help="metrics files (committed: docs/results.md renders from them; models and locks are not)")
    p.add_argument("--cache-dir", type=Path, default=REPO / "runs" / "cache")
    p.add_argument("--docs", type=Path, default=REPO / "docs")
    p.add_argument("--ner-arms", type=Path, default=REPO / "benchmarks" / "results" / "ner-arms",
                   help="metrics files of the paired NER arms (ARM_COMPARISONS), rendered, never run by this script")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--tasks", nargs="*", default=["ner", "pos", "sst5"], choices=["ner", "pos", "sst5"])
    p.add_argument("--no-probes", dest="probes", action="store_false")
    p.add_argument("--num-layers", type=int, default=3, help="L+1 of the biLM (3 for 2 LSTM layers)")
    p.add_argument("--output-mix", action="store_true", help="ELMo also at the encoder output, all tasks")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per run (default 1: on a shared 2-core machine more threads ran 5-30x slower)")
    p.add_argument("--limit", type=int, default=None, help="first N sentences of each file (smoke runs)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS,
                   help="run only these arms (default both): the static arm needs no biLM (its runs and the "
                        "word2vec vectors can go first, e.g. while the biLM trains); the probes count as elmo")
    p.add_argument("--shard", type=shard, default=(0, 1), metavar="I/N",
                   help="run only every N-th run starting at I (0-based), so N processes share the grid")
    p.add_argument("--render-only", action="store_true", help="only rewrite the report from existing metrics")
    p.add_argument("--conditions", default="",
                   help="what else ran beside the grid, printed after its wall-clock time (times depend on it)")
    p.add_argument("--force", action="store_true",
                   help="rewrite the report even if it would show fewer runs than the one it replaces")
    p.add_argument("--in-process", action="store_true", help="run commands in this process (faster for tiny runs)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny slices with the fixture biLM and tiny models: checks the pipeline, numbers mean nothing")
    return p


# The flags each run of the grid gets (`Grid`'s last four fields): the paper's recipe, and --smoke's tiny one.
RECIPE = {"train_args": {"all": ["--epochs", "15", "--patience", "3"], "ner": ["--num-layers", "2"]}, "probe_args": (),
          "low_resource": LOW_RESOURCE_SCHEDULE, "static_args": ("--dim", "300", "--min-count", "5", "--epochs", "5")}
SMOKE_RECIPE = {"train_args": {"all": ["--epochs", "2", "--hidden", "8", "--char-filters", "4", "--batch-size", "8"]},
                "probe_args": ("--epochs", "2"), "low_resource": {},
                "static_args": ("--dim", "8", "--min-count", "1", "--epochs", "1", "--max-sentences", "200")}


def parse_args(argv=None) -> Grid:
    """The command line as a Grid; --smoke: the fixture biLM, 24 sentences per file and SMOKE_RECIPE."""
    p = _parser()
    a = vars(p.parse_args(argv))
    a.update(SMOKE_RECIPE if a["smoke"] else RECIPE, seeds=tuple(a["seeds"]), tasks=tuple(a["tasks"]), arms=tuple(a["arms"]))
    if a["smoke"]:
        fixture = a["data"].parent / "fixtures" / "allennlp-elmo"
        a["options"], a["weights"] = a["options"] or fixture / "options.json", a["weights"] or fixture / "lm_weights.hdf5"
        a["limit"] = a["limit"] or 24
        if a["static"] == p.get_default("static"):
            a["static"] = a["out"] / "w2v-smoke.bin"
    return Grid(**a)


def runs_shown(report: Path) -> int:
    """How many runs an existing report was rendered from (0 when there is none)."""
    if not report.exists():
        return 0
    found = re.search(r"(\d+) of \d+ runs present", report.read_text(encoding="utf-8"))
    return int(found.group(1)) if found else 0


def shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N such as 0/2, found {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"expected 0 <= I < N, found {text!r}")
    return i, n


def main(argv=None) -> int:
    grid = parse_args(argv)
    paths = ("options", "weights", "data", "static", "out", "cache_dir", "docs", "ner_arms")
    grid = replace(grid, **{name: rel(getattr(grid, name)) for name in paths if getattr(grid, name) is not None})
    os.chdir(REPO)  # every command runs from the repo root, as its report shows it
    runs = plan(grid)
    if not grid.render_only:
        run_grid(grid, runs)
    grid.docs.mkdir(parents=True, exist_ok=True)
    metrics = load_metrics(grid, runs)
    present = sum(run.name in metrics for run in runs)
    shown = runs_shown(grid.docs / "results.md")
    if present < shown and not grid.force:
        print(f"{grid.docs / 'results.md'} shows {shown} runs but only {present} metrics files are under {grid.out}; "
              "not rewriting it (point --out at the metrics, or pass --force)", file=sys.stderr)
        return 2
    text, figures = render(grid, runs, metrics)
    plots(grid, figures["curve"], figures["probe_rows"], figures["weights"])
    ptb_plot(grid.docs / "results_ptb.png", figures["ptb"])
    with atomic_path(grid.docs / "results.md") as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    write_lab_results(grid)
    print(f"wrote {grid.docs / 'results.md'}")
    return 0


def write_lab_results(grid: Grid) -> None:
    """docs/results.json: Table 1's numbers for `elmo lab` (panel 7), aggregated by the package
    (elmo.tasks.paper.aggregate_runs), so the lab never parses the Markdown back."""
    with atomic_path(grid.docs / "results.json") as tmp:
        Path(tmp).write_text(json.dumps({"benchmarks": aggregate_runs(grid.out)}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
