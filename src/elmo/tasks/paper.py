"""The paper's published figures and the arithmetic on task results: one copy for the lab's panel 7,
scripts/run_results.py (docs/results.md) and scripts/compare_runs.py, so none keeps numbers of its own.

Figures: Peters et al. (2018), Table 1 (test; baseline and ELMo + baseline, with the standard deviation
over seeds for the two tasks this project runs), Table 5 (WSD F1 by biLM layer) and Table 6 (PTB POS
accuracy by layer).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from elmo.errors import InputError


@dataclass(frozen=True)
class Benchmark:
    """One row of the paper's Table 1; `decimals` is the precision it was published with."""

    task: str
    metric: str
    baseline: float
    elmo: float
    elmo_std: float | None = None
    decimals: int = 1
    data: str | None = None  # its folder under ../shared/data, when this project can run it

    @property
    def increase(self) -> float:
        return round(self.elmo - self.baseline, 2)

    @property
    def reduction(self) -> float:
        return error_reduction(self.baseline, self.elmo)


TABLE1 = {
    "SQuAD": Benchmark("question answering", "F1", 81.1, 85.8),
    "SNLI": Benchmark("textual entailment", "accuracy", 88.0, 88.7),
    "SRL": Benchmark("semantic role labelling", "F1", 81.4, 84.6),
    "Coref": Benchmark("coreference resolution", "average F1", 67.2, 70.4),
    "NER": Benchmark("named entity recognition (CoNLL-2003)", "F1", 90.15, 92.22, 0.10, 2, "conll2003"),
    "SST-5": Benchmark("sentiment, 5 classes", "accuracy", 51.4, 54.7, 0.5, 1, "sst5"),
}
# (probe, biLM layer) -> the paper's score: PTB POS accuracy (Table 6), all-words WSD F1 (Table 5).
PROBES = {("pos-ptb", 1): 97.3, ("pos-ptb", 2): 96.8, ("wsd", 1): 67.4, ("wsd", 2): 69.0}
# `elmo task train` task -> the name of its benchmark (POS is ours, not in Table 1).
TASK_BENCHMARK = {"ner": "NER", "sst5": "SST-5", "pos": "POS"}


def error_reduction(baseline: float, elmo: float, scale: float = 100.0) -> float:
    """Relative error reduction in percent: how much of the baseline's error ELMo removed."""
    return 100.0 * (elmo - baseline) / (scale - baseline)


def aggregate_runs(folder: Path) -> dict:
    """The metrics files of `elmo task train` in `folder` (full training data only) -> per benchmark the
    mean test score of each arm, with the sample std when there are several seeds."""
    scores: dict[tuple[str, str], list[float]] = {}
    metric_of: dict[str, str] = {}
    for f in sorted(Path(folder).glob("*.json")):
        try:
            m = json.loads(f.read_text(encoding="utf-8"))
            full_run = m.get("train_fraction") == 1 and m.get("arm") in ("elmo", "static")
            if m.get("task") not in TASK_BENCHMARK or not full_run:
                continue
            score = float(m["test"][m["metric"]])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        scores.setdefault((m["task"], m["arm"]), []).append(score)
        metric_of[m["task"]] = m["metric"]
    out = {}
    for task, name in TASK_BENCHMARK.items():
        base, elmo = scores.get((task, "static")), scores.get((task, "elmo"))
        if not base or not elmo:
            continue
        entry = {"metric": metric_of[task], "baseline": round(statistics.mean(base), 2),
                 "elmo": round(statistics.mean(elmo), 2),
                 "note": f"test set, mean over {len(base)} / {len(elmo)} seeds (baseline / +ELMo)"}
        if len(base) > 1:
            entry["baseline_std"] = round(statistics.stdev(base), 2)
        if len(elmo) > 1:
            entry["elmo_std"] = round(statistics.stdev(elmo), 2)
        out[name] = entry
    return out


SPLITS = ("dev", "test")
NOISE_RULE = ("beyond seed noise when every seed moves the same way and the mean paired difference exceeds the "
              "larger arm's seed-to-seed standard deviation")


@dataclass(frozen=True)
class SeedRun:
    """One `elmo task train` run: its seed and its main metric on dev and test."""

    path: Path
    seed: int
    metric: str
    scores: dict  # split -> score


def read_seed_run(path: str | Path) -> SeedRun:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        metric = data["metric"]
        return SeedRun(path, int(data["seed"]), metric, {split: float(data[split][metric]) for split in SPLITS})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a task metrics file with seed, metric and dev/test scores ({e})") from None


def pair_by_seed(a: list[SeedRun], b: list[SeedRun]) -> list[tuple[SeedRun, SeedRun]]:
    """Two arms' runs matched by seed; each arm must hold the same seeds, once each, and one metric."""
    seeds_a, seeds_b = sorted(r.seed for r in a), sorted(r.seed for r in b)
    if seeds_a != seeds_b or len(set(seeds_a)) != len(seeds_a):
        raise InputError(f"the arms must hold each seed once and the same seeds: {seeds_a} against {seeds_b}")
    if len({r.metric for r in a + b}) != 1:
        raise InputError(f"the runs score different metrics: {sorted({r.metric for r in a + b})}")
    by_seed = {r.seed: r for r in b}
    return [(r, by_seed[r.seed]) for r in sorted(a, key=lambda r: r.seed)]


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def comparison_table(pairs: list[tuple[SeedRun, SeedRun]], names: tuple[str, str]) -> list[str]:
    """Markdown rows: each run's dev and test score, then each arm's mean ± sample sd."""
    metric = pairs[0][0].metric
    lines = [f"| arm | seed | dev {metric} | test {metric} |", "|---|---:|---:|---:|"]
    for k, name in enumerate(names):
        runs = [pair[k] for pair in pairs]
        lines += [f"| {name} | {r.seed} | {r.scores['dev']:.2f} | {r.scores['test']:.2f} |" for r in runs]
        stats = [f"{statistics.mean(v):.2f} ± {_spread(v):.2f}" for v in ([r.scores[s] for r in runs] for s in SPLITS)]
        lines.append(f"| {name} | mean ± sd | {stats[0]} | {stats[1]} |")
    return lines


def seed_noise_verdict(split: str, pairs: list[tuple[SeedRun, SeedRun]], names: tuple[str, str]) -> str:
    """The second arm minus the first on `split`, per seed and on average, judged by NOISE_RULE."""
    a = [ra.scores[split] for ra, _ in pairs]
    b = [rb.scores[split] for _, rb in pairs]
    diffs = [y - x for x, y in zip(a, b)]
    mean_diff, noise = statistics.mean(diffs), max(_spread(a), _spread(b))
    beyond = (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)) and abs(mean_diff) > noise
    return (f"{split}: {names[1]} minus {names[0]} = {mean_diff:+.2f} on average (per seed "
            f"{', '.join(f'{d:+.2f}' for d in diffs)}); seed-to-seed spread up to {noise:.2f}: "
            f"{'beyond' if beyond else 'within'} seed noise.")


def compare_arms(files_a: list, files_b: list, names: tuple[str, str]) -> list[str]:
    """The table, the rule and one verdict per split, for two arms' metrics files."""
    pairs = pair_by_seed([read_seed_run(f) for f in files_a], [read_seed_run(f) for f in files_b])
    return [*comparison_table(pairs, names), "", f"Rule: {NOISE_RULE}.", "",
            *(f"- {seed_noise_verdict(split, pairs, names)}" for split in SPLITS)]
