"""The exact core against the original tools' outputs (fixtures from ../shared, atol 1e-6)."""

import h5py
import numpy as np
import pytest
import torch
from conftest import assert_word_cache_matches

from elmo import Elmo, Embedder, batch_to_ids, load_bilm, remove_sentence_boundaries
from elmo.cli import main as cli_main


def top_layer_halves(layer2: np.ndarray, dim: int) -> np.ndarray:
    return np.stack([layer2[:, :dim], layer2[:, dim:]])


def run_fixture_batches(bilm, lists):
    """Batch i = the i-th sentence of each list; state carried per row (the fixture's recipe)."""
    outputs = [[None] * 10 for _ in lists]
    with torch.no_grad():
        for i in range(10):
            batch = [lst[i].split() for lst in lists]
            out = bilm(batch_to_ids(batch))
            top, _ = remove_sentence_boundaries(out.layers[2], out.mask)
            for k, sentence in enumerate(batch):
                outputs[k][i] = top[k, : len(sentence)].numpy()
    return outputs


@pytest.mark.parametrize("fixture", ["allennlp-elmo", "bilm-tf-model"])
def test_stateful_top_layer_matches_original(fixture, allennlp_dir, fixture_sentences):
    d = allennlp_dir.parent / fixture
    bilm = load_bilm(d / "options.json", d / "lm_weights.hdf5", stateful=True)
    got = run_fixture_batches(bilm, fixture_sentences)
    for k in range(3):
        with h5py.File(d / f"lm_embeddings_{k}.hdf5", "r") as f:
            for i in range(10):
                expected = f[str(i)][...]
                np.testing.assert_allclose(top_layer_halves(got[k][i], 16), expected, atol=1e-6, rtol=1e-5)


def test_skip_connections_off_is_used(bilm_tf_dir):
    bilm = load_bilm(bilm_tf_dir / "options.json", bilm_tf_dir / "lm_weights.hdf5")
    assert bilm.config.use_skip_connections is False


def test_token_layer_matches_dump_token_embeddings(allennlp_dir):
    bilm = load_bilm(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    vocab = (allennlp_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(allennlp_dir / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    with torch.no_grad():
        got = bilm.char_encoder(batch_to_ids([[t] for t in vocab])[:, 0]).numpy()
    assert got.shape == expected.shape == (458, 16)
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=1e-5)


def test_elmo_vocab_cache_matches_token_embeddings(allennlp_dir, fixture_sentences):
    vocab = (allennlp_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    words = ["@@PADDING@@"] + vocab
    elmo = Elmo(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", 1, dropout=0.0,
                vocab_to_cache=words)
    index = {w: i for i, w in enumerate(words)}
    sentences = [s.split() for s in fixture_sentences[0][:4]]
    assert_word_cache_matches(elmo, sentences, index)


def test_elmo_embed_command_stateful_matches_fixture(tmp_path, allennlp_dir, fixture_sentences):
    """`elmo embed --all --batch-size 3 --stateful` on the interleaved lists reproduces the fixture."""
    lines = [fixture_sentences[k][i] for i in range(10) for k in range(3)]
    src = tmp_path / "interleaved.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    rc = cli_main(["embed", str(src), str(out), "--options", str(allennlp_dir / "options.json"),
                   "--weights", str(allennlp_dir / "lm_weights.hdf5"), "--all", "--batch-size", "3", "--stateful"])
    assert rc == 0
    with h5py.File(out, "r") as f:
        assert len([k for k in f if k != "sentence_to_index"]) == 30
        for line, _ in enumerate(lines):
            i, k = divmod(line, 3)
            got = f[str(line)][...]
            assert got.shape == (3, len(lines[line].split()), 32)
            with h5py.File(allennlp_dir / f"lm_embeddings_{k}.hdf5", "r") as e:
                np.testing.assert_allclose(top_layer_halves(got[2], 16), e[str(i)][...], atol=1e-6, rtol=1e-5)


def test_embedder_stateful_python_api_matches_fixture(allennlp_dir, fixture_sentences):
    emb = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", stateful=True)
    lines = [fixture_sentences[k][i].split() for i in range(10) for k in range(3)]
    arrays = list(emb.embed_sentences(lines, layers="top", batch_size=3))
    for line, arr in enumerate(arrays):
        i, k = divmod(line, 3)
        with h5py.File(allennlp_dir / f"lm_embeddings_{k}.hdf5", "r") as e:
            np.testing.assert_allclose(top_layer_halves(arr, 16), e[str(i)][...], atol=1e-6, rtol=1e-5)
