#!/usr/bin/env python
"""Two arms of task runs, seed by seed: is their difference beyond seed noise?

Each arm is a list of `elmo task train --out` metrics files with the same seeds in both. Prints a
markdown table (dev and test score per seed, mean and sample standard deviation per arm) and one
verdict sentence per split, by a rule stated in the output: the difference counts as beyond seed
noise when every seed moves the same way and the mean paired difference is larger than the larger
of the two arms' seed-to-seed standard deviations.

    python scripts/compare_runs.py --a "float32" benchmarks/results/grid/ner-elmo-1-s{1,2,3}.json \\
        --b "int8" benchmarks/results/int8-ner/ner-elmo-int8-1-s{1,2,3}.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("dev", "test")


@dataclass(frozen=True)
class Run:
    path: Path
    seed: int
    metric: str
    scores: dict[str, float]  # split -> the task's main metric


def read_run(path: Path) -> Run:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        metric = data["metric"]
        return Run(path, int(data["seed"]), metric, {split: float(data[split][metric]) for split in SPLITS})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a task metrics file with seed, metric and dev/test scores ({e})")


def pair_up(a: list[Run], b: list[Run]) -> list[tuple[Run, Run]]:
    """The runs of both arms matched by seed; the arms must hold the same seeds and one metric."""
    by_seed_a, by_seed_b = {r.seed: r for r in a}, {r.seed: r for r in b}
    if set(by_seed_a) != set(by_seed_b) or len(by_seed_a) != len(a) or len(by_seed_b) != len(b):
        raise SystemExit(f"the arms must hold each seed once and the same seeds: {sorted(r.seed for r in a)} "
                         f"against {sorted(r.seed for r in b)}")
    if len({r.metric for r in a + b}) != 1:
        raise SystemExit(f"the runs score different metrics: {sorted({r.metric for r in a + b})}")
    return [(by_seed_a[s], by_seed_b[s]) for s in sorted(by_seed_a)]


def spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def verdict(split: str, pairs: list[tuple[Run, Run]], names: tuple[str, str]) -> str:
    a = [ra.scores[split] for ra, _ in pairs]
    b = [rb.scores[split] for _, rb in pairs]
    diffs = [y - x for x, y in zip(a, b)]
    mean_diff, noise = statistics.mean(diffs), max(spread(a), spread(b))
    same_sign = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
    beyond = same_sign and abs(mean_diff) > noise
    return (f"{split}: {names[1]} minus {names[0]} = {mean_diff:+.2f} on average (per seed "
            f"{', '.join(f'{d:+.2f}' for d in diffs)}); seed-to-seed spread up to {noise:.2f}: "
            f"{'beyond' if beyond else 'within'} seed noise.")


def table(pairs: list[tuple[Run, Run]], names: tuple[str, str]) -> list[str]:
    metric = pairs[0][0].metric
    lines = [f"| arm | seed | dev {metric} | test {metric} |", "|---|---:|---:|---:|"]
    for k, name in enumerate(names):
        runs = [pair[k] for pair in pairs]
        lines += [f"| {name} | {r.seed} | {r.scores['dev']:.2f} | {r.scores['test']:.2f} |" for r in runs]
        stats = [f"{statistics.mean(v):.2f} ± {spread(v):.2f}" for v in ([r.scores[s] for r in runs] for s in SPLITS)]
        lines.append(f"| {name} | mean ± sd | {stats[0]} | {stats[1]} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", nargs="+", required=True, metavar=("NAME", "FILE"), help="the first arm's name, then its files")
    p.add_argument("--b", nargs="+", required=True, metavar=("NAME", "FILE"), help="the second arm's name, then its files")
    args = p.parse_args(argv)
    if len(args.a) < 2 or len(args.b) < 2:
        p.error("each arm needs a name and at least one file")
    names = (args.a[0], args.b[0])
    pairs = pair_up([read_run(Path(f)) for f in args.a[1:]], [read_run(Path(f)) for f in args.b[1:]])
    print("\n".join(table(pairs, names)))
    print()
    print("Rule: beyond seed noise when every seed moves the same way and the mean paired difference exceeds "
          "the larger arm's seed-to-seed standard deviation.")
    for split in SPLITS:
        print(f"- {verdict(split, pairs, names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
