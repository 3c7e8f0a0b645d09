"""The paper's published figures and the arithmetic on task results: one copy for the lab's panel 7
and for scripts/run_results.py (docs/results.md), so neither keeps numbers of its own.

Figures: Peters et al. (2018), Table 1 (test; baseline and ELMo + baseline, with the standard deviation
over seeds for the two tasks this project runs), Table 5 (WSD F1 by biLM layer) and Table 6 (PTB POS
accuracy by layer).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path


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
