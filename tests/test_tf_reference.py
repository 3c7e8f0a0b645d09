"""Issue #58 item 2: bilm-tf checkpoints as model references, and a catalog entry's checkpoint files fetched from a
server (here one on 127.0.0.1 serving tests/data/tf's tiny bilm-tf checkpoint in the original's place)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import BILM_TF, need
from hub_server import serve

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

import elmo  # noqa: E402
import elmo.models  # noqa: E402
from elmo.cli import main  # noqa: E402
from elmo.hub.catalog import RemoteFile, find_published  # noqa: E402
from elmo.tf.bilm_models import fetch_published_checkpoint  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))["bilm_tf_test"]
NAME = EXPECTED["checkpoint"]
ORIGINAL_DIR = "/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway_tf_checkpoint"


@pytest.fixture
def checkpoint_server(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("ALLENNLP_CACHE_ROOT", str(tmp_path / "allennlp"))
    monkeypatch.delenv("ELMO_OFFLINE", raising=False)
    run = DATA / "bilm-run"
    files = {f"{ORIGINAL_DIR}/options.json": (run / "options.json").read_bytes(),
             f"{ORIGINAL_DIR}/{NAME}.index": (run / f"{NAME}.index").read_bytes(),
             f"{ORIGINAL_DIR}/{NAME}.data-00000-of-00001": (run / f"{NAME}.data-00000-of-00001").read_bytes(),
             "/allennlp/models/elmo/vocab-2016-09-10.txt": need(BILM_TF / "train" / "vocab.txt").read_bytes()}
    with serve(files) as server:
        yield server


def remote_files(server) -> dict[str, RemoteFile]:
    base = f"http://127.0.0.1:{server.server_port}"
    return {"options": RemoteFile(f"{base}{ORIGINAL_DIR}/options.json"),
            "index": RemoteFile(f"{base}{ORIGINAL_DIR}/{NAME}.index"),
            "data": RemoteFile(f"{base}{ORIGINAL_DIR}/{NAME}.data-00000-of-00001"),
            "vocab": RemoteFile(f"{base}/allennlp/models/elmo/vocab-2016-09-10.txt")}


def test_published_checkpoint_files_become_a_model_then_work_offline(checkpoint_server, monkeypatch):
    from elmo.training.perplexity import load_for_scoring, perplexity

    files = remote_files(checkpoint_server)
    model = fetch_published_checkpoint(files)
    assert {p.name for p in model.iterdir()} >= {"options.json", "weights.hdf5", "softmax.hdf5", "vocab.txt"}
    gets = sum(checkpoint_server.gets.values())
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    assert fetch_published_checkpoint(files) == model and sum(checkpoint_server.gets.values()) == gets
    lm, vocab = load_for_scoring(model)
    got = perplexity(lm, vocab, str(DATA / EXPECTED["heldout"]), batch_size=1)
    assert got["average"] == pytest.approx(EXPECTED["perplexity"], rel=1e-5)


def test_the_catalog_entry_names_the_published_files():
    """original-lm: the URLs bilm-tf's README gives for its checkpoint (options, index, data) and vocabulary."""
    model = find_published("original-lm")
    assert model is find_published("original-tf-checkpoint") and model.format == "tf-checkpoint"
    files = dict(model.checkpoint_files)
    assert sorted(files) == ["data", "index", "options", "vocab"]
    says = " ".join(s.says for s in model.sources if s.fact.startswith("urls"))
    for remote in files.values():
        assert f"({remote.url})" in says, remote.url
    assert files["index"].url.endswith("/2x4096_512_2048cnn_2xhighway_tf_checkpoint/model.ckpt-935588.index")
    assert files["vocab"].url.endswith("/vocab-2016-09-10.txt")


@pytest.fixture
def local_original_lm(checkpoint_server, monkeypatch):
    """`original-lm` as the catalog has it, its files served by the 127.0.0.1 server (the tiny checkpoint)."""
    real = find_published("original-lm")
    local = dataclasses.replace(real, checkpoint_files=tuple(remote_files(checkpoint_server).items()))
    monkeypatch.setattr(elmo.models, "find_published", lambda name: local if name == "original-lm" else None)
    return checkpoint_server


def test_elmo_perplexity_original_lm_then_offline(local_original_lm, monkeypatch, capsys):
    args = ["perplexity", "original-lm", "--test", str(DATA / EXPECTED["heldout"]), "--batch-size", "1"]
    assert main(args) == 0
    assert f"average {EXPECTED['perplexity']:.2f}" in capsys.readouterr().out
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    gets = sum(local_original_lm.gets.values())
    assert main(args) == 0 and sum(local_original_lm.gets.values()) == gets
    assert f"average {EXPECTED['perplexity']:.2f}" in capsys.readouterr().out


def test_a_bilm_tf_run_or_prefix_wherever_a_model_is(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    run = tmp_path / "run"
    shutil.copytree(DATA / "bilm-run", run)
    shutil.copy(need(BILM_TF / "train" / "vocab.txt"), run / "vocab.txt")
    assert main(["perplexity", str(run), "--test", str(DATA / EXPECTED["heldout"]), "--batch-size", "1"]) == 0
    assert f"average {EXPECTED['perplexity']:.2f}" in capsys.readouterr().out
    sentences = [["the", "neural", "net", "."]]
    options = elmo.models.resolve(str(run)).original_files().options_file  # the prediction options it wrote
    dumped = next(iter(elmo.Embedder.from_files(options, DATA / "bilm-weights.hdf5").embed_sentences(sentences)))
    for reference in (run, run / EXPECTED["checkpoint"], f"{run / EXPECTED['checkpoint']}.index"):
        ours = next(iter(elmo.Embedder.from_model(str(reference)).embed_sentences(sentences)))
        np.testing.assert_allclose(ours, dumped, atol=1e-6, rtol=0)
    (tmp_path / "in.txt").write_text("the neural net .\n")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--model", str(run)]) == 0
