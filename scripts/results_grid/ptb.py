"""The PTB language-modelling section: each run's per-epoch log (`benchmarks/ptb_char_small.py`), its
status, the validation table and, for an unfinished run, where its curve is heading (curves.py)."""

from __future__ import annotations

import json
from pathlib import Path

from .curves import CURVE_LAWS, first_rate_fits
from .grid import REPO
from .notebook import NOTEBOOK

# (short name, what, per-epoch log, command), from the lab notebook; the first is the default recipe
PTB_RUNS = [(run["name"], run["what"], REPO / run["log"], run["command"]) for run in NOTEBOOK["ptb_runs"]]
PTB_EPOCHS = 25
PTB_TARGET = 92.3  # Kim et al. (2016), LSTM-Char-Small, test perplexity


def ptb_logs() -> list[list[dict]]:
    """Each PTB run's records, read once for the section and its figure."""
    return [ptb_records(log) for _, _, log, _ in PTB_RUNS]


def ptb_records(log: Path) -> list[dict]:
    """A PTB run's per-epoch records; none if the log is not there."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


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

