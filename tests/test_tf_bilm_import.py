"""Issue #58 item 2: a checkpoint trained by bilm-tf's own code (tests/data/tf/bilm-run, made by
scripts/make_tf_references.py) as a model: `elmo import-tf` gives the weights bilm-tf's `dump_weights` wrote, the same
vectors, and the perplexity bilm-tf's `test()` computed on tests/data/tf/heldout.txt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import BILM_TF, need, subprocess_env

import elmo
from elmo.cli import main
from elmo.errors import ModelFileError

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

from elmo.tf.bilm_import import dump_weights_name, find_bilm_checkpoint, import_bilm_checkpoint  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))["bilm_tf_test"]
RUN = DATA / "bilm-run"
# bilm-tf sums float32 batch losses (38 of them) and we sum float64: the two agree to about 1e-6 relative
PERPLEXITY_RTOL = 1e-5


@pytest.fixture(scope="module")
def vocab():
    return need(BILM_TF / "train" / "vocab.txt")


@pytest.fixture(scope="module")
def imported(tmp_path_factory, vocab):
    out = tmp_path_factory.mktemp("import") / "model"
    assert main(["import-tf", str(RUN), str(out), "--vocab", str(vocab)]) == 0
    return out


def datasets(path: Path) -> dict[str, np.ndarray]:
    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.update({name: obj[...]}) if isinstance(obj, h5py.Dataset) else None)
    return found


def test_the_weights_are_dump_weights(imported):
    ours, theirs = datasets(imported / "weights.hdf5"), datasets(DATA / "bilm-weights.hdf5")
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        assert ours[name].dtype == np.float32 and ours[name].tobytes() == value.tobytes(), name
    from elmo.tf import TFCheckpoint
    ckpt = TFCheckpoint(RUN / EXPECTED["checkpoint"])
    softmax = datasets(imported / "softmax.hdf5")
    assert softmax["W"].tobytes() == ckpt.read("lm/softmax/W").tobytes() and softmax["W"].shape == (32, 8)
    assert softmax["b"].tobytes() == ckpt.read("lm/softmax/b").tobytes()
    options = json.loads((imported / "options.json").read_text())
    assert options["char_cnn"]["n_characters"] == 262 and set(options) == {"lstm", "char_cnn"}


def test_the_vectors_of_dump_weights(imported):
    sentences = [["the", "neural", "net", "."], ["continuous", "embeddings", "help", "language", "models", "."]]
    ours = elmo.Embedder.from_files(imported / "options.json", imported / "weights.hdf5")
    theirs = elmo.Embedder.from_files(imported / "options.json", DATA / "bilm-weights.hdf5")
    for a, b in zip(ours.embed_sentences(sentences, layers="all"), theirs.embed_sentences(sentences, layers="all"),
                    strict=True):
        assert a.shape == b.shape == (3, len(a[0]), 16)
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_the_perplexity_bilm_tf_computed(imported, capsys):
    from elmo.training.perplexity import load_for_scoring, perplexity

    model, vocab = load_for_scoring(imported)
    got = perplexity(model, vocab, str(DATA / EXPECTED["heldout"]), mode="stream", batch_size=EXPECTED["test_batch_size"])
    assert got["tokens"] == 38
    assert got["average"] == pytest.approx(EXPECTED["perplexity"], rel=PERPLEXITY_RTOL)
    assert main(["perplexity", str(imported), "--test", str(DATA / EXPECTED["heldout"]), "--batch-size", "1"]) == 0
    assert f"{EXPECTED['perplexity']:.2f}" in capsys.readouterr().out


def test_dump_weights_names():
    assert dump_weights_name("lm/RNN_1/rnn/multi_rnn_cell/cell_0/lstm_cell/projection/kernel") == \
        "RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"
    assert dump_weights_name("lm/RNN_0/rnn/multi_rnn_cell/cell_1/lstm_cell/kernel") == \
        "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"
    assert dump_weights_name("lm/RNN_0/rnn/multi_rnn_cell/cell_1/lstm_cell/bias") == "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B"
    assert dump_weights_name("lm/CNN_high_1/W_carry") == "CNN_high_1/W_carry"
    for skipped in ("lm/softmax/W", "lm/char_embed/Adagrad", "global_step", "train_perplexity"):
        assert dump_weights_name(skipped) is None


def test_a_prefix_or_a_run_directory(vocab):
    prefix = RUN / EXPECTED["checkpoint"]
    assert find_bilm_checkpoint(RUN, vocab=vocab).prefix == prefix
    found = find_bilm_checkpoint(f"{prefix}.index")
    assert (found.prefix, found.options_file, found.vocab_file) == (prefix, RUN / "options.json", None)


def test_refusals(tmp_path, vocab):
    (tmp_path / "short.txt").write_text("<S>\n</S>\n<UNK>\n")
    with pytest.raises(ModelFileError, match=r"3 words, but the softmax of .* has 32 rows"):
        import_bilm_checkpoint(find_bilm_checkpoint(RUN, vocab=tmp_path / "short.txt"), tmp_path / "a")
    with pytest.raises(ModelFileError, match="needs the options.json it was trained with"):
        find_bilm_checkpoint(DATA / "dtypes" / "ckpt")
    with pytest.raises(ModelFileError, match="no lm/softmax/W"):
        import_bilm_checkpoint(find_bilm_checkpoint(DATA / "dtypes" / "ckpt", RUN / "options.json", vocab), tmp_path / "a")
    word_options = tmp_path / "word.json"
    word_options.write_text(json.dumps({"lstm": {"dim": 16, "projection_dim": 8, "n_layers": 2}}))
    with pytest.raises(ModelFileError, match="a word-input bilm-tf model"):
        import_bilm_checkpoint(find_bilm_checkpoint(RUN, word_options, vocab), tmp_path / "a")
    assert not (tmp_path / "a").exists()


def test_an_existing_output_needs_overwrite(tmp_path, vocab, capsys):
    out = tmp_path / "model"
    assert main(["import-tf", str(RUN), str(out), "--vocab", str(vocab)]) == 0
    assert main(["import-tf", str(RUN), str(out), "--vocab", str(vocab)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["import-tf", str(RUN), str(out), "--vocab", str(vocab), "--overwrite"]) == 0


def test_fine_tuning_starts_from_it(imported, vocab, tmp_path):
    data = need(BILM_TF / "train" / "data.txt")
    flags = ["--batch-size", "2", "--unroll-steps", "5", "--negatives", "8", "--threads", "1", "--no-progress"]
    assert main(["train", "--init-from", str(imported), "--vocab", str(vocab), "--train", str(data),
                 "--out", str(tmp_path / "run"), "--max-steps", "1", *flags]) == 0
    shutil.rmtree(tmp_path / "run")


def test_without_a_vocabulary_the_softmax_is_kept(tmp_path, vocab, capsys):
    out = tmp_path / "model"
    assert main(["import-tf", str(RUN / EXPECTED["checkpoint"]), str(out)]) == 0
    assert "no vocabulary given" in capsys.readouterr().out
    assert (out / "softmax.hdf5").is_file() and not (out / "vocab.txt").exists()
    assert main(["perplexity", str(out), "--vocab", str(vocab), "--test", str(DATA / EXPECTED["heldout"]),
                 "--batch-size", "1"]) == 0
    assert f"{EXPECTED['perplexity']:.2f}" in capsys.readouterr().out


def test_the_lab_predicts_words_with_it(imported):
    from elmo.lab.lm_head import LMHead

    head = LMHead.from_files(imported / "vocab.txt", imported / "softmax.hdf5", projection_dim=8)
    assert head.dim == 8 and head.vocab[:3] == ["<S>", "</S>", "<UNK>"]


@pytest.fixture
def run_with_vocab(tmp_path, vocab, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    shutil.copy(vocab, run / "vocab-2016-09-10.txt")  # named as bilm-tf's README names the original's
    return run


def test_a_run_directory_or_prefix_as_a_model_reference(run_with_vocab, tmp_path):
    from elmo.tf.bilm_models import imported_model_dir, is_bilm_tf_reference

    run = run_with_vocab
    prefix = run / EXPECTED["checkpoint"]
    assert is_bilm_tf_reference(run) and is_bilm_tf_reference(prefix) and is_bilm_tf_reference(f"{prefix}.index")
    assert not is_bilm_tf_reference(tmp_path)
    assert is_bilm_tf_reference(DATA / "dtypes" / "ckpt")  # any checkpoint: the import then says what it lacks (#66.10)
    model = imported_model_dir(run)
    assert model.is_relative_to(tmp_path / "elmo-cache") and (model / "vocab.txt").is_file()
    stamp = (model / "weights.hdf5").stat().st_mtime_ns
    assert imported_model_dir(prefix) == model and (model / "weights.hdf5").stat().st_mtime_ns == stamp  # imported once
    assert datasets(model / "weights.hdf5").keys() == datasets(DATA / "bilm-weights.hdf5").keys()
    (run / "options.json").touch()
    os.utime(run / "options.json", ns=(1, 1))  # a changed input: imported again, replacing the copy (#66.8)
    assert imported_model_dir(run) == model and (model / "weights.hdf5").stat().st_mtime_ns != stamp
    assert len(list((tmp_path / "elmo-cache" / "local").iterdir())) == 1


def test_importing_a_checkpoint_imports_no_dynamo(tmp_path, vocab):
    """The shape check builds its biLM on the meta device uninitialised: initialising meta tensors imports
    torch._dynamo and sympy (~1 s of start-up, issue #62)."""
    probe = ("import sys; from elmo.cli import main; "
             f"code = main(['import-tf', {str(RUN)!r}, {str(tmp_path / 'm')!r}, '--vocab', {str(vocab)!r}]); "
             "print(code, 'torch._dynamo' in sys.modules, 'sympy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["0", "False", "False"], done.stdout
