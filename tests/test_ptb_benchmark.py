"""benchmarks/ptb_char_small.py's epoch log: an epoch is scored and logged only when its training finished."""

from __future__ import annotations

import sys

import pytest
from conftest import load_script

from elmo.training.checkpoint import checkpoint_path


def test_a_stopped_epoch_is_not_logged_as_finished(tmp_path, monkeypatch):
    """SIGTERM makes `train` save a checkpoint and return early; the epoch must not be scored as if complete."""
    data = tmp_path / "ptb"
    data.mkdir()
    for split in ("train", "valid", "test"):
        (data / f"ptb.{split}.txt").write_text(" the cat sat on the mat \n a dog ran <unk> \n" * 400)
    out = tmp_path / "run"
    module = load_script("benchmarks/ptb_char_small.py")

    def stopped_train(settings):  # what a SIGTERM'd run leaves: a checkpoint short of max_steps
        path = checkpoint_path(settings.out, settings.max_steps - 3)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")

    def no_scoring(*args, **kwargs):
        raise AssertionError("a stopped epoch was scored")

    monkeypatch.setattr(module, "train", stopped_train)
    monkeypatch.setattr(module, "score", no_scoring)
    monkeypatch.setattr(sys, "argv", ["ptb_char_small.py", "--out", str(out), "--data", str(data),
                                      "--projection-dim", "300", "--steps-per-epoch", "10", "--device", "cpu"])
    with pytest.raises(SystemExit, match=r"stopped at step 7, before the end of epoch 1 \(step 10\); rerun"):
        module.main()
    assert not (out / "benchmark.jsonl").exists()


def test_word_reference_resumes_exactly_and_scores_the_test_set_at_the_end(tmp_path, monkeypatch, capsys):
    """benchmarks/ptb_word_reference.py --out: 2 epochs then a third gives what 3 in one go give."""
    data = tmp_path / "ptb"
    data.mkdir()
    words = "the cat sat on a mat <unk> dog ran far and we saw it".split()
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(8)) for i in range(300)]
    for split, part in (("train", lines), ("valid", lines[:40]), ("test", lines[40:80])):
        (data / f"ptb.{split}.txt").write_text("\n".join(part) + "\n")
    module = load_script("benchmarks/ptb_word_reference.py")

    def run(*flags):
        monkeypatch.setattr(sys, "argv", ["ptb_word_reference.py", "--data", str(data), *flags])
        module.main()
        return [line for line in capsys.readouterr().out.splitlines() if "step" not in line]

    straight = run("--epochs", "3")
    first = run("--epochs", "2", "--out", str(tmp_path / "run"))
    resumed = run("--epochs", "3", "--out", str(tmp_path / "run"))
    assert resumed[0] == "continuing after epoch 2 from " + str(tmp_path / "run" / "state.pt")
    epochs = [[line for line in out if line.startswith(("epoch ", "lr "))] for out in (straight, first, resumed)]
    assert epochs[1] + epochs[2] == epochs[0] and any(line.startswith("lr ") for line in epochs[0])  # it halved
    assert first[-1].startswith("test ppl after epoch 2: ")  # each invocation's last epoch scores the test set
    assert resumed[-1] == straight[-1] and straight[-1].startswith("test ppl after epoch 3: ")


def test_kims_initialisation_is_what_the_run_starts_from(tmp_path):
    """`--init kim`: every weight U(-0.05, 0.05) but the fixed ones, as Kim et al.'s main.lua draws them."""
    import torch

    from elmo.formats.weights import load_bilm
    from elmo.model.chars import PAD_CHAR
    from elmo.training.softmax import load_softmax

    module = load_script("benchmarks/ptb_char_small.py")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\n</S>\n<UNK>\nthe\ncat\n")
    module.write_initial_model(tmp_path / "kim", seed=1, init="kim", vocab=vocab)
    module.write_initial_model(tmp_path / "tf", seed=1)
    kim = load_bilm(tmp_path / "kim" / "options.json", tmp_path / "kim" / "weights.hdf5")
    tf = load_bilm(tmp_path / "tf" / "options.json", tmp_path / "tf" / "weights.hdf5")
    assert tf.char_encoder.char_embed.abs().max() > 0.9  # bilm-tf's U(-1, 1)
    assert not (tmp_path / "tf" / "softmax.hdf5").exists()
    encoder = kim.char_encoder
    assert encoder.char_embed.abs().max() <= 0.05 and encoder.char_embed.abs().max() > 0.04
    assert (encoder.char_embed[PAD_CHAR] == 0).all()
    assert all((b == -2).all() for b in encoder.highway_carry_b)
    for layer in [*kim.forward_lstm.layers, *kim.backward_lstm.layers]:
        assert torch.equal(layer.W_P_0, torch.eye(300, 525))
        forget = slice(600, 900)  # gates i, j, f, o; the LSTM adds TensorFlow's +1 to f
        assert ((layer.B[forget] + 1).abs() <= 0.05).all()
        assert (torch.cat([layer.B[:600], layer.B[900:]]).abs() <= 0.05).all()
        assert layer.W_0.abs().max() <= 0.05
    softmax = load_softmax(tmp_path / "kim" / "softmax.hdf5", 5, 525)
    assert all(p.abs().max() <= 0.05 for p in softmax.parameters())
