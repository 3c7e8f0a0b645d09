"""#56 item 5: a long line embedded in windows with the LSTM state carried equals the one-piece path (1e-6)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from elmo import Embedder
from elmo.long_lines import LONG_LINE_WINDOW, embed_in_windows, embed_sentences_windowed
from elmo.models import resolve

ATOL = 1e-6
MANYLANGS = Path(__file__).parent / "fixtures" / "manylangs"


def words(n: int, seed: int = 0) -> list[str]:
    """n tokens of a made-up text: short and long words, punctuation, repeats (the token cache is hit)."""
    rng = random.Random(seed)
    vocabulary = ["the", "of", ",", ".", "and", "Paris", "élan", "x" * 60, "don't", "42", "—"]
    vocabulary += ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
                   for _ in range(200)]
    return [rng.choice(vocabulary) for _ in range(n)]


def assert_windows_equal_one_piece(embedder: Embedder, tokens: list[str], windows: list[int]) -> None:
    whole = embedder.embed_batch([tokens])[0]
    for window in windows:
        got = embed_in_windows(embedder.bilm, tokens, window)
        assert got.shape == whole.shape and got.dtype == np.float32
        diff = float(np.abs(got - whole).max())
        assert diff <= ATOL, f"window {window}: max |diff| {diff:.2e}"


@pytest.fixture(scope="module")
def skip_model(allennlp_dir) -> Embedder:  # skip connections
    return Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")


@pytest.fixture(scope="module")
def plain_model(bilm_tf_dir) -> Embedder:  # no skip connections
    return Embedder.from_files(bilm_tf_dir / "options.json", bilm_tf_dir / "lm_weights.hdf5")


def test_windows_equal_one_piece_with_skip_connections(skip_model, one_thread):
    assert skip_model.bilm.config.use_skip_connections
    # many windows, boundaries at odd places, a last window of 1 token, a window longer than the line
    assert_windows_equal_one_piece(skip_model, words(1001), [7, 64, 100, 250, 1000, 1001, 1002, 5000])


def test_windows_equal_one_piece_without_skip_connections(plain_model, one_thread):
    assert not plain_model.bilm.config.use_skip_connections
    assert_windows_equal_one_piece(plain_model, words(777, seed=1), [2, 13, 128, 776, 777, 778])


def test_windows_equal_one_piece_on_the_bundled_model(one_thread):
    embedder = Embedder(resolve("default").load())
    assert_windows_equal_one_piece(embedder, words(1300, seed=2), [97, LONG_LINE_WINDOW])


def test_windows_equal_one_piece_on_a_manylangs_model(one_thread):
    embedder = Embedder.from_model(MANYLANGS / "word_char")  # a model whose token ids come from its own lexicon
    assert_windows_equal_one_piece(embedder, words(300, seed=3), [17])


def test_short_and_empty_sentences(skip_model, one_thread):
    assert embed_in_windows(skip_model.bilm, [], 8).shape == (3, 0, 32)
    assert_windows_equal_one_piece(skip_model, ["a"], [2, 8])
    assert_windows_equal_one_piece(skip_model, ["a", "b"], [2])


def test_long_sentences_go_through_windows_and_the_rest_as_before(skip_model, one_thread, monkeypatch):
    import elmo.long_lines as long_lines

    seen = []
    real = long_lines.embed_in_windows
    monkeypatch.setattr(long_lines, "embed_in_windows", lambda bilm, tokens, *a: seen.append(len(tokens))
                        or real(bilm, tokens, *a))
    sentences = [words(5), words(40, 1), [], words(9, 2), words(41, 3), words(3, 4)]
    got = list(embed_sentences_windowed(skip_model, iter(sentences), batch_size=2, window=40))
    want = list(skip_model.embed_sentences(sentences, layers="all", batch_size=2))
    assert seen == [41]  # only the sentence longer than the window
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert g.shape == w.shape and float(np.abs(g - w).max(initial=0)) <= ATOL


def test_bf16_windows_run(allennlp_dir, one_thread):
    embedder = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", bf16=True)
    tokens = words(300)
    got = embed_in_windows(embedder.bilm, tokens, 50, bf16=True)
    whole = embedder.embed_batch([tokens])[0]
    assert got.shape == whole.shape and np.isfinite(got).all()
    assert float(np.abs(got - whole).max()) < 0.1  # bfloat16 products: the same vectors to bf16 precision


def test_window_must_be_positive(skip_model):
    for bad in (0, 1, -1, 2.5, True):
        with pytest.raises(ValueError, match="window must be a number of tokens of at least 2"):
            embed_in_windows(skip_model.bilm, ["a"], bad)


def test_memory_is_the_output_and_one_window(skip_model, one_thread, monkeypatch):
    """No call of the LSTM stacks sees more than one window of steps: activations never span the line."""
    longest = []
    for stack in (skip_model.bilm.forward_lstm, skip_model.bilm.backward_lstm):
        real = stack.forward
        monkeypatch.setattr(stack, "forward", lambda x, *a, _real=real: longest.append(x.shape[1]) or _real(x, *a))
    embed_in_windows(skip_model.bilm, words(2000), 64)
    assert max(longest) == 64 and len(longest) == 2 * -(-2001 // 64)
