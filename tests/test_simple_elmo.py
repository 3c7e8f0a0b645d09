"""elmo.simple_elmo.ElmoModel: simple_elmo's API, shapes and dtypes, on the shared fixtures.

The fixtures' reference outputs (bilm-tf, TensorFlow) are the rows of 10 batches of 3 sentences with the
state carried; the first batch is from zero state, so a stateless model must give it, and a stateful
one (`load(stateful=True)`, `warmup=False`) all ten. scripts/compare_simple_elmo.py compares with
simple_elmo itself in its TensorFlow venv (docs/tensorflow.md).
"""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import torch

from elmo import Embedder
from elmo.errors import InputError, ModelFileError
from elmo.formats.lm_vocab import Vocab
from elmo.simple_elmo import ElmoModel
from elmo.training.softmax import Softmax, save_softmax

FIXTURE_TOL = dict(atol=1e-6, rtol=1e-5)  # the fixtures' own tolerance (their README)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, allennlp_dir, bilm_tf_dir):
    """Both fixtures as model directories (options.json + weights.hdf5)."""
    dirs = {}
    for name, src in (("allennlp", allennlp_dir), ("bilm-tf", bilm_tf_dir)):
        d = tmp_path_factory.mktemp(name)
        shutil.copy(src / "options.json", d / "options.json")
        shutil.copy(src / "lm_weights.hdf5", d / "weights.hdf5")
        dirs[name] = d
    return dirs


def tokenized(fixture_sentences) -> list[list[str]]:
    """The 30 sentences in the fixtures' batch order: batch i holds sentence i of each of the 3 lists."""
    return [fixture_sentences[k][i].split() for i in range(10) for k in range(3)]


def reference_top(fixture_dir, k: int, i: int) -> np.ndarray:
    with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
        both = f[str(i)][...]
    return np.concatenate([both[0], both[1]], axis=-1)  # (n, 2P): forward then backward


def loaded(directory, **kwargs) -> ElmoModel:
    model = ElmoModel()
    assert model.load(str(directory), **kwargs) == "The model is now loaded."
    return model


@pytest.mark.parametrize("name", ["allennlp", "bilm-tf"])
def test_shapes_dtypes_and_zero_padding(model_dirs, fixture_sentences, name, one_thread):
    model = loaded(model_dirs[name], max_batch_size=4)
    texts = tokenized(fixture_sentences)[:7]
    longest, lengths = max(map(len, texts)), [len(t) for t in texts]
    all_layers = model.get_elmo_vectors(texts, layers="all")
    top = model.get_elmo_vectors(texts, layers="top")
    average = model.get_elmo_vectors(texts)
    assert all_layers.dtype == top.dtype == average.dtype == np.float64
    assert all_layers.shape == (7, 3, longest, 32) and top.shape == average.shape == (7, longest, 32)
    assert (model.vector_size, model.n_layers, model.max_chars, model.batch_size) == (32, 3, 50, 4)
    for row, n in enumerate(lengths):
        assert not all_layers[row, :, n:].any() and all_layers[row, :, :n].any()
    np.testing.assert_allclose(top, all_layers[:, -1], atol=0)
    np.testing.assert_allclose(average, all_layers.mean(axis=1), atol=1e-6)
    expected = list(Embedder.from_model(model_dirs[name]).embed_sentences(texts, layers="all"))
    for row, arr in enumerate(expected):
        np.testing.assert_allclose(all_layers[row, :, : lengths[row]], arr, atol=1e-6)


@pytest.mark.parametrize("name,fixture", [("allennlp", "allennlp_dir"), ("bilm-tf", "bilm_tf_dir")])
def test_stateless_default_gives_the_first_batch_and_ignores_warmup(model_dirs, fixture_sentences, name, fixture,
                                                                      request, one_thread):
    fixture_dir = request.getfixturevalue(fixture)
    model = loaded(model_dirs[name], max_batch_size=3)
    assert not model.stateful
    texts = tokenized(fixture_sentences)
    cold = model.get_elmo_vectors(texts, warmup=False, layers="top")
    warm = model.get_elmo_vectors(texts, warmup=True, layers="top")
    np.testing.assert_array_equal(cold, warm)
    for k in range(3):  # batch 0 is the fixtures' zero-state batch
        np.testing.assert_allclose(cold[k, : len(texts[k])], reference_top(fixture_dir, k, 0), **FIXTURE_TOL)
    shuffled = loaded(model_dirs[name], max_batch_size=7).get_elmo_vectors(texts[::-1], layers="top")
    np.testing.assert_allclose(shuffled[::-1], cold, atol=1e-6)  # batch and order do not matter


@pytest.mark.parametrize("name,fixture", [("allennlp", "allennlp_dir"), ("bilm-tf", "bilm_tf_dir")])
def test_stateful_on_request_reproduces_every_batch(model_dirs, fixture_sentences, name, fixture, request,
                                                    one_thread):
    fixture_dir = request.getfixturevalue(fixture)
    model = loaded(model_dirs[name], max_batch_size=3, stateful=True)
    texts = tokenized(fixture_sentences)
    top = model.get_elmo_vectors(texts, warmup=False, layers="top")
    for i in range(10):
        for k in range(3):
            np.testing.assert_allclose(top[3 * i + k, : len(texts[3 * i + k])], reference_top(fixture_dir, k, i),
                                       **FIXTURE_TOL)
    again = model.get_elmo_vectors(texts, warmup=False, layers="top")  # each call starts from zero state
    np.testing.assert_array_equal(again, top)


def test_warmup_runs_the_first_batch_first_when_stateful(model_dirs, fixture_sentences, one_thread):
    texts = tokenized(fixture_sentences)[:6]
    model = loaded(model_dirs["allennlp"], max_batch_size=3, stateful=True)
    warm = model.get_elmo_vectors(texts, warmup=True, layers="all")
    cold = model.get_elmo_vectors(texts, warmup=False, layers="all")
    assert np.abs(warm - cold).max() > 0.1  # the carried state changes the LSTM layers
    np.testing.assert_array_equal(warm[:, 0], cold[:, 0])  # the token layer has no state
    embedder = Embedder.from_model(model_dirs["allennlp"], stateful=True)
    embedder.embed_batch(texts[:3])
    by_hand = embedder.embed_batch(texts[:3]) + embedder.embed_batch(texts[3:])
    for row, arr in enumerate(by_hand):
        np.testing.assert_allclose(warm[row, :, : arr.shape[1]], arr, atol=1e-6)


def test_vocabulary_limit_cannot_overwrite_a_word(model_dirs, allennlp_dir, one_thread):
    """The fixture's vocabulary has </S> on line 225: simple_elmo with limit=100 gave its 100th word
    the ids of </S>. Here no vocabulary is read for the ids."""
    words = (allennlp_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    assert words.index("</S>") > 100
    sentence = [["The", words[99], "went", "."]]
    vectors = [loaded(model_dirs["allennlp"], limit=limit).get_elmo_vectors(sentence, layers="all")
               for limit in (100, 10, None)]
    np.testing.assert_array_equal(vectors[0], vectors[1])
    np.testing.assert_array_equal(vectors[0], vectors[2])
    marker = loaded(model_dirs["allennlp"]).get_elmo_vectors([["The", "</S>", "went", "."]], layers="all")
    assert np.abs(marker - vectors[0]).max() > 0.01


@pytest.mark.parametrize("layers", ["average", "top", "all"])
def test_sentence_averages(model_dirs, fixture_sentences, layers, one_thread):
    model = loaded(model_dirs["bilm-tf"], max_batch_size=4)
    texts = tokenized(fixture_sentences)[:5] + [[]]
    averages = model.get_elmo_vector_average(texts, layers=layers)
    vectors = model.get_elmo_vectors(texts, layers=layers)
    assert averages.dtype == np.float64
    assert averages.shape == ((6, 3, 32) if layers == "all" else (6, 32))
    assert not averages[5].any()  # an empty sentence: zeros, not NaN
    for row, tokens in enumerate(texts[:5]):
        mean = vectors[row, ..., : len(tokens), :].mean(axis=-2)
        np.testing.assert_allclose(averages[row], mean / np.linalg.norm(mean), atol=1e-7)
        assert np.linalg.norm(averages[row]) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory, model_dirs, allennlp_dir):
    """The allennlp fixture with a random softmax over its vocabulary, as `elmo export` lays it out."""
    d = tmp_path_factory.mktemp("with-softmax")
    for name in ("options.json", "weights.hdf5"):
        shutil.copy(model_dirs["allennlp"] / name, d / name)
    tokens = (allennlp_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    (d / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    torch.manual_seed(3)
    softmax = Softmax(len(tokens), 16)
    with torch.no_grad():
        softmax.W.normal_(0, 1.0)
        softmax.b.normal_(0, 0.1)
    save_softmax(softmax, d / "softmax.hdf5")
    return d


def test_substitutes_rank_both_directions_of_the_whole_sentence(lm_dir, one_thread):
    model = loaded(lm_dir, max_batch_size=2, full=True)
    raw = ["The bank raised rates .", "Why ?", "good government employment is good"]
    found = model.get_elmo_substitutes(raw, topn=4)
    assert [[t["word"] for t in s] for s in found] == [s.split() for s in raw]
    vocab = Vocab.load(lm_dir / "vocab.txt")
    embedder = Embedder.from_model(lm_dir)
    with h5py.File(lm_dir / "softmax.hdf5", "r") as f:
        weight, bias = f["W"][...].astype(np.float64), f["b"][...].astype(np.float64)
    for text, sentence in zip(raw, found):
        tokens = text.split()
        ids = embedder.bilm.batch_to_ids([tokens])
        with torch.no_grad():
            top = embedder.bilm(ids).layers[-1][0].double().numpy()  # (n+2, 32), markers included
        for k, entry in enumerate(sentence):
            for direction, hidden in (("forward", top[k, :16]), ("backward", top[k + 2, 16:])):
                logits = hidden @ weight.T + bias
                logp = logits - np.logaddexp.reduce(logits)
                logp[[vocab.bos, vocab.eos]] = -np.inf
                best = np.argsort(-logp, kind="stable")[:4]
                got = entry[direction]
                assert got["candidates"] == best.tolist()
                assert got["candidate_words"] == [vocab.tokens[i] for i in best]
                np.testing.assert_allclose(got["logp"], logp[best], atol=1e-4)
    with_markers = model.get_elmo_substitutes(raw[:1], topn=len(vocab), nodelimiters=False)
    assert {vocab.bos, vocab.eos} <= set(with_markers[0][0]["forward"]["candidates"])


def test_substitutes_are_refused_without_a_softmax(model_dirs, lm_dir):
    with pytest.raises(InputError, match="full=True"):
        loaded(lm_dir).get_elmo_substitutes(["a b"])
    with pytest.raises(ModelFileError, match="softmax.hdf5"):
        loaded(model_dirs["allennlp"], full=True)


def test_bad_arguments_are_clear_errors(model_dirs):
    with pytest.raises(InputError, match="load"):
        ElmoModel().get_elmo_vectors([["a"]])
    model = loaded(model_dirs["allennlp"])
    with pytest.raises(InputError, match="layers must be one of"):
        model.get_elmo_vectors([["a"]], layers="middle")
    with pytest.raises(InputError, match="tokenized"):
        model.get_elmo_vectors(["a plain string"])
    with pytest.raises(InputError, match="max_batch_size"):
        ElmoModel().load(str(model_dirs["allennlp"]), max_batch_size=0)
    with pytest.raises(InputError, match="limit"):
        ElmoModel().load(str(model_dirs["allennlp"]), limit=-5)
    with pytest.raises(ModelFileError):
        ElmoModel().load(str(model_dirs["allennlp"] / "no-such-model"))
    assert model.get_elmo_vectors([]).shape == (0, 0, 32)
    assert model.get_elmo_vectors(iter([["a", "b"]])).shape == (1, 2, 32)  # any iterable of sentences
