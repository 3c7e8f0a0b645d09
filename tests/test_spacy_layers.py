"""spaCy's trainable components with ELMo: the `elmo.ELMoEmbed.v1` architecture. The mix equals ScalarMix over
the Embedder's layers (values and gradients); the cache changes nothing; sentences run alone; saved numbers are
checked; examples/spacy/ner-elmo.cfg trains with `python -m spacy train` (no import), saves, and loads in a new
process with the model files moved away, giving identical predictions, and its learned weights can be read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, subprocess_env

spacy = pytest.importorskip("spacy", reason="needs spaCy v3 (pip install 'elmo-bilm[spacy]')")
from spacy.tokens import Doc, DocBin  # noqa: E402

import elmo  # noqa: E402
from elmo.errors import InputError, ModelFileError  # noqa: E402
from elmo.integrations.spacy_layers import MIX_NAME, elmo_embed, elmo_mix, layer_weights  # noqa: E402
from elmo.model.scalar_mix import ScalarMix  # noqa: E402

SENTENCES = [["The", "bank", "raised", "rates", "."], ["She", "sat", "on", "the", "river", "bank", "."], ["Hi"]]


def docs_of(sentences, vocab=None) -> list[Doc]:
    vocab = vocab or spacy.blank("en").vocab
    return [Doc(vocab, words=words) for words in sentences]


def initialized_mix(model: str, dropout: float = 0.0, cache_mb: int = 64):
    mix = elmo_mix(model, dropout, cache_mb)
    mix.initialize()
    return mix


def test_the_mix_and_its_gradients_equal_scalar_mix_on_the_embedders_layers(relative_model_dir, one_thread):
    mix = initialized_mix(relative_model_dir)
    w, gamma = np.array([0.3, -1.2, 0.7], dtype=np.float32), 1.7
    mix.set_param("scalar_weights", w.copy())
    mix.set_param("gamma", np.array([gamma], dtype=np.float32))
    outputs, backprop = mix(docs_of(SENTENCES), is_train=True)  # dropout 0: training changes nothing but gradients
    layers = elmo.Embedder.from_model(relative_model_dir).embed_sentences(SENTENCES)
    reference = ScalarMix(3, initial_scalar_parameters=w.tolist())
    with torch.no_grad():
        reference.gamma.fill_(gamma)
    d_outputs = [np.random.default_rng(k).standard_normal(y.shape).astype(np.float32) for k, y in enumerate(outputs)]
    loss = 0
    for y, want, dy in zip(outputs, layers, d_outputs):
        mixed = reference([torch.from_numpy(layer) for layer in want])
        np.testing.assert_allclose(y, mixed.detach().numpy(), atol=1e-6, rtol=0)
        loss = loss + (mixed * torch.from_numpy(dy)).sum()
    loss.backward()
    assert backprop(d_outputs) == []  # docs get no gradient: the biLM is frozen
    np.testing.assert_allclose(mix.get_grad("scalar_weights"),
                               torch.cat([p.grad for p in reference.scalar_parameters]).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mix.get_grad("gamma"), reference.gamma.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_dropout_applies_in_training_only(relative_model_dir, one_thread):
    mix = initialized_mix(relative_model_dir, dropout=0.5)
    docs = docs_of(SENTENCES[:2])
    plain = mix.predict(docs)
    dropped, _ = mix(docs, is_train=True)
    zeroed = np.concatenate([d == 0 for d in dropped])
    assert 0.3 < zeroed.mean() < 0.7
    kept = [d[d != 0] for d in dropped]
    np.testing.assert_allclose(np.concatenate(kept), np.concatenate([2 * p[d != 0] for p, d in zip(plain, dropped)]),
                               rtol=1e-6)


def test_the_cache_changes_nothing_and_is_bounded(relative_model_dir, one_thread):
    mix = initialized_mix(relative_model_dir)
    runner = mix.attrs["elmo_runner"]
    first = mix.predict(docs_of(SENTENCES))
    assert (runner.hits, runner.misses, len(runner.cache)) == (0, 3, 3)
    again = mix.predict(docs_of(SENTENCES))  # new Doc objects, same words: read from the cache
    assert (runner.hits, runner.misses) == (3, 3)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    uncached = initialized_mix(relative_model_dir, cache_mb=0)
    for a, b in zip(first, uncached.predict(docs_of(SENTENCES))):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert len(uncached.attrs["elmo_runner"].cache) == 0


def test_a_doc_with_sentence_boundaries_runs_each_sentence_alone(relative_model_dir, one_thread):
    mix = initialized_mix(relative_model_dir)
    words = SENTENCES[0] + SENTENCES[1]
    doc = Doc(spacy.blank("en").vocab, words=words, sent_starts=[i in (0, 5) for i in range(len(words))])
    (together,) = mix.predict([doc])
    apart = mix.predict(docs_of(SENTENCES[:2]))
    np.testing.assert_allclose(together, np.concatenate(apart), atol=1e-6, rtol=0)
    (empty,) = mix.predict([Doc(doc.vocab, words=[])])
    assert empty.shape == (0, 32)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"width": 0}, "width must be a positive integer"), ({"width": 8, "dropout": 1.0}, "dropout must be"),
    ({"width": 8, "cache_mb": -1}, "cache_mb must be"), ({"width": 8, "model": ""}, "model must be"),
])
def test_bad_settings_are_refused(kwargs, says):
    with pytest.raises(InputError, match=says):
        elmo_embed(**kwargs)


def saved_mix(relative_model_dir):
    mix = initialized_mix(relative_model_dir)
    mix.predict(docs_of(SENTENCES[:1]))
    return mix.to_bytes()


@pytest.mark.parametrize(("change", "says"), [
    (lambda m: m.set_param("scalar_weights", np.zeros(5, np.float32)), "expected 3 layer weights"),
    (lambda m: m.set_param("gamma", np.array([np.inf], np.float32)), "must be finite"),
    (lambda m: m.attrs.__setitem__("mix_dropout", 7.0), "mix_dropout must be"),
    (lambda m: m.attrs.__setitem__("elmo_files", {"options.json": b"{}"}), "expected the ELMo files"),
    (lambda m: m.attrs.__setitem__("elmo_files", {"options.json": b"{", "weights.hdf5": b"x"}), "options"),
])
def test_numbers_and_files_read_back_from_a_saved_layer_are_checked(relative_model_dir, change, says, one_thread):
    """A saved model can hold anything: each restored number and file is refused in one line, as options.json is."""
    tampered = initialized_mix(relative_model_dir)
    change(tampered)
    fresh = elmo_mix(relative_model_dir, 0.0, 64).from_bytes(tampered.to_bytes())
    with pytest.raises(ModelFileError, match=says):
        fresh.predict(docs_of(SENTENCES[:1]))


def layer_weights_of_untrained(relative_model_dir):
    model = elmo_embed(8, relative_model_dir, dropout=0.0)
    model.initialize(X=docs_of(SENTENCES))
    return layer_weights(model)


def test_layer_weights_start_equal_and_can_be_read(relative_model_dir, one_thread):
    found = layer_weights_of_untrained(relative_model_dir)
    assert list(found) == ["model"]
    np.testing.assert_allclose(found["model"]["weights"], [1 / 3] * 3)
    assert found["model"]["gamma"] == 1.0


TRAIN_SCRIPT = r"""
import json, subprocess, sys
out = sys.argv[1]
subprocess.run([sys.executable, "-m", "spacy", "train", sys.argv[2], "--output", out, "--paths.train", "data.spacy",
                "--paths.dev", "data.spacy", "--components.tok2vec.model.embed.model", "model",
                "--training.max_epochs", "2", "--training.eval_frequency", "4", "--training.batcher.size.start", "20"],
               check=True, capture_output=True)
"""

PREDICT_SCRIPT = r"""
import json, sys, spacy
from spacy.tokens import DocBin
from spacy.training import Example
nlp = spacy.load(sys.argv[1])
docs = list(DocBin().from_disk("data.spacy").get_docs(nlp.vocab))
predicted = [nlp(d.text) for d in docs]
tok2vec = nlp.get_pipe("tok2vec").predict([nlp.make_doc(d.text) for d in docs])
scores = nlp.evaluate([Example(nlp.make_doc(d.text), d) for d in docs])
from elmo.integrations.spacy_layers import layer_weights
print(json.dumps({"ents": [[(e.start, e.end, e.label_) for e in d.ents] for d in predicted],
                  "tok2vec": [t.tolist() for t in tok2vec], "ents_f": scores["ents_f"],
                  "weights": layer_weights(nlp)}))
"""


@pytest.mark.slow
def test_the_example_config_trains_saves_and_loads_in_a_new_process(tmp_path, relative_model_dir):
    """`python -m spacy train examples/spacy/ner-elmo.cfg` finds the architecture through the entry point (no
    import), and the saved pipeline loads with the model folder gone: identical tok2vec output and entities."""
    nlp = spacy.blank("en")
    data = DocBin()
    for k, text in enumerate(["Alice met Bob in Paris .", "Bob flew to Rome .", "Carol saw Alice .", "Dan works"]):
        doc = nlp.make_doc(text)
        doc.ents = [doc.char_span(*span, label="PER") for span in [(0, len(text.split()[0]))]] if k < 3 else []
        data.add(doc)
    data.to_disk(tmp_path / "data.spacy")
    env = subprocess_env()
    subprocess.run([sys.executable, "-c", TRAIN_SCRIPT, "out", str(REPO / "examples/spacy/ner-elmo.cfg")],
                   check=True, env=env, timeout=600)
    before = subprocess.run([sys.executable, "-c", PREDICT_SCRIPT, "out/model-last"], check=True, env=env,
                            capture_output=True, text=True, timeout=300)
    shutil.move(tmp_path / "model", tmp_path / "moved-away")
    after = subprocess.run([sys.executable, "-c", PREDICT_SCRIPT, "out/model-last"], check=True, env=env,
                           capture_output=True, text=True, timeout=300)
    first, second = json.loads(before.stdout), json.loads(after.stdout)
    assert first == second
    assert 0 <= first["ents_f"] <= 1
    weights = first["weights"]["tok2vec"]
    assert len(weights["weights"]) == 3 and abs(sum(weights["weights"]) - 1) < 1e-6
    assert weights["weights"] != [1 / 3] * 3  # training moved them
    cfg = (tmp_path / "out/model-last/config.cfg").read_text()
    assert '@architectures = "elmo.ELMoEmbed.v1"' in cfg
    assert any(node.name == MIX_NAME for node in spacy.load(tmp_path / "out/model-last").get_pipe("tok2vec").model.walk())
