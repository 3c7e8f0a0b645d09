"""Helpers shared by the lab tests (this module holds no tests).

The fixture biLM has no LM softmax, so `write_test_softmax` makes one on a small vocabulary with
random weights: enough to run panel 6's code path, and the predictions are checked against numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, DATA, need

SIZE = "small"  # the reference-set budget of `elmo lab --reference-size small`


def shared_cache(tmp_path_factory) -> Path:
    """One reference-set cache for the whole test session: the in-process tests build it, the
    browser test's `elmo lab` (same model, data and size) then loads it instead of re-embedding."""
    return tmp_path_factory.getbasetemp() / "lab-reference-cache"


BANK = {"word": "bank", "sentences": [
    {"sense": "river", "text": "He sat by the river bank and watched the water ."},
    {"sense": "river", "text": "The boat drifted toward the muddy bank of the stream ."},
    {"sense": "money", "text": "She went to the bank to deposit her money ."},
    {"sense": "money", "text": "The bank raised its interest rates again ."},
]}


def fixture_files() -> tuple[Path, Path]:
    need(ALLENNLP)
    return ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"


def write_test_softmax(folder: Path, projection_dim: int = 16, seed: int = 0) -> tuple[Path, Path]:
    """vocab.txt (<S>, </S>, <UNK>, the fixture's test words, a few common ones) + softmax.hdf5."""
    words = ["<S>", "</S>", "<UNK>"] + (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split()
    words = list(dict.fromkeys(words + "The cat sat on the mat . bank river money".split()))
    vocab, softmax = folder / "vocab.txt", folder / "softmax.hdf5"
    vocab.write_text("\n".join(words) + "\n", encoding="utf-8")
    rng = np.random.default_rng(seed)
    with h5py.File(softmax, "w") as f:
        f["W"] = rng.normal(size=(len(words), projection_dim)).astype(np.float32)
        f["b"] = rng.normal(size=len(words)).astype(np.float32)
    return vocab, softmax


def write_results(path: Path) -> Path:
    """A results file in the lab's format, with numbers no real run produced (clearly fake)."""
    path.write_text(json.dumps({"benchmarks": {
        "NER": {"metric": "F1", "baseline": 80.0, "elmo": 84.0, "baseline_std": 0.5, "elmo_std": 0.25},
        "SST-5": {"why": "not run: test says so"},
        "POS": {"task": "POS tagging (EWT)", "metric": "accuracy", "baseline": 90.0, "elmo": 95.0},
    }}), encoding="utf-8")
    return path


def need_data() -> Path:
    need(DATA / "ud_english_ewt")
    need(DATA / "wsd_raganato")
    return DATA


def need_module(name: str):
    return pytest.importorskip(name, reason=f"the lab tests need {name}: pip install -e '.[lab-test]'")
