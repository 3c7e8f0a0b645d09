"""The metrics files read once, and the numbers the report shows from them: test scores per task, arm,
fraction and seed, means ± sample std, the paper's cells, error reductions and paired gains."""

from __future__ import annotations

import json
import statistics

from elmo.tasks.paper import TABLE1, TASK_BENCHMARK, error_reduction

from .grid import ARMS, FRACTIONS, Grid, Run


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


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0

