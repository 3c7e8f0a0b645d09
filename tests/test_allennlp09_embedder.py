"""`elmo.ElmoEmbedder`: code written for AllenNLP 0.9 runs with one changed import."""

import io
import os
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import torch

from elmo import ElmoEmbedder, Embedder, InputError, ModelFileError

# Written the way users wrote it against AllenNLP 0.9 (the tutorial's calls, then a file of sentences).
SCRIPT_09 = textwrap.dedent("""\
    import sys
    import numpy as np
    from allennlp.commands.elmo import ElmoEmbedder

    options_file, weight_file, corpus, out_dir = sys.argv[1:]
    elmo = ElmoEmbedder(options_file, weight_file, cuda_device=-1)

    tokens = ["I", "ate", "an", "apple", "for", "breakfast"]
    vectors = elmo.embed_sentence(tokens)
    assert(len(vectors) == 3)  # one for each layer in the ELMo output
    assert(len(vectors[0]) == len(tokens))  # the vector elements correspond with the input tokens
    vectors2 = elmo.embed_sentence(["I", "ate", "a", "carrot", "for", "breakfast"])

    sentences = [line.split() for line in open(corpus)]
    embedded = list(elmo.embed_sentences(sentences, batch_size=4))
    np.savez(out_dir + "/arrays.npz", *embedded, apple=vectors, carrot=vectors2)

    elmo.embed_file(open(corpus), out_dir + "/corpus.hdf5", output_format="all", batch_size=4)
    elmo.embed_file(open(corpus), out_dir + "/average.hdf5", "average")
""")


def single_threaded(fn):
    """Run `fn` with one torch thread, as the script's subprocess does (the BLAS result can depend on it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow  # end to end: a whole script in a second interpreter
def test_allennlp_09_script_runs_with_only_the_import_changed(tmp_path, allennlp_dir, fixture_sentences):
    sentences = [s.split() for s in fixture_sentences[0]] + [[]]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
    script = tmp_path / "old_code.py"
    changed = SCRIPT_09.replace("from allennlp.commands.elmo import ElmoEmbedder", "from elmo import ElmoEmbedder")
    assert [a for a, b in zip(SCRIPT_09.splitlines(), changed.splitlines()) if a != b] == [
        "from allennlp.commands.elmo import ElmoEmbedder"]
    script.write_text(changed)
    options, weights = allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(script), str(options), str(weights), str(corpus), str(tmp_path)],
                   check=True, env=env, timeout=300)

    ours = Embedder.from_files(options, weights)
    got = np.load(tmp_path / "arrays.npz")
    apple = single_threaded(lambda: ours.embed_sentence("I ate an apple for breakfast".split()))
    # Equal up to float rounding (1e-6): which batch first encoded a word, and so fed the token cache, differs.
    np.testing.assert_allclose(got["apple"], apple, rtol=0, atol=1e-6)
    assert got["apple"].shape == (3, 6, 32) and got["apple"].dtype == np.float32
    expected = single_threaded(lambda: list(ours.embed_sentences(sentences, batch_size=4)))
    for i, want in enumerate(expected):
        np.testing.assert_allclose(got[f"arr_{i}"], want, rtol=0, atol=1e-6)
    with h5py.File(tmp_path / "corpus.hdf5", "r") as f, h5py.File(tmp_path / "average.hdf5", "r") as avg:
        assert set(f) == {str(i) for i in range(len(sentences))} | {"sentence_to_index"}
        for i, want in enumerate(expected):
            np.testing.assert_allclose(f[str(i)][()], want, rtol=0, atol=1e-6)
            np.testing.assert_allclose(avg[str(i)][()], want.mean(axis=0), rtol=0, atol=1e-6)
        assert f[str(len(sentences) - 1)].shape == (3, 0, 32)  # an empty line: an empty dataset


def test_stateful_reproduces_allennlp_09_state_and_fixture(allennlp_dir, fixture_sentences):
    """stateful=True is 0.9's behaviour: state per batch row, carried between calls (docs/format.md 4.8)."""
    elmo = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", stateful=True)
    for i in range(10):
        batch = [lst[i].split() for lst in fixture_sentences]
        for k, arr in enumerate(elmo.embed_batch(batch)):
            with h5py.File(allennlp_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
                expected = f[str(i)][()]
            top = arr[2]
            np.testing.assert_allclose(np.stack([top[:, :16], top[:, 16:]]), expected, atol=1e-6, rtol=1e-5)


def test_stateless_by_default_same_sentence_same_vectors(allennlp_dir, fixture_sentences):
    sentence = fixture_sentences[0][0].split()
    stateless = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    np.testing.assert_array_equal(stateless.embed_sentence(sentence), stateless.embed_sentence(sentence))
    stateful = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", stateful=True)
    first, second = stateful.embed_sentence(sentence), stateful.embed_sentence(sentence)
    assert np.abs(first - second).max() > 1e-3  # the 0.9 surprise (allennlp #1169), kept only on request
    stateful.reset_states()
    np.testing.assert_array_equal(stateful.embed_sentence(sentence), first)


def test_batch_to_embeddings_shapes_and_mask(allennlp_dir):
    elmo = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    activations, mask = elmo.batch_to_embeddings([["a", "b", "c"], ["d"]])
    assert activations.shape == (2, 3, 3, 32) and mask.tolist() == [[True, True, True], [True, False, False]]
    np.testing.assert_allclose(activations[1, :, :1].numpy(), elmo.embed_sentence(["d"]), atol=1e-6)
    assert torch.all(activations[1, :, 1:] == 0)


# ElmoEmbedder() with no files (0.9's default, the `original` model, or a clear error): tests/test_hub_models.py


def test_options_without_weights_is_an_error(allennlp_dir):
    with pytest.raises(ModelFileError, match="both options_file and weight_file"):
        ElmoEmbedder(allennlp_dir / "options.json")


def test_embed_file_takes_a_path_or_an_open_file_and_closes_it(tmp_path, allennlp_dir):
    elmo = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\nc\n", encoding="utf-8")
    elmo.embed_file(corpus, tmp_path / "from_path.hdf5", "top")
    handle = open(corpus, encoding="utf-8")  # noqa: SIM115 (the test checks that embed_file closes it)
    elmo.embed_file(handle, tmp_path / "from_file.hdf5", "top")
    assert handle.closed
    with h5py.File(tmp_path / "from_path.hdf5", "r") as a, h5py.File(tmp_path / "from_file.hdf5", "r") as b:
        assert a["0"].shape == (2, 32) and a["1"].shape == (1, 32)
        np.testing.assert_array_equal(a["0"][()], b["0"][()])
        assert a["sentence_to_index"][0].decode() == '{"a b": "0", "c": "1"}'


def test_embed_file_bad_utf8_in_an_open_file_names_the_line(tmp_path, allennlp_dir):
    elmo = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    with pytest.raises(InputError, match=r"line 2: invalid UTF-8"):
        elmo.embed_file(io.BytesIO(b"fine\n\xff bad\n"), tmp_path / "out.hdf5")
    assert not (tmp_path / "out.hdf5").exists()
