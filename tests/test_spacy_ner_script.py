"""scripts/spacy_ner.py without training: the results row is the runs' mean ± sd and relative error reduction,
and the training logger appends each evaluation as a JSON line."""

from __future__ import annotations

import io
import json

import pytest
from conftest import load_script

pytest.importorskip("spacy", reason="needs spaCy v3 (pip install 'elmo-bilm[spacy]')")
spacy_ner = load_script("scripts/spacy_ner.py")


def result(seed: int, test_f1: float, dev_f1: float, minutes: float, weights=None) -> dict:
    return {"seed": seed, "test": {"ents_f": test_f1}, "best_dev": {"score": dev_f1}, "epochs_started": 3,
            "train_wall_seconds": 60 * minutes, "machine": {"spacy": "3.8.18"},
            "layer_weights": {"tok2vec": weights} if weights else {}}


def test_the_results_row_is_computed_from_the_runs(tmp_path):
    mix = {"weights": [0.2, 0.5, 0.3], "gamma": 0.8}
    for seed, (static, elmo) in enumerate([(0.80, 0.84), (0.82, 0.86)], 1):
        (tmp_path / f"static-s{seed}.json").write_text(json.dumps(result(seed, static, 0.86, 6)))
        (tmp_path / f"elmo-s{seed}.json").write_text(json.dumps(result(seed, elmo, 0.90, 14, mix)))
    row = spacy_ner.results_row(tmp_path)
    # static 81.00 ± 1.41, elmo 85.00 ± 1.41: error 19 -> 15, a 21.1% reduction
    assert "| 81.00 ± 1.41 | 85.00 ± 1.41 | 21.1% | 86.00 / 90.00 |" in row
    assert "(3 epochs, 6 / 14 min a run, seeds 1, 2)" in row and "0.20 / 0.50 / 0.30, gamma 0.80" in row


def test_the_logger_appends_each_evaluation(tmp_path):
    setup = spacy_ner.eval_logger(tmp_path / "evals.jsonl")
    log_step, finalize = setup(None, stdout=io.StringIO())
    info = {"epoch": 0, "step": 200, "seconds": 5, "words": 900, "score": 0.5,
            "other_scores": {"ents_f": 0.5, "ents_p": 0.4, "ents_r": 0.6, "speed": 9}, "losses": {"ner": 3.14159}}
    log_step(info)
    log_step(None)  # spaCy's steps without an evaluation
    log_step({**info, "step": 400, "score": 0.6})
    finalize()
    lines = [json.loads(line) for line in (tmp_path / "evals.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [200, 400]
    assert lines[0]["scores"] == {"ents_f": 0.5, "ents_p": 0.4, "ents_r": 0.6} and lines[0]["losses"] == {"ner": 3.14}
