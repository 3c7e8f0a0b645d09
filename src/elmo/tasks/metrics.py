"""Task metrics: entity span F1 (seqeval, conlleval rules), accuracy; results written as JSON atomically."""

from __future__ import annotations

import os
from collections.abc import Sequence

from elmo.files.fileio import atomic_path, json_text


def span_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Precision/recall/F1 (percent) of exact entity spans, as conlleval counts them (seqeval's default mode).

    Tags are IOB2 here (CoNLL-2003's IOB1 is converted on reading). In the default mode a stray I-X
    after O starts a new span, exactly as in the CoNLL evaluation script.
    """
    try:
        from seqeval.metrics import f1_score, precision_score, recall_score
    except ImportError:
        from elmo.errors import InputError
        raise InputError("span F1 needs seqeval: pip install 'elmo-bilm[tasks]'") from None
    gold, predicted = [list(s) for s in gold], [list(s) for s in predicted]
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted tag sequences differ in number or length")
    return {
        "precision": 100 * float(precision_score(gold, predicted, zero_division=0)),
        "recall": 100 * float(recall_score(gold, predicted, zero_division=0)),
        "f1": 100 * float(f1_score(gold, predicted, zero_division=0)),
    }


def accuracy(gold: Sequence, predicted: Sequence) -> float:
    """Percent of equal items; flattens lists of sequences (token accuracy)."""
    if gold and isinstance(gold[0], (list, tuple)):
        gold = [x for s in gold for x in s]
        predicted = [x for s in predicted for x in s]
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold items but {len(predicted)} predictions")
    if not gold:
        return 0.0
    return 100.0 * sum(g == p for g, p in zip(gold, predicted)) / len(gold)


def write_json(path: str | os.PathLike, data: dict) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(json_text(data, indent=2))
        f.write("\n")
