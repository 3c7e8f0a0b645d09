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
