"""`elmo embed` on one process: the layout of docs/format.md 6.2, the new options, and bad input."""

import json
import os

import h5py
import numpy as np
import pytest

from elmo import ElmoEmbedder, Embedder
from elmo.cli import main as cli_main
from elmo.embed.stream import embed_file

# stripped text as the key; a duplicate (last one wins in sentence_to_index); non-ASCII; an empty line
EXTRA = ["  The cat  sat . ", "Crème brûlée für 2 €", "", "The cat  sat ."]


@pytest.fixture
def corpus(tmp_path, fixture_sentences):
    lines = fixture_sentences[0] + EXTRA
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def embed(path, out, model_args, *flags):
    return cli_main(["embed", str(path), str(out), *model_args, *flags])


def test_default_matches_doc_6_2(tmp_path, corpus, model_args, embedder):
    path, lines = corpus
    out = tmp_path / "out.hdf5"
    assert embed(path, out, model_args) == 0
    expected = list(embedder.embed_sentences([line.split() for line in lines]))
    with h5py.File(out, "r") as f:
        assert set(f.keys()) == {str(i) for i in range(len(lines))} | {"sentence_to_index"}
        for i, line in enumerate(lines):
            ds = f[str(i)]
            assert ds.dtype == np.float32 and ds.shape == (3, len(line.split()), 32)
            np.testing.assert_allclose(ds[()], expected[i], rtol=0, atol=1e-6)
        index = f["sentence_to_index"]
        assert index.shape == (1,) and h5py.check_string_dtype(index.dtype).encoding == "utf-8"
        mapping = {line.strip(): str(i) for i, line in enumerate(lines)}  # the last duplicate wins
        assert index[0].decode("utf-8") == json.dumps(mapping)  # ensure_ascii default: \\u escapes
        assert json.loads(index[0])["The cat  sat ."] == str(len(lines) - 1)
        assert "\\u00e8" in index[0].decode("utf-8")
        assert f[str(len(lines) - 2)].shape == (3, 0, 32)  # the empty line


def test_use_sentence_keys_matches_doc_6_2(tmp_path, fixture_sentences, model_args, embedder):
    lines = fixture_sentences[1] + ["a/b c", "  spaced  out "]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert embed(path, out, model_args, "--use-sentence-keys", "--top") == 0
    expected = list(embedder.embed_sentences([line.split() for line in lines], layers="top"))
    with h5py.File(out, "r") as f:
        names = set()
        f.visititems(lambda name, obj: names.add(name) if isinstance(obj, h5py.Dataset) else None)
        assert names == {line.strip() for line in lines}  # no sentence_to_index; "a/b c" is group a, dataset "b c"
        for line, want in zip(lines, expected):
            np.testing.assert_allclose(f[line.strip()][()], want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad, message", [("a b\na b\n", "line 2: duplicate sentence"),
                                          ("a b\n\nc\n", "line 2: an empty line cannot be a sentence key")])
def test_use_sentence_keys_refuses_duplicates_and_empty_lines(tmp_path, model_args, capsys, bad, message):
    path = tmp_path / "c.txt"
    path.write_text(bad, encoding="utf-8")
    assert embed(path, tmp_path / "o.hdf5", model_args, "--use-sentence-keys") == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.hdf5").exists()


def test_forget_sentences_writes_no_index(tmp_path, corpus, model_args):
    path, lines = corpus
    assert embed(path, tmp_path / "o.hdf5", model_args, "--forget-sentences", "--average") == 0
    with h5py.File(tmp_path / "o.hdf5", "r") as f:
        assert set(f) == {str(i) for i in range(len(lines))}
        assert f["0"].shape == (len(lines[0].split()), 32)


def test_float16_within_1e_3_relative_of_float32(tmp_path, corpus, model_args):
    path, lines = corpus
    assert embed(path, tmp_path / "32.hdf5", model_args) == 0
    assert embed(path, tmp_path / "16.hdf5", model_args, "--dtype", "float16") == 0
    with h5py.File(tmp_path / "32.hdf5", "r") as f32, h5py.File(tmp_path / "16.hdf5", "r") as f16:
        for i in range(len(lines)):
            assert f16[str(i)].dtype == np.float16
            a32, a16 = f32[str(i)][()], f16[str(i)][()].astype(np.float32)
            # relative 1e-3; atol only for values below float16's normal range (6e-5), stored as subnormals
            np.testing.assert_allclose(a16, a32, rtol=1e-3, atol=1e-7)
    assert os.path.getsize(tmp_path / "16.hdf5") < 0.6 * os.path.getsize(tmp_path / "32.hdf5")


def test_bf16_autocast_is_close_to_float32_and_never_reuses_its_cache(tmp_path, corpus, model_args, embedder):
    path, lines = corpus
    assert embed(path, tmp_path / "32.hdf5", model_args) == 0
    assert embed(path, tmp_path / "bf16.hdf5", model_args, "--bf16") == 0
    with h5py.File(tmp_path / "32.hdf5", "r") as f32, h5py.File(tmp_path / "bf16.hdf5", "r") as fbf:
        a32 = np.concatenate([f32[str(i)][()] for i in range(len(lines))], axis=1)
        abf = np.concatenate([fbf[str(i)][()] for i in range(len(lines))], axis=1)
    assert abf.dtype == np.float32 and abf.shape == a32.shape
    assert not np.array_equal(abf, a32)  # autocast really ran in bfloat16 (8-bit mantissa)
    cos = (abf * a32).sum(-1) / (np.linalg.norm(abf, axis=-1) * np.linalg.norm(a32, axis=-1))
    assert cos.min() > 0.99
    # one model, two embedders: the token cache filled in float32 must not serve the bf16 run
    sentence = lines[0].split()
    plain = embedder.embed_sentence(sentence)
    half = Embedder(embedder.bilm, bf16=True).embed_sentence(sentence)
    assert not np.array_equal(half[0], plain[0])
    np.testing.assert_array_equal(embedder.embed_sentence(sentence), plain)


@pytest.mark.parametrize("flags, layers, reduce", [
    (["--pool", "mean"], [0, 1, 2], "mean"),
    (["--pool", "max", "--layers", "1,2"], [1, 2], "max"),
    (["--pool", "mean", "--average", "--layers", "0,2"], [0, 2], "mean-of-layers"),
])
def test_pooled_vectors_are_the_masked_mean_or_max(tmp_path, corpus, model_args, allennlp_dir, flags, layers, reduce):
    path, lines = corpus
    assert embed(path, tmp_path / "p.hdf5", model_args, *flags) == 0
    legacy = ElmoEmbedder(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    sentences = [line.split() for line in lines]
    activations, mask = legacy.batch_to_embeddings(sentences)  # padded (B, 3, T, D) and mask (B, T)
    x = activations[:, layers].numpy()
    m = mask.numpy()[:, None, :, None]
    if reduce == "max":
        pooled = np.where(m, x, -np.inf).max(axis=2)
    else:
        pooled = (x * m).sum(axis=2) / np.maximum(m.sum(axis=2), 1)
        if reduce == "mean-of-layers":
            pooled = pooled.mean(axis=1)
    with h5py.File(tmp_path / "p.hdf5", "r") as f:
        for i, sentence in enumerate(sentences):
            got = f[str(i)][()]
            if not sentence:
                assert not got.any()  # an empty line pools to zeros
                continue
            np.testing.assert_allclose(got, pooled[i], rtol=0, atol=1e-5)
        assert f["0"].shape == pooled.shape[1:]


@pytest.mark.parametrize("compression", ["gzip", "lzf"])
def test_compression_is_lossless(tmp_path, corpus, model_args, compression):
    path, lines = corpus
    assert embed(path, tmp_path / "plain.hdf5", model_args, "--layers", "2") == 0
    assert embed(path, tmp_path / "packed.hdf5", model_args, "--layers", "2", "--compression", compression) == 0
    with h5py.File(tmp_path / "plain.hdf5", "r") as a, h5py.File(tmp_path / "packed.hdf5", "r") as b:
        assert b["0"].compression == compression and a["0"].shape == (1, len(lines[0].split()), 32)
        for i in range(len(lines)):
            np.testing.assert_array_equal(a[str(i)][()], b[str(i)][()])


def test_stateful_follows_file_order_like_the_original(tmp_path, corpus, model_args, allennlp_dir):
    path, lines = corpus
    assert embed(path, tmp_path / "s.hdf5", model_args, "--stateful", "--batch-size", "4", "--top") == 0
    stateful = Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5", stateful=True)
    expected = list(stateful.embed_sentences([line.split() for line in lines], layers="top", batch_size=4))
    with h5py.File(tmp_path / "s.hdf5", "r") as f:
        for i, want in enumerate(expected):
            np.testing.assert_allclose(f[str(i)][()], want, rtol=0, atol=1e-6)


def test_invalid_utf8_names_the_line(tmp_path, model_args, capsys):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine line\nalso fine\nbroken \xc3\x28 here\n")
    assert embed(path, tmp_path / "o.hdf5", model_args) == 2
    err = capsys.readouterr().err
    assert "bad.txt, line 3: invalid UTF-8" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.hdf5").exists()


def test_directory_as_output_is_refused(tmp_path, corpus, model_args, capsys):
    assert embed(corpus[0], tmp_path, model_args) == 2
    assert f"{tmp_path}: is a directory" in capsys.readouterr().err


def test_existing_output_is_refused_unless_overwrite(tmp_path, corpus, model_args, capsys):
    out = tmp_path / "o.hdf5"
    out.write_bytes(b"precious")
    assert embed(corpus[0], out, model_args) == 2
    assert "already exists (pass --overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"precious"
    assert embed(corpus[0], out, model_args, "--overwrite") == 0
    with h5py.File(out, "r") as f:
        assert "0" in f


@pytest.mark.parametrize("flags, message", [
    (["--layers", "1,3"], "the model has layers 0..2 (0 = token layer), found 3"),
    (["--layers", "one"], "--layers expects comma-separated layer numbers"),
    (["--layers", "2", "--top"], "--layers and --top do not combine"),
    (["--stateful", "--resume"], "--stateful runs in one process and cannot be resumed"),
])
def test_bad_options_are_one_line_errors(tmp_path, corpus, model_args, capsys, flags, message):
    assert embed(corpus[0], tmp_path / "o.hdf5", model_args, *flags) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


class Interrupted(Embedder):
    """Stops after a few batches, as Ctrl-C would."""

    calls = 0

    def embed_batch(self, sentences):
        Interrupted.calls += 1
        if Interrupted.calls > 2:
            raise KeyboardInterrupt
        return super().embed_batch(sentences)


def test_interrupted_run_leaves_no_output(tmp_path, allennlp_dir, fixture_sentences):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(fixture_sentences[2] * 5) + "\n", encoding="utf-8")
    embedder = Interrupted.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    with pytest.raises(KeyboardInterrupt):
        embed_file(embedder, path, tmp_path / "o.hdf5", batch_size=4, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["c.txt"]  # neither OUTPUT nor its temporary file


def test_version_flag_prints_the_package_version(capsys):
    import elmo

    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"elmo {elmo.__version__}"
