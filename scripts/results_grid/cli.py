"""The command line: its flags, the recipes each run gets, and main (run the grid, then render the report)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from elmo.files.fileio import atomic_path
from elmo.tasks.paper import aggregate_runs

from . import __doc__ as USAGE  # the package's docstring is the command's --help
from .grid import ARMS, LOW_RESOURCE_SCHEDULE, REPO, Grid, plan, rel
from .plots import plots, ptb_plot
from .report import render
from .stats import load_metrics
from .work_queue import run_grid


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
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

