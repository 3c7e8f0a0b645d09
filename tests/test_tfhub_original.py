"""Issue #63 item 4 at the published module's shapes (2x4096 LSTMs, 512 projection, 2048 CNN filters): random weights
made again from the seed scripts/make_tfhub_references.py used (their sha256 checked), against the outputs TensorFlow
gave for its module of them (tests/data/tfhub/original-outputs.npz), within 1e-5 of the largest value."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from make_tfhub_references import ORIGINAL_OPTIONS, SENTENCES, TOKEN_LENGTHS, TOKENS, original_weights, weights_sha256

from elmo.tf.hub_import import MIX_NAME
from elmo.tfhub import OUTPUTS, Module

DATA = Path(__file__).parent / "data" / "tfhub"


@pytest.mark.slow
def test_original_shapes_match_tensorflow(tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    record = json.loads((DATA / "original.json").read_text())
    weights = original_weights(record["seed"])
    assert weights_sha256(weights) == record["weights_sha256"], "numpy made other random weights than the references'"
    assert record["options"] == ORIGINAL_OPTIONS
    model = tmp_path / "model"
    model.mkdir()
    (model / "options.json").write_text(json.dumps(ORIGINAL_OPTIONS))
    with h5py.File(model / "weights.hdf5", "w") as f:
        for name, value in weights.items():
            f[name] = value
    del weights
    mix, scaling = record["mix"]
    (model / MIX_NAME).write_text(json.dumps({"mix": {"weights": mix, "scaling": scaling}}))
    module = Module(model)
    reference = np.load(DATA / "original-outputs.npz")
    found = {"default/": module(SENTENCES[:2], signature="default", as_dict=True),
             "tokens0/": module({"tokens": TOKENS[1:3], "sequence_len": TOKEN_LENGTHS[1:3]}, signature="tokens",
                                as_dict=True)}
    for prefix, outputs in found.items():
        for name in OUTPUTS:
            expected = reference[prefix + name]
            assert outputs[name].shape == expected.shape and outputs[name].dtype == np.float32
            scale = float(np.abs(expected).max())
            np.testing.assert_allclose(outputs[name], expected, atol=1e-5 * scale, rtol=0, err_msg=prefix + name)
    assert found["default/"]["elmo"].shape == (2, 6, 1024) and found["default/"]["word_emb"].shape[-1] == 512
