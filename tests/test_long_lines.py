"""#56 item 5: a long line embedded in windows with the LSTM state carried equals the one-piece path (1e-6)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import model_flags

from elmo import Embedder
from elmo.cli import main as cli_main
from elmo.embed.long_lines import LONG_LINE_WINDOW, embed_in_windows, embed_sentences_windowed
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
    import elmo.embed.long_lines as long_lines

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


# `elmo embed`: long lines routed through windows, line limits, bounded sentence_to_index keys.

def write_text(path: Path, lines: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("stateful", [False, True])
def test_embed_routes_a_long_line_through_windows(tmp_path, allennlp_dir, skip_model, one_thread, monkeypatch,
                                                  stateful):
    import elmo.embed.long_lines as long_lines

    calls = []
    real = long_lines.embed_in_windows
    monkeypatch.setattr(long_lines, "embed_in_windows", lambda bilm, tokens, *a: calls.append(len(tokens))
                        or real(bilm, tokens, *a))
    lines = [words(4), words(LONG_LINE_WINDOW * 2 + 77, 5), [], words(LONG_LINE_WINDOW, 6), words(9, 7)]
    text, out = write_text(tmp_path / "in.txt", lines), tmp_path / "out.hdf5"
    assert cli_main(["embed", str(text), str(out), *model_flags(allennlp_dir), *(["--stateful"] * stateful)]) == 0
    assert calls == ([] if stateful else [LONG_LINE_WINDOW * 2 + 77])  # --stateful runs every line in one piece
    with h5py.File(out, "r") as f:
        index = json.loads(f["sentence_to_index"][0])
        for number, tokens in enumerate(lines):
            assert f[str(number)].shape == (3, len(tokens), 32)
            assert index[" ".join(tokens)] == str(number)
        if not stateful:
            whole = skip_model.embed_batch([lines[1]])[0]
            assert float(np.abs(f["1"][()] - whole).max()) <= ATOL


@pytest.mark.parametrize("stateful", [False, True])
def test_a_line_over_the_token_limit_is_refused_by_number_before_any_work(tmp_path, allennlp_dir, capsys, monkeypatch,
                                                                          stateful):
    import elmo.embed.corpus as embed_corpus_module
    import elmo.embed.stream as embed_file_module

    for module in (embed_file_module, embed_corpus_module):
        monkeypatch.setattr(module, "embed_lines", lambda *a, **k: pytest.fail("embedding started"))
    text = write_text(tmp_path / "in.txt", [words(3), words(3, 1), words(101, 2), words(3, 3)])
    out = tmp_path / "out.hdf5"
    flags = [*model_flags(allennlp_dir), "--max-line-tokens", "100", *(["--stateful"] * stateful)]
    assert cli_main(["embed", str(text), str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert f"{text}, line 3: 101 tokens, more than the 100 allowed in one line" in err
    assert "--max-line-tokens raises the limit" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # no OUTPUT, parts or temporaries
    monkeypatch.undo()
    assert cli_main(["embed", str(text), str(out), *flags[:-2 - stateful], "--max-line-tokens", "101",
                     *(["--stateful"] * stateful)]) == 0


def test_the_default_token_limit_and_bad_limits(tmp_path, allennlp_dir, capsys):
    from elmo.embed.input_file import MAX_LINE_TOKENS, LineLimits

    assert LineLimits().max_tokens == MAX_LINE_TOKENS == 100_000
    text = write_text(tmp_path / "in.txt", [["a"] * (MAX_LINE_TOKENS + 1)])
    assert cli_main(["embed", str(text), str(tmp_path / "out.hdf5"), *model_flags(allennlp_dir)]) == 2
    assert "line 1: 100,001 tokens, more than the 100,000 allowed" in capsys.readouterr().err
    for flag in ("--max-line-tokens", "--max-line-bytes"):
        assert cli_main(["embed", str(text), str(tmp_path / "out.hdf5"), *model_flags(allennlp_dir), flag, "0"]) == 2
        assert f"{flag} must be a positive integer, found 0" in capsys.readouterr().err


@pytest.mark.parametrize("stateful", [False, True])
def test_a_line_over_the_byte_limit_names_the_line_and_the_flag(tmp_path, allennlp_dir, capsys, stateful):
    text = write_text(tmp_path / "in.txt", [["a", "b"], ["word"] * 300, ["c"]])  # line 2: 1,500 bytes
    out = tmp_path / "out.hdf5"
    flags = [*model_flags(allennlp_dir), *(["--stateful"] * stateful)]
    assert cli_main(["embed", str(text), str(out), *flags, "--max-line-bytes", "1000"]) == 2
    err = capsys.readouterr().err
    assert f"{text}, line 2: longer than 1,000 bytes" in err and "--max-line-bytes raises the limit" in err
    assert not out.exists()
    assert cli_main(["embed", str(text), str(out), *flags, "--max-line-bytes", "2000"]) == 0


def test_index_keys_are_bounded_and_unchanged_for_normal_lines():
    from elmo.embed.output_file import INDEX_KEY_PREFIX_CHARS, MAX_INDEX_KEY_CHARS, index_key

    normal = "The cat sat on the mat ."
    assert index_key(normal) == normal and index_key("x" * MAX_INDEX_KEY_CHARS) == "x" * MAX_INDEX_KEY_CHARS
    huge = "é " * 3_000_000
    key = index_key(huge.strip())
    assert key == huge[:INDEX_KEY_PREFIX_CHARS] + "…sha256:" + hashlib.sha256(huge.strip().encode()).hexdigest()
    assert len(key) < 300 and index_key(huge.strip()) == key and index_key(huge.strip() + " x") != key


@pytest.mark.parametrize("stateful", [False, True])
def test_sentence_to_index_holds_a_bounded_key_per_line(tmp_path, allennlp_dir, monkeypatch, stateful):
    import elmo.embed.output_file as embed_output_module

    monkeypatch.setattr(embed_output_module, "MAX_INDEX_KEY_CHARS", 100)
    lines = [words(5), words(200, 8), words(6, 9)]
    text, out = write_text(tmp_path / "in.txt", lines), tmp_path / "out.hdf5"
    assert cli_main(["embed", str(text), str(out), *model_flags(allennlp_dir), *(["--stateful"] * stateful)]) == 0
    with h5py.File(out, "r") as f:
        index = json.loads(f["sentence_to_index"][0])
    long_line = " ".join(lines[1])
    assert index == {" ".join(lines[0]): "0", embed_output_module.index_key(long_line): "1", " ".join(lines[2]): "2"}
    assert long_line not in index and max(map(len, index)) < 300


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_windows_equal_one_piece_on_a_gpu(allennlp_dir):
    embedder = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", device="cuda")
    assert_windows_equal_one_piece(embedder, words(1001), [64, 1000])


def test_the_memory_benchmark_writes_one_line_of_the_asked_length(tmp_path):
    from conftest import DATA, load_script, need

    need(DATA / "wiki_corpus" / "train.txt.gz")
    bench = load_script("benchmarks/embed_memory.py")
    bench.write_one_line(tmp_path / "line.txt", 1234)
    lines = (tmp_path / "line.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and len(lines[0].split()) == 1234
