"""Issue #47, the second adversarial round: no file runs code, nothing non-finite passes, every loader
turns bad bytes into one clean error (docs/reliability.md lists every case)."""

from __future__ import annotations

import json
import os
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
    from elmo.formats.manylangs import load_manylangs
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
    pytest.importorskip("uvicorn", reason="elmo lab needs the lab extra (uvicorn): pip install -e '.[lab]'")
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
    meta = {k: v for k, v in state.items() if k != "state_dict"}
    assert meta and json.loads(json.dumps(meta)) == meta  # nothing but plain data: JSON gives it back unchanged


# ---- 2. no command writes over its own input ------------------------------------------------------------------

@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    """A two-step training run of a micro biLM (seconds): what export, resume and perplexity read."""
    from conftest import train_micro_run
    return train_micro_run(tmp_path_factory.mktemp("micro"), steps=2)


def _refused(capsys, argv, *needles):
    from elmo.cli import main
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def test_no_command_writes_over_its_input(tmp_path, capsys, micro_run, one_thread):
    run, flags = micro_run
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\nd e\n", encoding="utf-8")
    before = corpus.read_bytes()
    linked = tmp_path / "linked.txt"
    linked.hardlink_to(corpus)
    _refused(capsys, ["vocab", str(corpus), "-o", str(corpus)], "is CORPUS itself")
    _refused(capsys, ["vocab", str(tmp_path / "*.txt"), "-o", str(linked)], "is CORPUS itself")
    _refused(capsys, ["embed", str(corpus), str(corpus), "--overwrite"], "is INPUT itself")
    _refused(capsys, ["task", "train", "ner", "--train", str(corpus), "--dev", str(corpus), "--test", str(corpus),
                      "--model", "none", "--out", str(corpus)], "is --train itself")
    options = run / "options.json"
    snapshot = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    _refused(capsys, ["export", str(run), "-o", str(run), "--overwrite"], "is RUN_DIR itself")
    _refused(capsys, ["export", str(run), "-o", str(run / "model"), "--overwrite"], "lies inside RUN_DIR")
    _refused(capsys, ["export", str(run), "-o", str(run.parent), "--overwrite"], "holds RUN_DIR")
    own = [str(corpus) if i == 1 else f for i, f in enumerate(flags)]  # --train CORPUS
    _refused(capsys, ["train", *own, "--out", str(corpus.parent), "--max-steps", "1"], "holds --train")
    assert corpus.read_bytes() == before and options.exists()
    assert snapshot == {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}


def test_failed_export_overwrite_leaves_the_folder_as_it_was(tmp_path, monkeypatch, micro_run, one_thread):
    import elmo.training.export as export
    from elmo.cli import main

    run, _ = micro_run
    out = tmp_path / "model"
    out.mkdir()
    (out / "README").write_text("mine")
    assert main(["export", str(run), "-o", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fails(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "save_softmax", fails)  # after weights.hdf5 and options.json are written
    with pytest.raises(OSError):
        export.export_run(run, out, overwrite=True, float16=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left
    monkeypatch.undo()
    assert main(["export", str(run), "-o", str(out), "--overwrite", "--float16"]) == 0
    assert (out / "README").read_text() == "mine" and (out / "weights.hdf5").read_bytes() != before["weights.hdf5"]


# ---- 3. nothing non-finite passes silently ----------------------------------------------------------------------

def manylangs_copy(tmp_path: Path, name: str = "ml") -> Path:
    d = tmp_path / name
    shutil.copytree(MANYLANGS, d)
    (d / "expected.npz").unlink()
    return d


def _edit_arch(d: Path, section: str, key: str, value) -> None:
    arch = json.loads((d / "arch.json").read_text())
    arch[section][key] = value
    (d / "arch.json").write_text(json.dumps(arch))  # json writes NaN / Infinity as Python reads them


@pytest.mark.parametrize("key,value", [("cell_clip", float("nan")), ("proj_clip", float("nan")),
                                       ("cell_clip", float("inf")), ("proj_clip", -1.0)])
def test_manylangs_clip_that_is_not_finite_is_refused(tmp_path, key, value):
    from elmo.formats.manylangs import load_manylangs

    d = manylangs_copy(tmp_path)
    _edit_arch(d, "encoder", key, value)
    with pytest.raises(ModelFileError, match=f"encoder.{key}"):
        load_manylangs(d)


def test_non_finite_weights_are_refused_by_every_loader(tmp_path, micro_run):
    import h5py

    from elmo import Elmo
    from elmo.formats.manylangs import load_manylangs
    from elmo.training.checkpoint import latest_checkpoint, load_checkpoint
    from elmo.training.softmax import load_softmax

    d = manylangs_copy(tmp_path)
    state = torch.load(d / "encoder.pkl", weights_only=True)
    next(iter(state.values()))[0] = float("nan")
    torch.save(state, d / "encoder.pkl")
    with pytest.raises(ModelFileError, match="NaN or infinite"):
        load_manylangs(d)

    run, _ = micro_run
    ckpt = load_checkpoint(latest_checkpoint(run))
    name = next(iter(ckpt["model"]))
    ckpt["model"][name] = ckpt["model"][name].clone().fill_(float("inf"))
    torch.save(ckpt, tmp_path / "inf.pt")
    with pytest.raises(ModelFileError, match="NaN or infinite"):
        load_checkpoint(tmp_path / "inf.pt")

    with h5py.File(tmp_path / "softmax.hdf5", "w") as f:
        f["W"], f["b"] = torch.full((3, 2), float("nan")).numpy(), torch.zeros(3).numpy()
    with pytest.raises(ModelFileError, match="'W' contains NaN"):
        load_softmax(tmp_path / "softmax.hdf5", 3, 2)

    elmo = Elmo.from_pretrained(str(MANYLANGS), num_output_representations=1)
    good = {k: v.clone() for k, v in elmo.state_dict().items()}
    bad = dict(good)
    key = next(k for k, v in good.items() if v.is_floating_point() and v.numel() > 1)
    bad[key] = torch.full_like(good[key], float("nan"))
    with pytest.raises(ValueError, match="NaN or infinite"):
        elmo.load_state_dict(bad)
    assert all(torch.equal(v, good[k]) for k, v in elmo.state_dict().items())


def test_failed_strict_load_state_dict_leaves_the_module_as_it_was():
    from elmo import Elmo

    elmo = Elmo.from_pretrained(str(MANYLANGS), num_output_representations=1)
    good = {k: v.clone() for k, v in elmo.state_dict().items()}
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in good.items()}
    changed.pop(next(iter(changed)))  # one key missing: strict loading fails after copying the others
    with pytest.raises(RuntimeError):
        elmo.load_state_dict(changed)
    assert all(torch.equal(v, good[k]) for k, v in elmo.state_dict().items())


def test_float16_export_refuses_values_beyond_its_range_unless_clipped(tmp_path, capsys, micro_run, one_thread):
    import h5py
    import numpy as np

    from elmo.cli import main
    from elmo.training.checkpoint import latest_checkpoint, load_checkpoint

    run, _ = micro_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    path = latest_checkpoint(copy)
    ckpt = load_checkpoint(path)
    name = next(k for k in ckpt["model"] if "softmax" not in k and ckpt["model"][k].is_floating_point())
    ckpt["model"][name] = ckpt["model"][name].clone()
    ckpt["model"][name].view(-1)[0] = 1e6
    torch.save(ckpt, path)
    for flag in ("--float16", "--softmax-float16"):
        if flag == "--softmax-float16":
            ckpt["model"]["softmax.W"].view(-1)[0] = -7e4
            torch.save(ckpt, path)
        err = _refused(capsys, ["export", str(copy), "-o", str(tmp_path / "m16"), flag], "65504", "--clip-float16")
        assert not (tmp_path / "m16").exists(), err
    assert main(["export", str(copy), "-o", str(tmp_path / "m16"), "--float16", "--clip-float16"]) == 0
    for file in ("weights.hdf5", "softmax.hdf5"):
        with h5py.File(tmp_path / "m16" / file) as f:
            f.visititems(lambda n, obj: isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f"
                         and np.testing.assert_array_equal(np.isfinite(obj[...]), True))


def test_json_output_is_always_json(tmp_path, capsys, monkeypatch, micro_run, one_thread):
    import elmo.training.perplexity as scoring
    from elmo.cli import main
    from elmo.files.fileio import json_text

    assert json.loads(json_text({"a": float("inf"), "b": [float("nan"), 1.5]})) == {"a": None, "b": [None, 1.5]}
    run, _ = micro_run
    monkeypatch.setattr(scoring, "perplexity", lambda *a, **k: {"forward": float("inf"), "backward": float("nan"),
                                                                 "average": float("inf"), "tokens": 3})
    corpus = tmp_path / "t.txt"
    corpus.write_text("a b\n")
    assert main(["perplexity", str(run), "--test", str(corpus), "--json", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["forward"] is None and "Infinity" not in out and "NaN" not in out


# ---- 4. values that mean nothing are refused -----------------------------------------------------------------

@pytest.mark.parametrize("flag", [["--max-steps", "0"], ["--max-steps", "-1"], ["--batch-size", "100000000"],
                                  ["--batch-size", "0"], ["--lr", "inf"], ["--lr", "nan"], ["--epochs", "nan"],
                                  ["--epochs", "0"], ["--dropout", "nan"], ["--clip-norm", "inf"],
                                  ["--unroll-steps", "-3"], ["--max-minutes", "nan"], ["--negatives", "0"]])
def test_training_values_that_mean_nothing_are_refused(tmp_path, capsys, micro_run, flag):
    _, flags = micro_run
    _refused(capsys, ["train", *flags, "--out", str(tmp_path / "run"), *flag], flag[0])
    assert not (tmp_path / "run").exists()


def test_perplexity_batch_beyond_memory_is_refused(capsys, micro_run, tmp_path):
    run, _ = micro_run
    corpus = tmp_path / "t.txt"
    corpus.write_text("a b\n")
    _refused(capsys, ["perplexity", str(run), "--test", str(corpus), "--batch-size", "100000000"], "--batch-size")


@pytest.mark.parametrize("section,key,value", [
    ("encoder", "dim", 10**9), ("encoder", "n_layers", 10**6), ("encoder", "projection_dim", 2**31),
    ("token_embedder", "filters", [[1, 2**31]]), ("token_embedder", "max_characters_per_token", 10**6),
    ("token_embedder", "n_highway", 10**5), ("token_embedder", "char_dim", 10**7), ("encoder", "dim", 2.5),
])
def test_manylangs_sizes_beyond_the_files_are_refused_before_allocating(tmp_path, section, key, value):
    from elmo.formats.manylangs import load_manylangs

    d = manylangs_copy(tmp_path)
    _edit_arch(d, section, key, value)
    with pytest.raises(ModelFileError) as info:
        load_manylangs(d)
    assert "\n" not in str(info.value) and (key in str(info.value) or "calls for" in str(info.value))


# ---- 5. every loader turns any bytes into one clean error (the fuzz test is tests/test_fuzz_loaders.py) --------

def test_named_bad_files_are_one_line_naming_the_file(tmp_path, capsys, micro_run, one_thread):
    from elmo.training.checkpoint import checkpoint_path, latest_checkpoint

    run, _ = micro_run
    text, noise = tmp_path / "text.pt", tmp_path / "noise.pt"
    text.write_text("this is a text file\n" * 10)
    noise.write_bytes(random_bytes(4096))
    for bad in (text, noise):
        _refused(capsys, ["export", str(run), "-o", str(tmp_path / "m"), "--checkpoint", str(bad)], str(bad))
        d = manylangs_copy(tmp_path, f"ml-{bad.stem}")
        shutil.copy(bad, d / "encoder.pkl")
        _refused(capsys, ["embed", "--model", str(d), str(bad), str(tmp_path / "o.hdf5")], "encoder.pkl")
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    newest = checkpoint_path(copy, 999)
    shutil.copy(text, newest)
    _refused(capsys, ["export", str(copy), "-o", str(tmp_path / "m2")], str(newest))
    _refused(capsys, ["train", "--out", str(copy), "--resume", "--no-progress"], str(newest))
    newest.unlink()
    run_json = copy / "run.json"
    good = run_json.read_bytes()
    for damaged, needle in ((good[: len(good) // 2], "not valid JSON"), (b"\xff\xfe" + good, "not UTF-8"),
                            (b"[1, 2]", "JSON object"), (good.replace(b'"batching": "sentence"', b'"batching": 5'),
                                                         "batching")):
        run_json.write_bytes(damaged)
        _refused(capsys, ["train", "--out", str(copy), "--resume", "--no-progress"], "run.json", needle)
    run_json.write_bytes(good)
    options = json.loads((copy / "options.json").read_text())
    options["lstm"]["dim"] = 48  # a checkpoint of another architecture
    (copy / "options.json").write_text(json.dumps(options))
    _refused(capsys, ["export", str(copy), "-o", str(tmp_path / "m3")], str(latest_checkpoint(copy)),
             "does not fit this run's architecture")


def random_bytes(n: int) -> bytes:
    import random
    return bytes(random.Random(0).randrange(256) for _ in range(n))


def test_resume_names_the_flags_the_user_gave(tmp_path, capsys, micro_run, one_thread):
    run, _ = micro_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    _refused(capsys, ["train", "--out", str(copy), "--resume", "--full-softmax", "--no-progress"],
             "--full-softmax: the run")
    _refused(capsys, ["train", "--out", str(copy), "--resume", "--no-first-layer-dropout", "--no-progress"],
             "--no-first-layer-dropout: the run")


# ---- 6. small ones ---------------------------------------------------------------------------------------------

def test_a_leading_bom_is_not_part_of_the_first_token(tmp_path):
    from elmo.cli import main
    from elmo.files.fileio import iter_lines, open_text

    corpus = tmp_path / "bom.txt"
    corpus.write_bytes("\ufeffhello world\nhello\n".encode())
    assert [line for _, line in iter_lines(corpus)] == ["hello world", "hello"]
    with open_text(corpus) as f:
        assert f.readline() == "hello world\n"
    assert main(["vocab", str(corpus), "-o", str(tmp_path / "vocab.txt")]) == 0
    assert "\ufeff" not in (tmp_path / "vocab.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("layer", ["top", 1.5, None, True, 7, -3])
def test_sents2elmo_bad_output_layer_says_what_is_allowed(layer):
    from elmo import Embedder

    embedder = Embedder.from_model(str(MANYLANGS))
    with pytest.raises(ValueError, match="output_layer must be -1 \\(mean\\), -2 \\(all\\)"):
        embedder.sents2elmo([["a", "b"]], output_layer=layer)


def test_a_damaged_lab_cache_is_rebuilt(tmp_path):
    from conftest import ALLENNLP, need

    from elmo.formats.weights import load_bilm
    from elmo.lab.reference import build_reference

    bilm = load_bilm(need(ALLENNLP) / "options.json", ALLENNLP / "lm_weights.hdf5")
    first = build_reference(bilm, None, cache_dir=tmp_path, log=lambda m: None)
    (cache,) = tmp_path.glob("reference-*.npz")
    good = cache.read_bytes()
    for damaged in (good[: len(good) // 2], b"", b"PK\x03\x04" + bytes(100), good[:30] + bytes(64) + good[94:]):
        cache.write_bytes(damaged)
        again = build_reference(bilm, None, cache_dir=tmp_path, log=lambda m: None)
        assert again.layers.shape == first.layers.shape


# =================================================================================================================
# Issue #56, the third round (docs/reliability.md, cases 7.x and on)
# ---- #56.9 model files read only themselves --------------------------------------------------------------------

def micro_model(folder: Path) -> tuple[Path, Path]:
    """options.json + weights.hdf5 of the tests' micro biLM (random weights), written by save_bilm."""
    from conftest import MICRO

    from elmo.formats.weights import save_bilm
    from elmo.model.bilm import BiLM
    from elmo.model.options import BiLMConfig

    torch.manual_seed(0)
    options, weights = folder / "options.json", folder / "weights.hdf5"
    save_bilm(BiLM(BiLMConfig.from_options(MICRO)), options, weights)
    return options, weights


SECRET = b"root:x:0:0:root:/root:/bin/bash\n" * 8


def borrow_data(h5: Path, name: str, kind: str, elsewhere: Path) -> None:
    """Replace dataset `name` of `h5` by one whose bytes come from `elsewhere` (the HDF5 feature `kind`)."""
    import h5py
    import numpy as np

    with h5py.File(h5, "a") as f:
        shape, dtype = f[name].shape, f[name].dtype
        del f[name]
        if kind == "external storage":
            elsewhere.write_bytes(SECRET * (1 + int(np.prod(shape)) * dtype.itemsize // len(SECRET)))
            f.create_dataset(name, shape=shape, dtype=dtype, external=[(str(elsewhere), 0, h5py.h5f.UNLIMITED)])
            return
        with h5py.File(elsewhere, "w") as other:
            values = np.frombuffer(SECRET * 64, dtype=dtype)[: int(np.prod(shape))]
            other.create_dataset("data", data=values.reshape(shape))
        if kind == "external link":
            f[name] = h5py.ExternalLink(str(elsewhere), "data")
        else:
            layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
            layout[...] = h5py.VirtualSource(str(elsewhere), "data", shape=shape)
            f.create_virtual_dataset(name, layout)


BORROWED = {kind: kind for kind in ("external storage", "external link", "virtual dataset")}


@pytest.mark.parametrize("kind", list(BORROWED))
def test_weights_that_read_another_file_are_refused(tmp_path, kind):
    from elmo.formats.weights import load_bilm

    options, weights = micro_model(tmp_path)
    borrow_data(weights, "CNN/b_cnn_0", kind, tmp_path / "passwd")
    with pytest.raises(ModelFileError, match=f"weights.hdf5: .*{BORROWED[kind]}.*refused") as e:
        load_bilm(options, weights)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", list(BORROWED))
def test_softmax_that_reads_another_file_is_refused(tmp_path, kind):
    import h5py
    import numpy as np

    from elmo.training.softmax import load_softmax

    path = tmp_path / "softmax.hdf5"
    with h5py.File(path, "w") as f:
        f["W"], f["b"] = np.zeros((4, 2), np.float32), np.zeros(4, np.float32)
    borrow_data(path, "b", kind, tmp_path / "passwd")
    with pytest.raises(ModelFileError, match=f"softmax.hdf5: .*{BORROWED[kind]}"):
        load_softmax(path, 4, 2)


@pytest.mark.parametrize("kind", list(BORROWED))
def test_feature_and_part_files_that_read_another_file_are_refused(tmp_path, kind):
    import h5py
    import numpy as np

    from elmo.errors import InputError
    from elmo.tasks.features import FeatureCache

    path = tmp_path / "cache.hdf5"
    with h5py.File(path, "w") as f:
        f["0"] = np.zeros((3, 2, 4), np.float32)
    borrow_data(path, "0", kind, tmp_path / "passwd")
    with pytest.raises(InputError, match=BORROWED[kind]):
        FeatureCache(path, [2])


def test_an_external_link_in_a_subgroup_is_found(tmp_path):
    from elmo.formats.weights import load_bilm

    options, weights = micro_model(tmp_path)
    borrow_data(weights, "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/B", "external link", tmp_path / "other.h5")
    with pytest.raises(ModelFileError, match="'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/B' is an HDF5 external link"):
        load_bilm(options, weights)


def test_shapes_are_compared_before_the_model_is_allocated(tmp_path, monkeypatch):
    """1.5e9 parameters in options.json with a micro weight file: refused, and no real BiLM was built."""
    import elmo.formats.weights as weights_module

    options, weights = micro_model(tmp_path)
    raw = json.loads(options.read_text())
    raw["lstm"].update(dim=40_000, projection_dim=1000)
    options.write_text(json.dumps(raw))
    built = []
    real = weights_module.BiLM
    monkeypatch.setattr(weights_module, "BiLM", lambda *a, **k: built.append(torch.empty(0).device) or real(*a, **k))
    with pytest.raises(ModelFileError, match="weights.hdf5: dataset '.*' has shape .* expected .* from the options"):
        weights_module.load_bilm(options, weights)
    assert built and all(d.type == "meta" for d in built)


# ---- #56.1/3/4/8/10 downloads: verified before they count, bounded in time, never through a link ----------------

from hub_server import serve  # noqa: E402
from test_hub_download import hub_env  # noqa: E402,F401 (fixture)


def weights_bytes(tmp_path: Path) -> bytes:
    """A small HDF5 file shaped like a biLM's weights (it has RNN_0), as bytes to serve."""
    import h5py
    import numpy as np

    path = tmp_path / "served.hdf5"
    with h5py.File(path, "w") as f:
        f["RNN_0/W"] = np.arange(30000, dtype=np.float32)
        f["char_embed"] = np.zeros((262, 4), np.float32)
    return path.read_bytes()


def entry_of(url: str):
    from elmo.hub.cache import CacheEntry
    return CacheEntry.for_url(url)


def _nothing_cached(url: str) -> None:
    entry = entry_of(url)
    assert not entry.path.exists() and not entry.part_path.exists() and not entry.record_path.exists()


@pytest.mark.parametrize("fault,message", [("long", "is not an HDF5 weights.hdf5|damaged HDF5"),
                                           ("html", "is an HTML page")])
def test_a_download_that_is_not_what_it_claims_is_not_cached(hub_env, tmp_path, fault, message):
    from elmo.errors import DownloadError
    from elmo.hub.fetch import fetch

    with serve({"/m/weights.hdf5": weights_bytes(tmp_path)}) as server:
        url = server.url("/m/weights.hdf5")
        server.faults["/m/weights.hdf5"] = fault
        with pytest.raises(DownloadError, match=f"^{re.escape(url)}: the downloaded file ({message}).*it was not kept"):
            fetch(url)
        _nothing_cached(url)
        del server.faults["/m/weights.hdf5"]
        assert fetch(url).read_bytes() == server.files["/m/weights.hdf5"]  # the next try is clean


def test_json_and_archives_are_checked_before_they_count(hub_env, tmp_path):
    import io
    import tarfile

    from elmo.errors import DownloadError
    from elmo.hub.fetch import fetch

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as t:
        info = tarfile.TarInfo("model/weights.hdf5")
        data = bytes(range(256)) * 2000
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    with serve({"/options.json": b'{"lstm": ', "/m.tar.gz": archive[: len(archive) // 2]}) as server:
        for path, message in (("/options.json", "is not a readable options.json"),
                              ("/m.tar.gz", "is not a readable m.tar.gz")):
            with pytest.raises(DownloadError, match=message):
                fetch(server.url(path))
            _nothing_cached(server.url(path))


def test_a_trickle_is_stopped_by_the_rate_floor(hub_env, tmp_path, monkeypatch):
    from elmo.errors import DownloadError
    from elmo.hub.fetch import fetch

    monkeypatch.setenv("ELMO_DOWNLOAD_MIN_RATE", "1000")
    monkeypatch.setenv("ELMO_DOWNLOAD_RATE_GRACE", "1")
    with serve({"/m/blob.bin": bytes(100_000)}) as server:
        server.faults["/m/blob.bin"], server.trickle_seconds = "trickle", 0.2
        url = server.url("/m/blob.bin")
        with pytest.raises(DownloadError, match="bytes/s over 1 s, below the floor of 1,000 .*ELMO_DOWNLOAD_MIN_RATE"):
            fetch(url)


HOLD_LOCK = """
import sys, time
from elmo.hub.cache import CacheEntry
from elmo.hub.download import entry_lock
with entry_lock(CacheEntry.for_url(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_stalled_lock_is_waited_for_a_bounded_time_naming_its_process(hub_env, monkeypatch):
    import subprocess
    import sys

    from conftest import subprocess_env

    from elmo.errors import DownloadError
    from elmo.hub.fetch import fetch

    monkeypatch.setenv("ELMO_LOCK_WAIT", "1")
    with serve({"/m/blob.bin": bytes(1000)}) as server:
        url = server.url("/m/blob.bin")
        holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, url], stdout=subprocess.PIPE, text=True,
                                  env={**subprocess_env(), "ELMO_CACHE": str(hub_env / "elmo-cache")})
        try:
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(DownloadError, match=f"process {holder.pid} on .* has held .*/.lock for more than 1 s; "
                               "it may be stuck: stop it, or set ELMO_LOCK_WAIT"):
                fetch(url)
        finally:
            holder.kill()
            holder.wait()
        assert fetch(url).read_bytes() == bytes(1000)  # the lock of a dead process is free


@pytest.mark.parametrize("planted", ["blob.bin.part", "blob.bin.part.json", "blob.bin", "blob.bin.json", ".lock"])
def test_a_link_planted_in_the_cache_is_never_written_through(hub_env, tmp_path, planted):
    from elmo.hub.fetch import fetch

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    with serve({"/m/blob.bin": bytes(range(256)) * 40}) as server:
        url = server.url("/m/blob.bin")
        entry = entry_of(url)
        entry.folder.mkdir(parents=True)
        (entry.folder / planted).symlink_to(victim)
        path = fetch(url)
        assert victim.read_text() == "precious\n"
        assert not path.is_symlink() and path.read_bytes() == server.files["/m/blob.bin"]
        assert not any(p.is_symlink() for p in entry.folder.iterdir())


def test_a_linked_cache_folder_is_refused(hub_env, tmp_path):
    from elmo.errors import DownloadError
    from elmo.hub.fetch import fetch

    with serve({"/m/blob.bin": bytes(10)}) as server:
        url = server.url("/m/blob.bin")
        entry = entry_of(url)
        entry.folder.parent.mkdir(parents=True)
        (tmp_path / "elsewhere").mkdir()
        entry.folder.symlink_to(tmp_path / "elsewhere")
        with pytest.raises(DownloadError, match="is a link"):
            fetch(url)
        assert not list((tmp_path / "elsewhere").iterdir())


def test_download_force_fetches_again(hub_env, capsys):
    from elmo.cli import main

    with serve({"/m/vocab.txt": b"a\nb\n"}) as server:
        url = server.url("/m/vocab.txt")
        assert main(["download", url]) == 0 and main(["download", url]) == 0
        assert server.gets["/m/vocab.txt"] == 1
        assert main(["download", url, "--force"]) == 0
        assert server.gets["/m/vocab.txt"] == 2


def zip_bytes(members: list[tuple[str, bytes]]) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in members:
            z.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("members,message", [
    ([("m/vocab.txt", b"a"), ("m/vocab.txt/x", b"1")], "member 'm/vocab.txt/x' cannot be unpacked"),
    ([("m/" + "n" * 300, b"1")], "member 'm/nnnn.*' cannot be unpacked .*File name too long"),
])
def test_an_archive_that_cannot_be_unpacked_leaves_the_cache(hub_env, members, message):
    from elmo.hub.published import fetch_model_url

    with serve({"/m.zip": zip_bytes(members)}) as server:
        url = server.url("/m.zip")
        with pytest.raises(ModelFileError, match=f"m.zip: {message}.*removed from the cache, run again"):
            fetch_model_url(url)
        entry = entry_of(url)
        assert not entry.path.exists() and not entry.extracted.exists()
        assert not [p for p in entry.folder.iterdir() if p.name.startswith(".extract-")]


def test_a_zip_with_a_bad_crc_is_not_cached(hub_env):
    from elmo.errors import DownloadError
    from elmo.hub.published import fetch_model_url

    data = bytearray(zip_bytes([("m/options.json", b"{" + b"x" * 200 + b"}")]))
    at = data.index(b"xxxx")
    data[at] = ord("y")  # the stored CRC no longer matches
    with serve({"/m.zip": bytes(data)}) as server:
        with pytest.raises(DownloadError, match="m.zip: the downloaded file is a zip archive whose member "
                           "'m/options.json' is damaged"):
            fetch_model_url(server.url("/m.zip"))
        _nothing_cached(server.url("/m.zip"))


def test_a_killed_unpack_is_cleaned_by_the_next_run(hub_env, tmp_path):
    from elmo.hub.published import fetch_model_url

    options, weights = micro_model(tmp_path)
    with serve({"/m.zip": zip_bytes([("m/options.json", options.read_bytes()),
                                     ("m/weights.hdf5", weights.read_bytes())])}) as server:
        url = server.url("/m.zip")
        first = fetch_model_url(url)
        entry = entry_of(url)
        shutil.rmtree(entry.extracted)
        (entry.folder / ".extract-killed").mkdir()
        (entry.folder / ".extract-killed" / "weights.hdf5").write_bytes(b"half")
        (entry.folder / ".m.zip.json.0123abcd.tmp").write_bytes(b"{")
        assert fetch_model_url(url) == first
        assert sorted(p.name for p in entry.folder.iterdir()) == [".lock", "extracted", "m.zip", "m.zip.json"]


def test_a_cached_html_page_recorded_as_complete_is_fetched_again(hub_env, tmp_path, capsys):
    """What an older elmo cached from an HTML error page served with 200 is found on reuse and replaced."""
    import hashlib

    from elmo.hub.fetch import fetch

    with serve({"/m/weights.hdf5": weights_bytes(tmp_path)}) as server:
        url = server.url("/m/weights.hdf5")
        entry = entry_of(url)
        entry.folder.mkdir(parents=True)
        page = b"<html><body>Sign in</body></html>"
        entry.path.write_bytes(page)
        entry.write_record(hashlib.sha256(page).hexdigest(), len(page), None)
        assert fetch(url).read_bytes() == server.files["/m/weights.hdf5"]
        assert "is an HTML page" in capsys.readouterr().err


# ---- #56.2/6/7 embedding: one writer per OUTPUT, input that is not text or that changes, OS errors one line --------

def embed_args(tmp_path: Path) -> list[str]:
    options, weights = micro_model(tmp_path)
    return ["--options", str(options), "--weights", str(weights), "--batch-size", "4"]


HOLD_OUTPUT = """
import os, sys, time
from elmo.files.fileio import output_lock
with output_lock(sys.argv[1]):
    os.makedirs(sys.argv[1] + ".parts", exist_ok=True)
    open(os.path.join(sys.argv[1] + ".parts", ".lines-000000000000-000000000010.h5.0123abcd.tmp"), "w").close()
    print("writing", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("flag", [[], ["--resume"], ["--overwrite"], ["--resume", "--overwrite"]])
def test_a_second_run_on_a_live_output_refuses_naming_its_process(tmp_path, capsys, flag):
    import subprocess
    import sys

    from conftest import subprocess_env

    text = tmp_path / "in.txt"
    text.write_text("a b c\nd e\n")
    out = tmp_path / "out.hdf5"
    live = subprocess.Popen([sys.executable, "-c", HOLD_OUTPUT, str(out)], stdout=subprocess.PIPE, text=True,
                            env=subprocess_env())
    try:
        assert live.stdout.readline().strip() == "writing"
        _refused(capsys, ["embed", str(text), str(out), *embed_args(tmp_path), *flag],
                 f"another run (process {live.pid}) is writing this OUTPUT")
        assert len(list((tmp_path / "out.hdf5.parts").iterdir())) == 1  # the live run's temporary is untouched
    finally:
        live.kill()
        live.wait()
    from elmo.cli import main
    assert main(["embed", str(text), str(out), *embed_args(tmp_path), "--resume"]) == 0  # a dead run's lock is free
    assert out.is_file() and not (tmp_path / ".out.hdf5.lock").exists()


@pytest.mark.parametrize("stateful", [False, True])
def test_an_input_edited_during_the_run_is_refused_and_nothing_written(tmp_path, monkeypatch, stateful):
    import elmo.embed.corpus as parallel
    import elmo.embed.stream as embed_file_module
    from elmo.cli import build_parser
    from elmo.cli.embed import run
    from elmo.errors import InputError

    text = tmp_path / "in.txt"
    text.write_text("a b c\nd e\n" * 20)
    real = embed_file_module.embed_lines

    def embed_then_edit(*args, **kwargs):
        yield from real(*args, **kwargs)
        with open(text, "a") as f:
            f.write("an edit\n")

    monkeypatch.setattr(embed_file_module, "embed_lines", embed_then_edit)
    monkeypatch.setattr(parallel, "embed_lines", embed_then_edit)
    out = tmp_path / "out.hdf5"
    argv = ["embed", str(text), str(out), *embed_args(tmp_path), *(["--stateful"] if stateful else [])]
    with pytest.raises(InputError, match="in.txt: INPUT changed while this run read it .* nothing was written"):
        run(build_parser().parse_args(argv))
    assert not out.exists() and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


@pytest.mark.parametrize("data,needle", [
    ("the cat\nsat on\x00 the mat\n".encode(), "line 2: a NUL byte at column 7"),
    ("the cat sat\non the mat\n".encode("utf-16-le"), "line 1: a NUL byte .* UTF-16LE text without a byte-order mark"),
    ("the cat sat\non the mat\n".encode("utf-16-be"), "line 1: a NUL byte .* UTF-16BE text without a byte-order mark"),
    ("the cat sat\non the mat\n".encode("utf-32-le"), "line 1: a NUL byte .* UTF-32 text without a byte-order mark"),
    (bytes([0x80, 0, 1, 2, 3, 0xff]) * 4 + b"\n", "line 1: a NUL byte .* or a binary file"),
    (b"the cat\rsat on\rthe mat\r", "line 1: a carriage return inside the line .* CR-only line ends"),
])
def test_input_that_is_not_utf8_text_is_refused_by_line(tmp_path, capsys, data, needle):
    text = tmp_path / "in.txt"
    text.write_bytes(data)
    out = tmp_path / "out.hdf5"
    _refused(capsys, ["embed", str(text), str(out), *embed_args(tmp_path)], "in.txt, line ")
    from elmo.files.fileio import iter_lines
    with pytest.raises(ElmoError, match=needle):
        list(iter_lines(text))
    assert not out.exists()


def test_crlf_still_reads_as_lines(tmp_path):
    from elmo.files.fileio import iter_lines

    text = tmp_path / "in.txt"
    text.write_bytes(b"a b\r\nc\r\n")
    assert list(iter_lines(text)) == [(0, "a b"), (1, "c")]


@pytest.mark.parametrize("suffix,damage", [(".gz", "truncated"), (".bz2", "truncated"), (".xz", "truncated"),
                                           (".gz", "mislabelled")])
def test_broken_compressed_input_is_one_line_naming_the_path(tmp_path, capsys, suffix, damage):
    import bz2
    import gzip
    import lzma

    body = ("the cat sat on the mat\n" * 2000).encode()
    packed = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix](body)
    text = tmp_path / f"in.txt{suffix}"
    text.write_bytes(packed[: len(packed) // 2] if damage == "truncated" else body)
    _refused(capsys, ["embed", str(text), str(tmp_path / "out.hdf5"), *embed_args(tmp_path)], f"in.txt{suffix}")


def test_compressed_input_is_read(tmp_path):
    import bz2

    from elmo.files.fileio import iter_lines

    path = tmp_path / "in.txt.bz2"
    path.write_bytes(bz2.compress(b"a b\nc\n"))
    assert list(iter_lines(path)) == [(0, "a b"), (1, "c")]


def test_an_output_name_too_long_is_one_line_before_the_model_runs(tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    _refused(capsys, ["embed", str(text), str(tmp_path / ("o" * 240 + ".hdf5")), *embed_args(tmp_path)],
             "the file name is 245 bytes; this folder allows 255")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_output_folder_without_write_permission_is_one_line(tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("a b\n")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        _refused(capsys, ["embed", str(text), str(folder / "out.hdf5"), *embed_args(tmp_path)],
                 "cannot write in the folder", "permission denied")
    finally:
        folder.chmod(0o755)


def test_an_os_error_no_check_caught_is_one_line(tmp_path, capsys, monkeypatch):
    """The CLI's last net: an OSError from anywhere (here ELMO_CACHE unusable) is one line, exit 2."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("ELMO_CACHE", str(blocker / "cache"))
    _refused(capsys, ["download", "http://127.0.0.1:9/m/blob.bin"], "not-a-folder")


def test_training_corpora_and_embed_share_one_line_reader(tmp_path):
    from elmo.training.corpus import read_sentences

    path = tmp_path / "c.txt"
    path.write_bytes("a b\nc\x00d\n".encode())
    with pytest.raises(ElmoError, match="c.txt, line 2: a NUL byte"):
        list(read_sentences(str(path)))


@pytest.mark.parametrize("stateful", [False, True])
def test_a_killed_runs_output_temporary_is_removed_by_the_next_run(tmp_path, stateful):
    from elmo.cli import main

    text = tmp_path / "in.txt"
    text.write_text("a b c\n")
    leftover = tmp_path / ".out.hdf5.0123456789ab.tmp"
    leftover.write_bytes(bytes(1000))
    extra = ["--stateful"] if stateful else []
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), *embed_args(tmp_path), *extra]) == 0
    assert not leftover.exists() and (tmp_path / "out.hdf5").is_file()


# ---- #56.12 the API refuses nonsense with the argument's name -----------------------------------------------------

@pytest.fixture(scope="module")
def micro_files(tmp_path_factory):
    return micro_model(tmp_path_factory.mktemp("micro56"))


@pytest.mark.parametrize("kwargs,needle", [
    ({"num_output_representations": 10**6}, "num_output_representations must be an integer in 0..1000, found 1000000"),
    ({"num_output_representations": -1}, "num_output_representations must be an integer"),
    ({"num_output_representations": 1.5}, "num_output_representations must be an integer"),
    ({"num_output_representations": 1, "dropout": float("nan")}, "dropout must be a number in \\[0, 1\\], found nan"),
    ({"num_output_representations": 1, "dropout": 2}, "dropout must be a number in \\[0, 1\\]"),
    ({"num_output_representations": 1, "scalar_mix_parameters": [0.0, float("inf"), 1.0]},
     "scalar_mix_parameters must be finite numbers"),
])
def test_elmo_refuses_arguments_out_of_range_by_name(micro_files, kwargs, needle):
    from elmo import Elmo
    from elmo.errors import InputError

    with pytest.raises(InputError, match=needle):
        Elmo(*micro_files, **kwargs)


@pytest.mark.parametrize("ids,needle", [
    (lambda ids: ids.float(), "inputs must hold int64 \\(or int32\\) character ids .* found torch.float32"),
    (lambda ids: ids[0], "inputs must have shape \\(batch, tokens, 50\\) .* found \\(2, 50\\)"),
    (lambda ids: ids[..., :10], "found \\(1, 2, 10\\)"),
    (lambda ids: ids + 1000, "inputs hold character id 1\\d\\d\\d; ids are 0 \\(padding\\) to 261"),
    (lambda ids: ids - 1000, "inputs hold character id -\\d+; ids are 0"),
    (lambda ids: ids.tolist(), "inputs must be a tensor of character ids"),
])
def test_elmo_forward_refuses_bad_character_ids_by_name(micro_files, ids, needle):
    from elmo import Elmo, batch_to_ids
    from elmo.errors import InputError

    model = Elmo(*micro_files, num_output_representations=1, dropout=0.0)
    with pytest.raises(InputError, match=needle):
        model(ids(batch_to_ids([["a", "b"]])))
