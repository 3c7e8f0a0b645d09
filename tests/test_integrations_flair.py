"""flair: ELMoEmbeddings gives Sentences exactly the Embedder's vectors; a tagger with it trains, saves and loads
in a fresh process with identical predictions; unknown names are refused."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import DATA, need, subprocess_env

flair = pytest.importorskip("flair", reason="needs flair (pip install 'elmo-bilm[flair]')")
from flair.data import Sentence  # noqa: E402

import elmo  # noqa: E402
from elmo.errors import InputError, ModelFileError  # noqa: E402
from elmo.integrations.flair import ELMoEmbeddings  # noqa: E402

SENTENCES = ["The bank raised rates .", "A river bank", "Peter Blackburn flew to Brussels on Monday ."]
TRAIN_SENTENCES, TEST_SENTENCES = 60, 20


@pytest.fixture(scope="module")
def fixture_files(allennlp_dir):
    return str(allennlp_dir / "options.json"), str(allennlp_dir / "lm_weights.hdf5")


def token_matrix(sentence: Sentence) -> np.ndarray:
    return torch.stack([token.get_embedding().cpu() for token in sentence]).numpy()


@pytest.mark.parametrize("mode", ["all", "top", "average"])
def test_sentence_vectors_equal_the_embedders_for_each_mode(fixture_files, mode, one_thread):
    embeddings = ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1], embedding_mode=mode)
    sentences = [Sentence(text) for text in SENTENCES]
    embeddings.embed(sentences)
    embedder = elmo.Embedder.from_files(*fixture_files)
    for sentence, want in zip(sentences, embedder.embed_sentences([t.split() for t in SENTENCES], layers=mode)):
        if mode == "all":  # flair's "all": the layers side by side for each token
            want = want.transpose(1, 0, 2).reshape(want.shape[1], -1)
        got = token_matrix(sentence)
        assert got.shape == (len(sentence), embeddings.embedding_length)
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_one_model_call_per_mini_batch_on_flair_device(fixture_files, one_thread):
    embeddings = ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1])
    calls = []
    embeddings.elmo_bilm.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    sentences = [Sentence(text) for text in SENTENCES]
    embeddings.embed(sentences)
    assert calls == [len(SENTENCES)]
    assert all(token.get_embedding().device == flair.device for s in sentences for token in s)


def test_unknown_names_are_refused_with_the_known_ones():
    with pytest.raises(ModelFileError, match="unknown ELMo model") as caught:
        ELMoEmbeddings("no-such-elmo")
    for name in ("original", "small", "medium", "large", "5.5B", "pt", "portuguese", "pubmed", "default"):
        assert name in str(caught.value)
    with pytest.raises(InputError, match="embedding_mode"):
        ELMoEmbeddings("default", embedding_mode="mean")


def test_flairs_names_resolve_to_the_catalog():
    from elmo.hub.catalog import find_published

    for name in ("original", "small", "medium", "large", "5.5B", "pt", "portuguese", "pubmed"):
        assert find_published(name) is not None, name


def conll_excerpt(folder, n_train: int, n_test: int):
    """The first sentences of CoNLL-2003's train and testa as flair column files (no -DOCSTART- lines)."""
    need(DATA / "conll2003" / "eng.train.gz")
    for source, target, n in (("eng.train.gz", "train.txt", n_train), ("eng.testa.gz", "test.txt", n_test)):
        with gzip.open(DATA / "conll2003" / source, "rt", encoding="utf-8") as f:
            blocks = [b for b in f.read().split("\n\n") if b.strip() and not b.startswith("-DOCSTART-")]
        (folder / target).write_text("\n\n".join(blocks[:n]) + "\n", encoding="utf-8")
    from flair.datasets import ColumnCorpus

    return ColumnCorpus(folder, {0: "text", 3: "ner"}, train_file="train.txt", test_file="test.txt",
                        dev_file="test.txt")


PREDICT = r"""
import json, sys
import torch
torch.set_num_threads(1)
from flair.data import Sentence
from flair.models import SequenceTagger
assert "elmo.integrations.flair" not in sys.modules
tagger = SequenceTagger.load(sys.argv[1])
assert "elmo.integrations.flair" in sys.modules  # imported by the unpickling of the saved record
print(json.dumps(predict(tagger, json.loads(sys.argv[2]))))
"""


def predict(tagger, texts: list[str]) -> list[list]:
    """Each token's predicted tag and its score (the same code runs in the fresh process)."""
    sentences = [Sentence(text.split(" ")) for text in texts]
    tagger.predict(sentences, mini_batch_size=8, force_token_predictions=True)
    return [[[t.text, t.get_label("ner").value, t.get_label("ner").score] for t in s] for s in sentences]


def predict_in_fresh_process(model_file, texts: list[str]) -> list[list]:
    import inspect

    script = "\n".join(["import flair", inspect.getsource(predict), PREDICT])
    done = subprocess.run([sys.executable, "-c", script, str(model_file), json.dumps(texts)], capture_output=True,
                          text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("save", ["weights", "reference"])
def test_crf_tagger_trains_saves_and_loads_in_a_fresh_process_with_identical_predictions(
        tmp_path, fixture_files, save, one_thread):
    from flair.embeddings import OneHotEmbeddings, StackedEmbeddings
    from flair.models import SequenceTagger
    from flair.trainers import ModelTrainer

    flair.set_seed(1)
    corpus = conll_excerpt(tmp_path, TRAIN_SENTENCES, TEST_SENTENCES)
    stack = StackedEmbeddings([ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1],
                                              save=save),
                               OneHotEmbeddings.from_corpus(corpus, embedding_length=8, min_freq=1)])
    tagger = SequenceTagger(hidden_size=16, embeddings=stack, tag_dictionary=corpus.make_label_dictionary("ner"),
                            tag_type="ner", use_crf=True)
    ModelTrainer(tagger, corpus).train(tmp_path / "run", max_epochs=1, mini_batch_size=8, learning_rate=0.1,
                                       save_final_model=False, create_file_logs=False, create_loss_file=False)
    tagger.save(tmp_path / "tagger.pt")
    texts = [s.to_tokenized_string() for s in corpus.test]
    want = predict(tagger, texts)
    got = predict_in_fresh_process(tmp_path / "tagger.pt", texts)
    assert [[t[:2] for t in s] for s in got] == [[t[:2] for t in s] for s in want]
    np.testing.assert_allclose([t[2] for s in got for t in s], [t[2] for s in want for t in s], atol=1e-6)
    size = (tmp_path / "tagger.pt").stat().st_size
    weight_bytes = sum(p.numel() * 4 for p in stack.embeddings[0].elmo_bilm.parameters())
    assert (size > weight_bytes) == (save == "weights")


def test_a_reference_whose_weights_changed_is_refused(tmp_path, fixture_files, one_thread):
    import shutil

    from flair.embeddings.base import load_embeddings

    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(fixture_files[0], model / "options.json")
    shutil.copy(fixture_files[1], model / "weights.hdf5")
    params = ELMoEmbeddings(str(model), save="reference").save_embeddings(use_state_dict=False)
    assert "state_dict" not in params and not params["saved"].options == {}
    bilm = elmo.load_bilm(model / "options.json", model / "weights.hdf5")
    with torch.no_grad():
        next(bilm.parameters()).add_(1.0)
    elmo.save_bilm(bilm, model / "options.json", model / "weights.hdf5")
    with pytest.raises(ModelFileError, match="fingerprint"):
        load_embeddings(dict(params))


def test_flair_device_is_honoured_on_a_gpu(fixture_files, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (flair.device = cuda)")
    monkeypatch.setattr(flair, "device", torch.device("cuda:0"))
    embeddings = ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1], save="reference")
    sentences = [Sentence(text) for text in SENTENCES]
    embeddings.embed(sentences)
    assert next(embeddings.elmo_bilm.parameters()).device == flair.device
    got = np.concatenate([token_matrix(s) for s in sentences])
    want = elmo.Embedder.from_files(*fixture_files).embed_sentences([t.split() for t in SENTENCES])
    want = np.concatenate([w.transpose(1, 0, 2).reshape(w.shape[1], -1) for w in want])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_a_saved_stack_keeps_each_name_so_the_vectors_keep_their_order(tmp_path, fixture_files, one_thread):
    """flair concatenates a token's embeddings sorted by name, and a stack prefixes each name with its place
    ("0-elmo-...", "1-<file>"). ELMo saved its name without the prefix, so a tagger trained with ELMo stacked before
    WordEmbeddings read the two swapped after loading (CoNLL-2003: dev F1 92 in training, 2 after loading)."""
    gensim = pytest.importorskip("gensim")
    from flair.data import Dictionary
    from flair.embeddings import StackedEmbeddings, WordEmbeddings
    from flair.models import SequenceTagger

    vectors = gensim.models.KeyedVectors(vector_size=4)
    vectors.add_vectors(["the", "bank", "closed"], np.arange(12, dtype=np.float32).reshape(3, 4))
    vectors.save_word2vec_format(str(tmp_path / "static.bin"), binary=True)
    stack = StackedEmbeddings([ELMoEmbeddings(options_file=fixture_files[0], weight_file=fixture_files[1]),
                               WordEmbeddings(str(tmp_path / "static.bin"))])
    tags = Dictionary(add_unk=False)
    for tag in ("O", "S-PER"):
        tags.add_item(tag)
    SequenceTagger(hidden_size=4, embeddings=stack, tag_dictionary=tags, tag_type="ner", use_crf=False).save(
        tmp_path / "tagger.pt")
    loaded = SequenceTagger.load(tmp_path / "tagger.pt").embeddings
    assert loaded.get_names() == stack.get_names()
    want, got = Sentence("the bank closed"), Sentence("the bank closed")
    stack.embed(want)
    loaded.embed(got)
    np.testing.assert_array_equal(token_matrix(got), token_matrix(want))
