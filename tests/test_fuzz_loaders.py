"""Issue #47, item 5: every loader turns any bytes into one clean error. Seeded mutations (truncated,
flipped, overwritten, inserted, deleted bytes) of a valid file; only the package's own exceptions,
each one line naming the file, may come out (a mutation that still loads is fine)."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_reliability import MANYLANGS, tiny_task_model

from elmo.errors import ElmoError

pytestmark = pytest.mark.usefixtures("one_thread")


def mutations(data: bytes, count: int, seed: int):
    """`count` damaged copies of `data`, the same ones on every run for a given seed."""
    rng = random.Random(seed)
    for i in range(count):
        out = bytearray(data)
        kind = i % 5
        at = rng.randrange(len(out))
        if kind == 0:
            out = out[:at]
        elif kind == 1:
            for _ in range(rng.randint(1, 8)):
                out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif kind == 2:
            span = rng.randint(1, 64)
            out[at:at + span] = bytes(rng.randrange(256) for _ in range(span))
        elif kind == 3:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
        else:
            del out[at:at + rng.randint(1, 256)]
        yield i, bytes(out)


def assert_damage_refused(target: Path, load: Callable[[], object], count: int, seed: int) -> dict[str, int]:
    """Write each mutation over `target` and call `load`; tally the outcomes, fail on a foreign exception."""
    original = target.read_bytes()
    outcomes = {"loaded": 0, "refused": 0}
    for i, data in mutations(original, count, seed):
        target.write_bytes(data)
        try:
            load()
            outcomes["loaded"] += 1
        except ElmoError as e:
            message = str(e)
            assert "\n" not in message and "Traceback" not in message, (i, message)
            outcomes["refused"] += 1
        except Exception as e:
            pytest.fail(f"mutation {i} (seed {seed}) of {target.name}: {type(e).__name__}: {e}")
    target.write_bytes(original)
    assert outcomes["refused"] > count // 2, outcomes  # most damage is noticed
    return outcomes


@pytest.fixture(scope="module")
def micro_dir(tmp_path_factory):
    from conftest import train_micro_run

    from elmo.cli import main
    root = tmp_path_factory.mktemp("fuzz")
    run, _ = train_micro_run(root, steps=1)
    assert main(["export", str(run), "-o", str(root / "model")]) == 0
    return root


def test_fuzz_task_model(tmp_path):
    from elmo.tasks import load_task_model
    path = tiny_task_model(tmp_path / "m.pt")
    assert_damage_refused(path, lambda: load_task_model(path), 300, seed=1)


def test_fuzz_training_checkpoint_and_export(micro_dir, tmp_path):
    from elmo.training.checkpoint import latest_checkpoint
    from elmo.training.export import load_run
    run = tmp_path / "run"
    shutil.copytree(micro_dir / "run", run)
    path = latest_checkpoint(run)
    assert_damage_refused(path, lambda: load_run(run, path), 300, seed=2)


def test_fuzz_run_json(micro_dir, tmp_path):
    from elmo.training.settings import read_run_file
    path = tmp_path / "run.json"
    shutil.copy(micro_dir / "run" / "run.json", path)
    assert_damage_refused(path, lambda: read_run_file(path), 400, seed=3)


@pytest.mark.parametrize("name", ["encoder.pkl", "token_embedder.pkl", "arch.json", "config.json", "char.dic", "word.dic"])
def test_fuzz_manylangs_files(tmp_path, name):
    from elmo.formats.manylangs import load_manylangs
    d = tmp_path / "ml"
    shutil.copytree(MANYLANGS, d)
    assert_damage_refused(d / name, lambda: load_manylangs(d), 200, seed=4)


@pytest.mark.parametrize("name", ["options.json", "vocab.txt"])
def test_fuzz_model_dir_text_files(micro_dir, tmp_path, name):
    from elmo.files.layout import ModelFiles
    from elmo.training.export import load_model_dir
    d = tmp_path / "model"
    shutil.copytree(micro_dir / "model", d)
    assert_damage_refused(d / name, lambda: load_model_dir(ModelFiles.from_dir(d)), 300, seed=5)


def test_fuzz_lab_preset_json(tmp_path):
    from elmo.lab.task_models import load_preset
    path = tmp_path / "mix.json"
    path.write_text(json.dumps({"input": {"weights": [0.2, 0.3, 0.5], "gamma": 1.5}}))
    assert_damage_refused(path, lambda: load_preset("NER", path), 300, seed=6)


def test_torch_is_not_given_the_unsafe_load(tmp_path, monkeypatch):
    """Belt and braces: every torch.load in the package passes weights_only=True."""
    calls = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k.get("weights_only")) or real(*a, **k))
    from elmo.tasks import load_task_model
    load_task_model(tiny_task_model(tmp_path / "m.pt"))
    assert calls == [True]


def test_fuzz_hdf5_weights_and_softmax(micro_dir, tmp_path):
    from elmo.files.layout import ModelFiles
    from elmo.training.export import load_model_dir
    d = tmp_path / "model"
    shutil.copytree(micro_dir / "model", d)
    assert_damage_refused(d / "weights.hdf5", lambda: load_model_dir(ModelFiles.from_dir(d)), 150, seed=8)
    assert_damage_refused(d / "softmax.hdf5", lambda: load_model_dir(ModelFiles.from_dir(d)), 150, seed=9)
