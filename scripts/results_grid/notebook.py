"""The lab notebook of docs/results.md, read from notebook.json beside this file: when and where each
recorded run ran and beside what, the paired arm comparisons, the domain tunings and the PTB runs.

Dated prose lives in the data file, so a new run is recorded there rather than in the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

NOTEBOOK = json.loads((Path(__file__).with_name("notebook.json")).read_text(encoding="utf-8"))

GRID_STATIC_SHA256 = NOTEBOOK["grid_static_sha256"]  # the vectors Table 1's runs read (a rebuild on another CPU differs)
PAIRED_ARMS_INTRO = NOTEBOOK["paired_arms_intro"]  # the machines and static vectors of the paired arms
FLAIR_CONDITIONS = NOTEBOOK.get("flair_conditions", [])  # when and beside what the flair NER runs ran
SPACY_CONDITIONS = NOTEBOOK.get("spacy_conditions", [])  # when and beside what the spaCy NER runs ran


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


class DomainTuning(NamedTuple):
    """A task whose biLM was fine-tuned on the task's own training text, and the comparison that measures it."""

    task: str
    text: str  # what the biLM was tuned on
    tuned: str  # file-name part of the tuned model's perplexity files: tuned-{tuned}-{split}.json
    splits: tuple[str, str]  # the held-out texts scored: dev, test
    comparison: int  # index into ARM_COMPARISONS


def _arm_comparison(entry: dict) -> ArmComparison:
    model = entry["model"] if isinstance(entry["model"], str) else tuple(entry["model"])
    return ArmComparison(entry["title"], entry["about"], tuple(entry["arms"]), tuple(entry["flags"]),
                         entry["conditions"], model, entry["task"])


ARM_COMPARISONS = tuple(_arm_comparison(entry) for entry in NOTEBOOK["arm_comparisons"])
DOMAIN_TUNINGS = tuple(DomainTuning(d["task"], d["text"], d["tuned"], tuple(d["splits"]), d["comparison"])
                       for d in NOTEBOOK["domain_tunings"])
DOMAIN_TUNING_COMMANDS = tuple(NOTEBOOK["domain_tuning_commands"])
