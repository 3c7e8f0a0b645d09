"""Issue #47, the second adversarial round: no file runs code, nothing non-finite passes, every loader
turns bad bytes into one clean error (docs/reliability.md lists every case)."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch

from elmo.errors import ElmoError, ModelFileError
from elmo.tasks.layers import ModelConfig
from elmo.tasks.model_file import CHECKPOINT_FORMAT, task_model_state, write_task_model
from elmo.tasks.train import build_model

MANYLANGS = Path(__file__).parent / "fixtures" / "manylangs" / "word_char"

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_task_model(path: Path, **overrides) -> Path:
    """A saved tagger of a few hundred weights (no biLM), as `elmo task train --save` writes it."""
    cfg = ModelConfig(kind="tagger", labels=["O", "B-PER", "I-PER"], vocab_size=4, static_dim=0, char_filters=4,
                      char_dim=3, hidden=5, dropout=0.0, crf=True)
    torch.manual_seed(0)
    model = build_model(cfg)
    state = task_model_state("ner", cfg, model.state_dict(), ["<pad>", "<unk>", "a", "b"], None, None, model.mixes(),
                             {"dev": {"f1": 1.0}, "test": {"f1": 1.0}, "best_epoch": 1, "seed": 1, "train_fraction": 1.0})
    state.update(overrides)
    write_task_model(path, state)
    return path


class RunsCode:
    """Unpickling this calls open(marker, "w"): a file appears if any loader runs code from a file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted_files(folder: Path, marker: Path, shape: dict) -> list[Path]:
    """The same payload three ways: inside a torch.save zip, as a bare pickle, as protocol 0 text."""
    folder.mkdir(parents=True, exist_ok=True)
    payload = dict(shape, evil=RunsCode(marker))
    zipped, bare, text = folder / "zip.pt", folder / "bare.pt", folder / "text.pt"
    torch.save(payload, zipped)
    bare.write_bytes(pickle.dumps(payload, protocol=2))
    text.write_bytes(pickle.dumps(RunsCode(marker), protocol=0))
    return [zipped, bare, text]


def _task_loaders():
    from elmo.lab.task_models import load_preset, tagger_view
    from elmo.tasks import load_tagger, load_task_model
    return [load_tagger, load_task_model, tagger_view, lambda p: load_preset("NER", p)]


def test_no_loader_runs_code_from_a_file(tmp_path):
    from elmo.manylangs import load_manylangs
    from elmo.training.checkpoint import load_checkpoint

    marker = tmp_path / "ran"
    task_files = crafted_files(tmp_path / "task", marker, {"format": CHECKPOINT_FORMAT})
    for path in task_files:
        for load in _task_loaders():
            with pytest.raises(ElmoError):
                load(path)
    for path in crafted_files(tmp_path / "ckpt", marker, {"model": {}, "step": 1}):
        with pytest.raises(ModelFileError, match="checkpoint"):
            load_checkpoint(path)
    for name in ("encoder.pkl", "token_embedder.pkl"):
        for crafted in crafted_files(tmp_path / f"ml-{name}", marker, {"x": torch.zeros(1)}):
            d = tmp_path / f"manylangs-{name}-{crafted.stem}"
            shutil.copytree(MANYLANGS, d)
            shutil.copy(crafted, d / name)
            with pytest.raises(ModelFileError, match=name):
                load_manylangs(d)
    assert not marker.exists(), "a loader ran code from a crafted file"


def test_crafted_task_model_refusal_is_one_line_naming_the_file(tmp_path):
    from elmo.tasks import load_tagger

    zipped = crafted_files(tmp_path, tmp_path / "ran", {"format": CHECKPOINT_FORMAT})[0]
    with pytest.raises(ModelFileError) as info:
        load_tagger(zipped)
    message = str(info.value)
    assert message.startswith(str(zipped)) and "refused" in message and "\n" not in message
    assert "weights_only=False" not in message  # never advise the unsafe load


def test_lab_refuses_a_crafted_ner_model_and_preset(tmp_path, capsys):
    from elmo.cli import main

    zipped = crafted_files(tmp_path, tmp_path / "ran", {"format": CHECKPOINT_FORMAT})[0]
    pytest.importorskip("uvicorn")
    for flags in (["--ner", str(zipped)], ["--preset", f"NER={zipped}"]):
        assert main(["lab", "--no-browser", "--port", "0", "--reference-size", "small", *flags]) == 2
        err = capsys.readouterr().err
        assert "refused" in err and "Traceback" not in err
    assert not (tmp_path / "ran").exists()


def test_saved_task_model_loads_with_weights_only_and_predicts(tmp_path):
    from elmo.tasks import load_tagger

    path = tiny_task_model(tmp_path / "ner.pt")
    assert torch.load(path, weights_only=True)["format"] == CHECKPOINT_FORMAT
    tagger = load_tagger(path)
    assert len(tagger.predict(["a", "b", "c"])) == 3


def test_old_task_model_format_is_refused_with_how_to_resave(tmp_path):
    from elmo.tasks import load_tagger
    from elmo.tasks.model_file import main as resave

    old = tiny_task_model(tmp_path / "old.pt", format="elmo-task-model/1")
    with pytest.raises(ModelFileError, match=r"python -m elmo\.tasks\.model_file"):
        load_tagger(old)
    assert resave([str(old), str(tmp_path / "new.pt")]) == 0
    assert len(load_tagger(tmp_path / "new.pt").predict(["a"])) == 1
    assert resave([str(old), str(old)]) == 2  # never over its own input


@pytest.mark.parametrize("bad", [
    {"config": {"kind": "tagger"}},
    {"config": "not a dict"},
    {"vocab": [1, 2, 3, 4]},
    {"state_dict": {"x": torch.zeros(2)}},
    {"task": 5},
    {"elmo": {"options_file": 3}},
    {"metrics": {"dev": {"f1": float("nan")}}},
])
def test_task_model_with_bad_fields_is_one_clean_error(tmp_path, bad):
    from elmo.tasks import load_task_model

    path = tiny_task_model(tmp_path / "bad.pt", **bad)
    with pytest.raises(ModelFileError, match=re.escape(str(path))):
        load_task_model(path)


@pytest.mark.parametrize("field,value", [("hidden", 10**9), ("vocab_size", -1), ("dropout", float("nan")),
                                         ("num_layers", 10**6), ("kind", "parser"), ("crf", "yes")])
def test_task_model_config_out_of_range_allocates_nothing(tmp_path, field, value):
    from elmo.tasks import load_task_model

    path = tiny_task_model(tmp_path / "cfg.pt")
    state = torch.load(path, weights_only=True)
    state["config"][field] = value
    torch.save(state, path)
    with pytest.raises(ModelFileError, match=f"config|{field}"):
        load_task_model(path)


def test_task_model_weights_that_disagree_with_config(tmp_path):
    from elmo.tasks import load_task_model

    path = tiny_task_model(tmp_path / "cfg.pt")
    state = torch.load(path, weights_only=True)
    state["config"]["hidden"] = 7
    torch.save(state, path)
    with pytest.raises(ModelFileError, match="does not match"):
        load_task_model(path)
    state["config"]["hidden"] = 5
    name = next(iter(state["state_dict"]))
    state["state_dict"][name] = state["state_dict"][name].fill_(float("inf"))
    torch.save(state, path)
    with pytest.raises(ModelFileError, match="NaN or infinite"):
        load_task_model(path)


def test_json_is_plain(tmp_path):
    path = tiny_task_model(tmp_path / "m.pt")
    state = torch.load(path, weights_only=True)
    json.dumps({k: v for k, v in state.items() if k != "state_dict"})  # nothing but plain data
