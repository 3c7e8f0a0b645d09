"""`elmo.embed.embedder.Embedder`: layer views, batching, sentence vectors, threads, and bad input refused with
an `InputError` (which is also a ValueError)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import MICRO

from elmo import Embedder, batch_to_ids
from elmo.errors import ElmoError, InputError
from elmo.model.bilm import BiLM
from elmo.model.options import BiLMConfig

SENTENCES = [["The", "bank", "raised", "rates", "."], ["Hi"], [], ["We", "sat", "by", "the", "river", "bank"]]


def micro_bilm(stateful: bool = False) -> BiLM:
    """The tests' micro biLM with random weights (seed 0): no files needed."""
    torch.manual_seed(0)
    return BiLM(BiLMConfig.from_options(MICRO), stateful=stateful)


@pytest.fixture(scope="module")
def micro() -> Embedder:
    return Embedder(micro_bilm())


# ---- what it computes (the AllenNLP fixture model) ----------------------------------------------------------------

def test_embedder_sorted_batches_equal_unsorted(embedder):
    many = SENTENCES * 5 + [["a"] * 30]
    sorted_internally = list(embedder.embed_sentences(many, batch_size=4))
    one_by_one = [embedder.embed_batch([s])[0] for s in many]
    assert len(sorted_internally) == len(many)
    for got, ref, s in zip(sorted_internally, one_by_one, many):
        assert got.shape == (3, len(s), 32)
        np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)


def test_embedder_layer_choices_and_sentence_vectors(embedder):
    full = embedder.embed_sentence(SENTENCES[0])
    np.testing.assert_array_equal(embedder.embed_sentence(SENTENCES[0], layers="top"), full[2])
    np.testing.assert_allclose(embedder.embed_sentence(SENTENCES[0], layers="average"), full.mean(0), atol=1e-7)
    vectors = embedder.sentence_vectors(SENTENCES)
    assert vectors.shape == (4, 32)
    np.testing.assert_allclose(vectors[0], full.mean(0).mean(0), atol=1e-6)
    assert (vectors[2] == 0).all()  # the empty sentence
    with pytest.raises(ValueError, match="layers must be one of"):
        list(embedder.embed_sentences(SENTENCES, layers="bottom"))


def test_embedder_layer0_is_the_duplicated_token_layer(embedder):
    arr = embedder.embed_sentence(["bank"])
    with torch.no_grad():
        token = embedder.bilm.char_encoder(batch_to_ids([["bank"]])[0]).numpy()
    np.testing.assert_allclose(arr[0], np.concatenate([token, token], axis=1), atol=1e-6)


def test_embed_sentences_takes_layer_numbers_like_the_cli(embedder):
    sentences = [["The", "cat", "sat", "."], [], ["Hello"]]
    full = list(embedder.embed_sentences(sentences))
    picked = list(embedder.embed_sentences(sentences, layers=[1, 2]))
    for a, b in zip(full, picked):
        assert b.shape == (2,) + a.shape[1:]
        np.testing.assert_array_equal(b, a[[1, 2]])
    assert embedder.sentence_vectors(sentences[:1], layers=[2, 0]).shape == (1, 2, 32)
    for bad in ([3], [1, 1], [], ["1"]):
        with pytest.raises(InputError, match=r"layers must list distinct layer numbers in 0\.\.2"):
            embedder.embed_sentences(sentences, layers=bad)


# ---- bad input: an InputError, which `except ValueError` catches too (the micro model) -----------------------------

@pytest.mark.parametrize("layers,needle", [
    ("bottom", "layers must be one of .* or a list of layer numbers, found 'bottom'"),
    ([0, 7], r"layers must list distinct layer numbers in 0\.\.2"),
])
def test_layer_view_refuses_what_it_cannot_show_with_an_input_error(micro, layers, needle):
    with pytest.raises(InputError, match=needle) as caught:
        micro.layer_view(layers)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ElmoError)


@pytest.mark.parametrize("call,needle", [
    (lambda e: e.sents2elmo([["a"]], output_layer=5), r"output_layer must be -1 \(mean\), -2 \(all\) or a layer 0\.\.2"),
    (lambda e: e.embed_sentence(["a"], layers="middle"), "layers must be one of"),
    (lambda e: list(e.embed_sentences([["a"]], batch_size=0)), "batch_size must be a positive integer, found 0"),
    (lambda e: e.sentence_vectors([["a", 3]]), "sentence 0, token 1 must be a string, found int 3"),
])
def test_each_method_refuses_bad_arguments_catchable_as_value_error(micro, call, needle):
    with pytest.raises(ValueError, match=needle) as caught:
        call(micro)
    assert isinstance(caught.value, InputError)


@pytest.mark.parametrize("sentences,needle", [
    (["a b"], "sentence 0 must be a list of token strings, found str"),
    ([["a"], ["b", 3]], "sentence 1, token 1 must be a string, found int 3"),
    ([["a", None]], "sentence 0, token 1 must be a string, found NoneType"),
])
def test_embedder_refuses_malformed_sentences_with_their_index(micro, sentences, needle):
    with pytest.raises(InputError, match=needle):
        list(micro.embed_sentences(sentences))


def test_a_missing_model_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a model directory") as caught:
        Embedder.from_model(tmp_path / "no-such-model")
    assert isinstance(caught.value, ElmoError)
    with pytest.raises(FileNotFoundError, match="options file not found"):
        Embedder.from_files(tmp_path / "options.json", tmp_path / "weights.hdf5")


# ---- threads ------------------------------------------------------------------------------------------------------

def test_a_stateful_embedder_refuses_a_second_thread_until_reset():
    embedder = Embedder(micro_bilm(stateful=True))
    embedder.embed_batch([["a", "b"]])
    errors = []

    def other():
        try:
            embedder.embed_batch([["c"]])
        except InputError as e:
            errors.append(str(e))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "carries LSTM state from another thread" in errors[0]
    embedder.reset_states()
    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1  # after reset_states the other thread may use it


def test_a_stateless_embedder_in_eight_threads_is_bit_identical(micro):
    sentences = [["a", "b", "c"][: 1 + i % 3] for i in range(24)]
    alone = [micro.embed_batch([s])[0] for s in sentences]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda s: micro.embed_batch([s])[0], sentences))
    assert all(np.array_equal(a, b) for a, b in zip(alone, together))
