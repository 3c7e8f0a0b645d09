"""Paired arms (--ner-arms): a +ELMo run of Table 1 with one thing changed, and the domain-tuning
section that reads two of them; what ran is recorded in the lab notebook (notebook.json)."""

from __future__ import annotations

import json
import statistics

from elmo.tasks.paper import compare_arms, comparison_table, pair_by_seed, read_seed_run, seed_noise_verdict

from .grid import Grid
from .notebook import ARM_COMPARISONS, DOMAIN_TUNING_COMMANDS, DOMAIN_TUNINGS, PAIRED_ARMS_INTRO
from .stats import sd

# tests/test_docs_examples.py runs every shell example of docs/ unless the line above it says why not
DOCS_EXAMPLE_SKIP = "<!-- example: skip a measurement (CPU-hours) -->"


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


def domain_tuning_section(grid: Grid) -> list[str]:
    """The paper's section 3.4 claim measured: perplexity and task score before and after tuning on the task's text."""
    folder = grid.ner_arms.parent / "domain-tuning"
    lines = ["## Domain transfer: the biLM tuned on each task's own text", "",
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
              DOCS_EXAMPLE_SKIP, "```bash", *DOMAIN_TUNING_COMMANDS, "```", ""]
    return lines


def arm_comparisons_section(grid: Grid) -> list[str]:
    """Paired arms (--ner-arms): one thing changed, the same static vectors and seeds."""
    lines = ["## One change at a time: paired arms", "", *PAIRED_ARMS_INTRO, ""]
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
        lines += [DOCS_EXAMPLE_SKIP, "```bash", *(f"for s in {' '.join(map(str, grid.seeds))}; do "
                               f"{arm_command(comparison.task, model, flags, arm)}; done"
                               for arm, flags, model in zip(comparison.arms, comparison.flags, comparison.models())),
                  "```", ""]
    return lines

