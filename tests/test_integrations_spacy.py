"""spaCy v3: the "elmo" component on spacy.blank("en"): layers, Doc.tensor, vector and similarity hooks, batching,
to_disk then spacy.load in a fresh process with the original model files moved away; what serialization keeps."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import subprocess_env

spacy = pytest.importorskip("spacy", reason="needs spaCy v3 (pip install 'elmo-bilm[spacy]')")
from spacy.tokens import Doc, DocBin  # noqa: E402

import elmo  # noqa: E402
from elmo.errors import InputError  # noqa: E402
from elmo.integrations.spacy import add_vector_hooks, cosine, layer_view  # noqa: E402

TEXTS = ["The bank raised its rates.", "She sat on the river bank.", "Banks lend money.", "", "Hello"]


def blank(config: dict):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=config)
    return nlp


def test_layers_tensor_vectors_and_similarity_equal_the_embedders(relative_model_dir, one_thread):
    nlp = blank({"model": relative_model_dir, "batch_size": 2})
    calls = []
    nlp.get_pipe("elmo").bilm.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    docs = list(nlp.pipe(TEXTS))
    assert calls == [2, 2, 1]  # nlp.pipe embeds batch_size docs per biLM pass
    want = elmo.Embedder.from_model(relative_model_dir).embed_sentences([[t.text for t in d] for d in docs])
    for doc, layers in zip(docs, want):
        np.testing.assert_allclose(doc._.elmo, layers, atol=1e-6, rtol=0)
        np.testing.assert_array_equal(doc.tensor, layer_view(doc._.elmo, "all"))
    doc = docs[0]
    rows = doc.tensor
    np.testing.assert_allclose(doc[1].vector, rows[1])
    np.testing.assert_allclose(doc[1:3].vector, rows[1:3].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(doc.vector, rows.mean(axis=0), rtol=1e-6)
    assert doc[1].has_vector and doc[1:3].has_vector and doc.has_vector
    assert math.isclose(doc[1].vector_norm, float(np.linalg.norm(rows[1])), rel_tol=1e-6)
    bank_money, bank_river = doc[1].similarity(docs[2][0]), doc[1].similarity(docs[1][5])
    assert math.isclose(bank_money, cosine(rows[1], docs[2].tensor[0]), rel_tol=1e-6)
    assert -1 <= bank_river <= 1 and bank_river != bank_money
    assert math.isclose(doc.similarity(docs[1]), cosine(doc.vector, docs[1].vector), rel_tol=1e-6)
    assert math.isclose(doc[0:2].similarity(docs[1][4:6]), cosine(doc[0:2].vector, docs[1][4:6].vector),
                        rel_tol=1e-6)
    assert docs[3]._.elmo.shape[1] == 0 and docs[3].tensor.shape[0] == 0


@pytest.mark.parametrize("layers", ["top", "average", [0.5, 0.25, 0.25]])
def test_layer_choices_and_a_fixed_mix(relative_model_dir, layers, one_thread):
    doc = blank({"model": relative_model_dir, "layers": layers})(TEXTS[0])
    stacked = doc._.elmo
    expected = {"top": stacked[-1], "average": stacked.mean(axis=0)}.get(
        layers if isinstance(layers, str) else "", 0.5 * stacked[0] + 0.25 * stacked[1] + 0.25 * stacked[2])
    np.testing.assert_allclose(doc.tensor, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(doc[0].vector, expected[0], rtol=1e-6, atol=1e-7)


def test_beside_another_component_that_writes_the_tensor(relative_model_dir, one_thread):
    @spacy.Language.component("test_writes_tensor")
    def writes_tensor(doc):
        doc.tensor = np.ones((len(doc), 4), dtype=np.float32)
        return doc

    for mode, width in (("set", 32), ("append", 36), ("none", 4)):
        nlp = spacy.blank("en")
        nlp.add_pipe("test_writes_tensor")
        nlp.add_pipe("elmo", config={"model": relative_model_dir, "layers": "top", "tensor": mode})
        doc = nlp(TEXTS[0])
        assert doc.tensor.shape == (len(doc), width), mode
        if mode == "append":
            np.testing.assert_array_equal(doc.tensor[:, :4], 1.0)
            np.testing.assert_array_equal(doc.tensor[:, 4:], doc._.elmo[-1])
        np.testing.assert_array_equal(doc[0].vector, doc._.elmo[-1][0])  # the hooks read doc._.elmo, not the tensor


def test_bad_settings_are_refused(relative_model_dir):
    with pytest.raises(InputError, match="tensor must be one of"):
        blank({"model": relative_model_dir, "tensor": "overwrite"})
    with pytest.raises(InputError, match="layers"):
        blank({"model": relative_model_dir, "layers": "bottom"})
    with pytest.raises(InputError, match="3 layers"):
        blank({"model": relative_model_dir, "layers": [1.0, 0.0]})("a b")


LOAD = r"""
import json, sys
import numpy as np, spacy
assert "elmo.integrations.spacy" not in sys.modules
nlp = spacy.load(sys.argv[1])
docs = list(nlp.pipe(json.loads(sys.argv[2])))
np.save(sys.argv[3], np.concatenate([d.tensor for d in docs]))
print(json.dumps([d[0].similarity(d[-1]) for d in docs]))
"""


def test_to_disk_then_spacy_load_in_a_new_process_with_the_model_files_moved_away(tmp_path, relative_model_dir, one_thread):
    nlp = blank({"model": relative_model_dir, "layers": "average"})
    texts = TEXTS[:3]
    want = list(nlp.pipe(texts))
    nlp.to_disk(tmp_path / "pipeline")
    config = (tmp_path / "pipeline" / "config.cfg").read_text()
    assert str(tmp_path) not in config and 'model = "model"' in config
    assert sorted(p.name for p in (tmp_path / "pipeline" / "elmo").iterdir()) == ["options.json", "weights.hdf5"]
    os.rename(tmp_path / "model", tmp_path / "moved-away")
    os.rename(tmp_path / "pipeline", tmp_path / "pipeline-copied")
    done = subprocess.run([sys.executable, "-c", LOAD, str(tmp_path / "pipeline-copied"), json.dumps(texts),
                           str(tmp_path / "tensors.npy")], capture_output=True, text=True, env=subprocess_env(),
                          cwd="/", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "tensors.npy"), np.concatenate([d.tensor for d in want]))
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [d[0].similarity(d[-1]) for d in want]


def test_what_to_bytes_and_docbin_keep(relative_model_dir, one_thread):
    nlp = blank({"model": relative_model_dir})
    doc = nlp(TEXTS[0])
    back = Doc(nlp.vocab).from_bytes(doc.to_bytes())  # tensor and user data (doc._.elmo) kept, hooks not
    np.testing.assert_array_equal(back.tensor, doc.tensor)
    np.testing.assert_array_equal(back._.elmo, doc._.elmo)
    assert "vector" not in back.user_hooks
    np.testing.assert_array_equal(add_vector_hooks(back)[2].vector, doc[2].vector)
    kept = list(DocBin(store_user_data=True, docs=[doc]).get_docs(nlp.vocab))[0]
    np.testing.assert_array_equal(kept._.elmo, doc._.elmo)
    assert kept.tensor is None or kept.tensor.size == 0  # DocBin never stores Doc.tensor
    lost = list(DocBin(docs=[doc]).get_docs(nlp.vocab))[0]
    assert lost._.elmo is None
    with pytest.raises(InputError, match="no ELMo layers"):
        add_vector_hooks(lost)


def test_nlp_to_bytes_carries_the_model(relative_model_dir, one_thread):
    nlp = blank({"model": relative_model_dir, "layers": "top"})
    want = nlp(TEXTS[1]).tensor
    copy = spacy.blank("en")
    copy.add_pipe("elmo", config={"model": "never-read", "layers": "top"})
    copy.from_bytes(nlp.to_bytes())
    np.testing.assert_array_equal(copy(TEXTS[1]).tensor, want)
