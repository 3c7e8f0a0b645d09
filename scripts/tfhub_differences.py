"""The largest differences of elmo.tfhub.Module from TensorFlow's own outputs (tests/data/tfhub, made by
scripts/make_tfhub_references.py), as docs/tensorflow.md quotes them; the tests hold them to 1e-6 and 1e-5.

    python scripts/tfhub_differences.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import h5py
import numpy as np
from make_tfhub_references import ORIGINAL_OPTIONS, SECOND_CALL, SENTENCES, TOKEN_LENGTHS, TOKENS, original_weights

from elmo.tfhub import Module

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "tfhub"


def fixture_difference() -> tuple[float, int]:
    """Largest absolute difference over every stored output of the fixture module (both poolings, stateful calls)."""
    reference = np.load(DATA / "fixture-outputs.npz")
    worst = 0.0
    for pooling, prefix in (("tokens", ""), ("all", "all_pooling/")):
        module = Module(DATA / "fixture-module.tar.gz", default_pooling=pooling, stateful=True)
        calls = [("default/", SENTENCES, "default")] + [
            (f"tokens{i}/", {"tokens": words, "sequence_len": lengths}, "tokens")
            for i, (words, lengths) in enumerate([(TOKENS, TOKEN_LENGTHS), (TOKENS, TOKEN_LENGTHS), SECOND_CALL])]
        for key, inputs, signature in calls:
            for name, value in module(inputs, signature=signature, as_dict=True).items():
                worst = max(worst, float(np.abs(value - reference[prefix + key + name]).max()))
    return worst, len(reference.files)


def original_difference() -> float:
    """Largest difference relative to each output's largest value, at the published module's shapes."""
    record = json.loads((DATA / "original.json").read_text())
    reference = np.load(DATA / "original-outputs.npz")
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder)
        (model / "options.json").write_text(json.dumps(ORIGINAL_OPTIONS))
        with h5py.File(model / "weights.hdf5", "w") as f:
            for name, value in original_weights(record["seed"]).items():
                f[name] = value
        mix = {"weights": record["mix"][0], "scaling": record["mix"][1]}
        (model / "tfhub_module.json").write_text(json.dumps({"mix": mix}))
        module = Module(model)
        worst = 0.0
        for key, inputs, signature in [("default/", SENTENCES[:2], "default"), (
                "tokens0/", {"tokens": TOKENS[1:3], "sequence_len": TOKEN_LENGTHS[1:3]}, "tokens")]:
            for name, value in module(inputs, signature=signature, as_dict=True).items():
                expected = reference[key + name]
                worst = max(worst, float(np.abs(value - expected).max() / np.abs(expected).max()))
    return worst


if __name__ == "__main__":
    worst, count = fixture_difference()
    print(f"fixture: largest absolute difference over {count} outputs: {worst:.2g}")
    print(f"original shapes: largest difference relative to the output's largest value: {original_difference():.2g}")
