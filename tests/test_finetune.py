"""`elmo train --init-from REF`: any model reference, the softmax phase of a model without one, rows carried
by word, fine-tuning defaults, held-out scoring (--valid) and the exported model (issue #55)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import zipfile

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP, BILM_TF, need, train_micro_run
from hub_server import serve

import elmo
from elmo.cli import main as cli_main
from elmo.errors import InputError
from elmo.formats.lm_vocab import Vocab
from elmo.formats.weights import load_bilm
from elmo.training.checkpoint import list_checkpoints, load_checkpoint
from elmo.training.export import load_run
from elmo.training.finetune import describe_start
from elmo.training.settings import FINETUNE_DEFAULTS, RunConfig, TrainSettings, fresh_run
from elmo.training.trainer import _build_model, _model_options, train

pytestmark = pytest.mark.usefixtures("keep_threads")

FLAGS = ["--batch-size", "4", "--unroll-steps", "5", "--negatives", "8", "--threads", "1", "--no-progress",
         "--log-every", "1"]


@pytest.fixture
def fixture_model(tmp_path):
    """AllenNLP's test biLM as a model directory without a softmax (as every published model is)."""
    model = tmp_path / "fixture-model"
    model.mkdir()
    shutil.copy(need(ALLENNLP / "options.json"), model / "options.json")
    shutil.copy(ALLENNLP / "lm_weights.hdf5", model / "weights.hdf5")
    return model


@pytest.fixture
def corpus():
    """bilm-tf's training text and vocabulary."""
    return need(BILM_TF / "train" / "data.txt"), BILM_TF / "train" / "vocab.txt"


def tune_flags(start, corpus, out, *extra) -> list[str]:
    data, vocab = corpus
    return ["train", "--init-from", str(start), "--vocab", str(vocab), "--train", str(data), "--out", str(out), *FLAGS,
            *extra]


def bilm_weights(state: dict) -> dict:
    return {k: v for k, v in state.items() if k.startswith("bilm.")}


def start_weights(model_dir) -> dict:
    """The biLM weights a run starting from `model_dir` holds at step 0 (the char table as training keeps it)."""
    state = load_bilm(model_dir / "options.json", model_dir / "weights.hdf5").state_dict()
    if state["char_encoder.char_embed"].shape[0] == 262:  # read with the inference table's zero row first
        state["char_encoder.char_embed"] = state["char_encoder.char_embed"][1:]
    return {f"bilm.{k}": v for k, v in state.items()}


def records(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_model_without_softmax_learns_one_frozen_then_trains_everything_and_exports(tmp_path, fixture_model, corpus, capsys):
    run = tmp_path / "run"
    assert cli_main(tune_flags(fixture_model, corpus, run, "--softmax-steps", "3", "--max-steps", "5", "--valid",
                               str(corpus[0]), "--valid-every", "2", "--checkpoint-every", "1", "--keep-checkpoints", "9")) == 0
    expected = start_weights(fixture_model)
    checkpoints = dict(list_checkpoints(run))
    for step in (1, 3):  # phase "softmax": every biLM weight exactly as the start model's, the softmax moving
        state = load_checkpoint(checkpoints[step])["model"]
        for name, value in bilm_weights(state).items():
            assert torch.equal(value, expected[name]), (step, name)
    moved = bilm_weights(load_checkpoint(checkpoints[5])["model"])
    assert all(not torch.equal(moved[n], expected[n]) for n in moved if "_lstm.layers" in n and n.endswith(".W"))
    assert not torch.equal(load_checkpoint(checkpoints[1])["model"]["softmax.W"], load_checkpoint(checkpoints[3])["model"]["softmax.W"])

    logged = records(run)
    train_records = [r for r in logged if "loss" in r]
    assert [(r["step"], r["phase"], r["lr"]) for r in train_records] == [
        (1, "softmax", FINETUNE_DEFAULTS["softmax_lr"]), (2, "softmax", FINETUNE_DEFAULTS["softmax_lr"]),
        (3, "softmax", FINETUNE_DEFAULTS["softmax_lr"]), (4, "all", FINETUNE_DEFAULTS["lr"]), (5, "all", FINETUNE_DEFAULTS["lr"])]
    valid = [r for r in logged if "valid" in r]
    assert [(r["step"], r["phase"]) for r in valid] == [(2, "softmax"), (3, "softmax"), (4, "all"), (5, "all")]
    assert valid[1]["start"] and valid[2]["start_average"] == valid[1]["valid"]["average"]
    assert valid[0]["valid"]["mode"] == "sentence" and "worse_than_start" in valid[2]
    tune = json.loads((run / "run.json").read_text())["finetune"]
    assert tune["softmax_steps"] == 3 and tune["lr"] == FINETUNE_DEFAULTS["lr"] and tune["optimizer_state"] == "fresh"
    assert tune["kind"] == "model directory" and set(tune["defaults"]) == {"optimizer", "lr", "epochs"}
    assert "held-out perplexity of" in capsys.readouterr().err


@pytest.mark.slow  # every entry point on the exported model
def test_the_fine_tuned_model_exports_with_its_card_and_loads_everywhere(tmp_path, fixture_model, corpus):
    run = tmp_path / "run"
    assert cli_main(tune_flags(fixture_model, corpus, run, "--softmax-steps", "3", "--max-steps", "5")) == 0
    model_dir = tmp_path / "tuned"
    assert cli_main(["export", str(run), "-o", str(model_dir)]) == 0
    card = (model_dir / "model-card.txt").read_text()
    assert card.startswith(f"Fine-tuned from {fixture_model} (model directory) on data.txt: 5 steps, the first 3")
    lm, _, _ = load_run(run)
    sentences = [["The", "bank", "raised", "rates", "."], ["A", "river", "bank"]]
    with torch.no_grad():
        direct = lm.bilm(elmo.batch_to_ids(sentences)).layers
    for embedder in (elmo.Embedder.from_model(str(model_dir)), elmo.Embedder(elmo.load_model(str(model_dir)))):
        for i, got in enumerate(embedder.embed_batch(sentences)):
            want = torch.stack([layer[i, 1: 1 + len(sentences[i])] for layer in direct]).numpy()
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert elmo.Elmo.from_pretrained(str(model_dir), 1, dropout=0.0).get_output_dim() == 32
    text = tmp_path / "in.txt"
    text.write_text("The bank raised rates .\n")
    assert cli_main(["embed", str(text), str(tmp_path / "out.hdf5"), "--model", str(model_dir)]) == 0
    assert cli_main(["perplexity", str(model_dir), "--test", str(corpus[0]), "--json", "--no-progress"]) == 0


def final_state(run) -> dict:
    state = load_checkpoint(list_checkpoints(run)[-1][1])
    return {"model": state["model"], "optimizer": state["optimizer"]["state"], "step": state["step"]}


def assert_same(a: dict, b: dict) -> None:
    assert a["step"] == b["step"]
    for name, value in a["model"].items():
        assert torch.equal(value, b["model"][name]), name
    for key, slots in a["optimizer"].items():
        for slot, value in slots.items():
            assert torch.equal(value, b["optimizer"][key][slot]), (key, slot)


def test_resume_in_either_phase_is_bit_equal_to_an_uninterrupted_run(tmp_path, fixture_model, corpus):
    """Stopped after one update (--max-minutes 0) in the softmax phase and again in the second phase, then resumed:
    the same weights and optimizer state as a run never stopped, held-out scorings included."""
    flags = ["--softmax-steps", "2", "--max-steps", "4", "--valid", str(corpus[0]), "--valid-every", "1"]
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    assert cli_main(tune_flags(fixture_model, corpus, whole, *flags)) == 0
    assert cli_main(tune_flags(fixture_model, corpus, pieces, *flags, "--max-minutes", "0")) == 0  # step 1: phase 1
    assert final_state(pieces)["step"] == 1
    assert cli_main(["train", "--out", str(pieces), "--resume", "--max-minutes", "0", "--no-progress"]) == 0  # step 2
    assert cli_main(["train", "--out", str(pieces), "--resume", "--max-minutes", "0", "--no-progress"]) == 0  # step 3: phase 2
    assert cli_main(["train", "--out", str(pieces), "--resume", "--no-progress"]) == 0
    assert_same(final_state(whole), final_state(pieces))
    scored = [[(r["step"], r["valid"]["average"]) for r in records(run) if "valid" in r] for run in (whole, pieces)]
    assert scored[0] == scored[1] and [s for s, _ in scored[0]] == [1, 2, 3, 4]


@pytest.fixture
def model_with_softmax(tmp_path):
    """A micro run exported: options, weights, softmax.hdf5 and its vocab.txt."""
    run, _ = train_micro_run(tmp_path, 2)
    model_dir = tmp_path / "with-softmax"
    assert cli_main(["export", str(run), "-o", str(model_dir)]) == 0
    return model_dir


def domain_vocab(tmp_path, model_vocab: Vocab, new_words: list[str]) -> Vocab:
    """Some of the model's words in another order, and words it lacks."""
    words = model_vocab.tokens[3:][::-1][:10] + new_words
    path = tmp_path / "domain-vocab.txt"
    path.write_text("\n".join(["<S>", "</S>", "<UNK>", *words]) + "\n")
    return Vocab.load(path)


def start_model(tmp_path, reference, vocab_path, seed=0, **kw):
    """The model a run starting from `reference` holds at step 0, and its run settings."""
    s = TrainSettings(out=str(tmp_path / "unused"), train=[str(BILM_TF / "train" / "data.txt")],
                      vocab=str(vocab_path) if vocab_path else None,
                      init_from=str(reference) if reference else None, seed=seed, max_steps=2, **kw)
    options, run, vocab = fresh_run(s, _model_options)
    torch.manual_seed(run.seed)
    return _build_model(options, vocab, run, rank=0)[0], run, vocab


def test_a_model_with_a_softmax_keeps_its_rows_for_shared_words(tmp_path, model_with_softmax, corpus):
    source_vocab = Vocab.load(model_with_softmax / "vocab.txt")
    vocab = domain_vocab(tmp_path, source_vocab, ["zebra-1", "zebra-2"])
    with h5py.File(model_with_softmax / "softmax.hdf5") as f:
        W, b = torch.from_numpy(f["W"][...]), torch.from_numpy(f["b"][...])
    model, run, _ = start_model(tmp_path, model_with_softmax, vocab.source)
    assert run.softmax_steps == 0 and run.finetune["softmax"].startswith("the model's, rows carried over by word")
    micro = json.loads((tmp_path / "micro.json").read_text())
    fresh, _, _ = start_model(tmp_path, None, vocab.source, options=micro)  # a from-scratch run's draw, same seed
    for i, word in enumerate(vocab.tokens):
        if word in source_vocab.index:
            j = source_vocab.index[word]
            assert torch.equal(model.softmax.W[i], W[j]) and model.softmax.b[i] == b[j], word
        else:
            assert torch.equal(model.softmax.W[i], fresh.softmax.W[i]) and model.softmax.b[i] == 0, word
    out = tmp_path / "tuned"
    assert cli_main(tune_flags(model_with_softmax, (corpus[0], vocab.source), out, "--max-steps", "2")) == 0
    assert all("phase" not in r for r in records(out))  # no softmax phase
    own, _, own_vocab = start_model(tmp_path, model_with_softmax, None)  # no --vocab: the model's own, every row kept
    assert own_vocab.tokens == source_vocab.tokens and torch.equal(own.softmax.W, W)


@pytest.mark.slow  # loads the bundled model (36 MB) twice
def test_the_bundled_default_fine_tunes_on_a_domain_vocabulary(tmp_path, corpus):
    """The issue's refused command: `--init-from default` with the domain text's own vocabulary."""
    data, _ = corpus
    vocab_path = tmp_path / "domain.txt"
    assert cli_main(["vocab", str(data), "-o", str(vocab_path)]) == 0
    model, run, vocab = start_model(tmp_path, "default", vocab_path)
    source = Vocab.load(elmo.models.resolve("default").original_files().vocab_file)
    with h5py.File(elmo.models.resolve("default").original_files().softmax_file) as f:
        row = vocab.index["the"]
        np.testing.assert_array_equal(model.softmax.W[row].detach().numpy(), f["W"][source.index["the"]].astype(np.float32))
    assert run.finetune["kind"] == "bundled model"
    assert cli_main(tune_flags("default", (data, vocab_path), tmp_path / "run", "--max-steps", "1")) == 0


def archive_bytes(kind: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w") as z:
            for name, data in files.items():
                z.writestr(name, data)
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz") as t:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def offline_original(tmp_path, monkeypatch):
    """`original` by name, offline: AllenNLP's cache holding the fixture under its URLs (as tests/test_hub_models.py)."""
    from test_hub_models import fill_allennlp_cache

    import elmo.hub.allennlp_cache
    from elmo.hub.catalog import find_published

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("ALLENNLP_CACHE_ROOT", str(tmp_path / "allennlp"))
    monkeypatch.setenv("CACHED_PATH_CACHE_ROOT", str(tmp_path / "cached_path"))
    original = find_published("original")
    fill_allennlp_cache(tmp_path / "allennlp", need(ALLENNLP), {original.options.url: "options.json",
                                                              original.weights.url: "lm_weights.hdf5"})
    monkeypatch.setattr(elmo.hub.allennlp_cache, "known_file", lambda url: None)  # the fixture is not 374 MB
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    return "original"


def test_every_kind_of_reference_starts_from_the_same_weights(tmp_path, fixture_model, model_with_softmax, corpus,
                                                              offline_original, monkeypatch):
    """A model directory, a training run, a published name (offline), archive URLs (.tar.gz, .zip) on 127.0.0.1;
    the bundled model by name is the test above."""
    files = {"m/options.json": (fixture_model / "options.json").read_bytes(),
             "m/weights.hdf5": (fixture_model / "weights.hdf5").read_bytes()}
    expected = start_weights(fixture_model)
    run_dir = tmp_path / "run"  # train_micro_run's, exported as model_with_softmax
    with serve({"/m.tar.gz": archive_bytes("tar", files), "/m.zip": archive_bytes("zip", files)}) as server:
        monkeypatch.delenv("ELMO_OFFLINE")
        for reference, kind in ((fixture_model, "model directory"), (offline_original, "published model"),
                                (server.url("/m.tar.gz"), "model URL"), (server.url("/m.zip"), "model URL")):
            model, run, _ = start_model(tmp_path, reference, corpus[1])
            assert run.finetune["kind"] == kind and run.softmax_steps == FINETUNE_DEFAULTS["softmax_steps"], reference
            for name, value in bilm_weights(model.state_dict()).items():
                assert torch.equal(value, expected[name]), (reference, name)
    model, run, _ = start_model(tmp_path, run_dir, tmp_path / "vocab.txt")
    trained, _, _ = load_run(run_dir)
    assert run.finetune["kind"] == "training run" and run.softmax_steps == 0
    for name, value in model.state_dict().items():
        assert torch.equal(value, trained.state_dict()[name]), name
    bundled = describe_start("default")  # the weights it starts from: the slow test above
    assert (bundled.kind, bundled.has_softmax) == ("bundled model", True) and bundled.vocab_file.endswith("vocab.txt")
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    out = tmp_path / "by-name"
    assert cli_main(tune_flags(offline_original, corpus, out, "--softmax-steps", "1", "--max-steps", "2")) == 0
    assert json.loads((out / "run.json").read_text())["init_from"] == "original"


def test_a_rate_that_makes_the_model_worse_is_reported_with_the_starting_figure(tmp_path, model_with_softmax, corpus, capsys):
    out = tmp_path / "too-fast"
    vocab = model_with_softmax / "vocab.txt"
    assert cli_main(tune_flags(model_with_softmax, (corpus[0], vocab), out, "--lr", "5", "--max-steps", "3",
                               "--valid", str(corpus[0]), "--valid-every", "1", "--dropout", "0")) == 0
    scored = [r for r in records(out) if "valid" in r]
    assert scored[0]["step"] == 0 and scored[0]["start"] and scored[0]["phase"] == "start"
    assert scored[1]["worse_than_start"] and scored[1]["start_average"] == scored[0]["valid"]["average"]
    err = capsys.readouterr().err
    start = f"{scored[0]['valid']['average']:.2f}"
    assert err.count(f"is worse than the starting model's {start}") == 2  # when found, and at the end
    assert f"at the start (step 0) {start}" in err


def test_fine_tuning_defaults_and_refusals(tmp_path, fixture_model, corpus):
    _, run, _ = start_model(tmp_path, fixture_model, corpus[1])
    assert run.optimizer == FINETUNE_DEFAULTS["optimizer"] and run.finetune["epochs"] == FINETUNE_DEFAULTS["epochs"]
    _, run, _ = start_model(tmp_path, fixture_model, corpus[1], lr=0.05, epochs=1.0, softmax_steps=0)
    assert run.finetune["lr"] == 0.05 and run.finetune["defaults"] == ["optimizer", "batch_size", "negatives"]
    assert run.softmax_steps == 0
    assert (run.finetune["batch_size"], run.finetune["negatives"]) == (FINETUNE_DEFAULTS["batch_size"], FINETUNE_DEFAULTS["negatives"])
    stored = RunConfig.from_json(run.to_json(1))
    assert stored == run
    with pytest.raises(InputError, match=r"--vocab is required: --init-from .* has no vocab.txt to use"):
        start_model(tmp_path, fixture_model, None)
    with pytest.raises(InputError, match="no fine-tuning rate is measured for it; give --lr"):
        start_model(tmp_path, fixture_model, corpus[1], optimizer="adam")
    with pytest.raises(InputError, match="--softmax-steps is the first phase of a fine-tune; it needs --init-from"):
        start_model(tmp_path, None, corpus[1], options=json.loads((fixture_model / "options.json").read_text()),
                    softmax_steps=3)
    with pytest.raises(InputError, match="--valid-every needs --valid FILE"):
        start_model(tmp_path, fixture_model, corpus[1], valid_every=3)
    data, vocab = corpus
    settings = {"train": [str(data)], "vocab": str(vocab), "init_from": str(fixture_model), "batch_size": 4,
                "unroll_steps": 5, "negatives": 8, "threads": 1, "progress": False}
    with pytest.raises(InputError, match=r"--softmax-steps 5 leaves no step to train the whole model \(the run has 5 steps\)"):
        train(TrainSettings(out=str(tmp_path / "a"), softmax_steps=5, max_steps=5, **settings))
    with pytest.raises(InputError, match="--valid nowhere.txt: no such file"):
        train(TrainSettings(out=str(tmp_path / "b"), valid="nowhere.txt", max_steps=5, **settings))
    out = tmp_path / "c"
    train(TrainSettings(out=str(out), softmax_steps=1, max_steps=2, **settings))
    with pytest.raises(InputError, match=r"--softmax-steps 2: the run in .* was started with 1"):
        train(TrainSettings(out=str(out), resume=True, softmax_steps=2, max_steps=3, progress=False))


def test_document_batching_scores_in_document_mode(tmp_path, model_with_softmax, corpus):
    lines = corpus[0].read_text().splitlines()
    documents = tmp_path / "docs.txt"
    documents.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")
    out = tmp_path / "doc-run"
    assert cli_main(tune_flags(model_with_softmax, (documents, model_with_softmax / "vocab.txt"), out, "--max-steps", "1",
                               "--batching", "document", "--valid", str(documents))) == 0
    assert [(r["step"], r["valid"]["mode"]) for r in records(out) if "valid" in r] == [(0, "document"), (1, "document")]
    assert json.loads((out / "run.json").read_text())["valid"]["mode"] == "document"
