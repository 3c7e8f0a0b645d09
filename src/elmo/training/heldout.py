"""`elmo train --valid FILE`: held-out perplexity of the model being trained, before, during and after.

Scored with the full softmax in the mode the model will be embedded in (sentence, or document for a
run with document batching), into metrics.jsonl as records with a "valid" key. The starting figure
is the model as it starts (a model without a softmax: after the softmax phase, when the biLM is still
the start model's); a first later figure above it says the rate is too high, in the log and at the end.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from elmo.formats.lm_vocab import Vocab

from .model import LanguageModel
from .perplexity import perplexity
from .settings import RunConfig

VALID_BATCH = 64  # sentences (or documents) per scoring batch; the figure does not depend on it


class HeldOut:
    """When to score `run.valid`'s file, the records so far (read back on resume) and the verdict."""

    def __init__(self, run: RunConfig, vocab: Vocab, metrics: Path):
        self.file, self.every, self.mode = run.valid["file"], run.valid["every"], run.valid["mode"]
        self.start_step = run.softmax_steps  # the model as it starts: after the softmax phase, if any
        self.vocab = vocab
        self.records = [r for r in _read(metrics) if isinstance(r.get("valid"), dict)]

    def due(self, step: int, final: bool = False) -> bool:
        if any(r["step"] == step for r in self.records):
            return False
        return final or step == self.start_step or (step > 0 and step % self.every == 0)

    def score(self, model: LanguageModel, step: int, tokens: int, elapsed: float, phase: str,
              write: Callable[[dict], None]) -> dict:
        """Score the model as it is (RNG states and training mode left as they were), write and keep the record."""
        rng = torch.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        try:
            result = perplexity(model, self.vocab, [self.file], mode=self.mode, batch_size=VALID_BATCH,
                                device=next(model.parameters()).device)
        finally:
            torch.set_rng_state(rng)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
            model.train()
        record = {"step": step, "tokens": tokens, "phase": phase, "valid": result, "elapsed_s": round(elapsed, 3)}
        start = self.start()
        if step == self.start_step:
            record["start"] = True
        elif start is not None and step > start["step"] and not any(r["step"] > start["step"] for r in self.records):
            record["worse_than_start"] = result["average"] > start["valid"]["average"]
            record["start_average"] = start["valid"]["average"]
            if record["worse_than_start"]:
                print(f"warning: {worse_line(record)}", file=sys.stderr)
        self.records.append(record)
        write(record)
        return record

    def start(self) -> dict | None:
        return next((r for r in self.records if r["step"] == self.start_step), None)

    def summary(self) -> dict | None:
        """Start and end figures, and the first comparison (for the end of `elmo train`)."""
        if not self.records:
            return None
        first = next((r for r in self.records if "worse_than_start" in r), None)
        start = self.start()
        return {"file": self.file, "mode": self.mode, "start": start["valid"] if start else None,
                "start_step": self.start_step, "end": self.records[-1]["valid"], "end_step": self.records[-1]["step"],
                "first_worse": first if first and first["worse_than_start"] else None}


def worse_line(record: dict) -> str:
    """The message for a rate whose first held-out figure is worse than the starting model's."""
    return (f"held-out perplexity {record['valid']['average']:.2f} at step {record['step']} is worse than the starting "
            f"model's {record['start_average']:.2f} ({record['valid']['mode']} mode): the learning rate is probably too "
            "high for fine-tuning (docs/finetuning.md)")


def summary_lines(summary: dict) -> list[str]:
    """The end of `elmo train`: the held-out figures before and after, and the rate warning again."""
    def fmt(result: dict | None) -> str:
        return "n/a" if result is None or not math.isfinite(result["average"]) else (
            f"{result['average']:.2f} (forward {result['forward']:.2f}, backward {result['backward']:.2f})")

    lines = [f"held-out perplexity of {summary['file']} ({summary['mode']} mode): at the start (step "
             f"{summary['start_step']}) {fmt(summary['start'])}; at step {summary['end_step']} {fmt(summary['end'])}"]
    if summary["first_worse"]:
        lines.append(f"warning: {worse_line(summary['first_worse'])}")
    return lines


def _read(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records
