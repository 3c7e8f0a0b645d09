"""The bundled document model (#55 item 5): `default-document` runs where document context is asked for and no
model is named (`Embedder.embed_documents`, `elmo embed --context document`), and says so; a named model
always runs as named."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import ALLENNLP, BILM_TF, need

from elmo import Embedder
from elmo import models as models_module
from elmo.cli import main as cli_main
from elmo.models import DEFAULT_DOCUMENT_MODEL, bundled_models, default_model_name

DOCUMENTS = [[["The", "bank", "was", "closed", "."], ["We", "sat", "by", "the", "river", "."]],
             [["Stocks", "fell", "."]]]


def bundle(root: Path, name: str, fixture: Path) -> None:
    """A fixture model laid out as a bundled one (options.json + weights.hdf5)."""
    (root / name).mkdir(parents=True)
    shutil.copy(need(fixture) / "options.json", root / name / "options.json")
    shutil.copy(fixture / "lm_weights.hdf5", root / name / "weights.hdf5")


@pytest.fixture
def two_bundled(tmp_path, monkeypatch) -> Path:
    """`default` is the allennlp fixture, `default-document` the bilm-tf one (other weights: no mixing up)."""
    root = tmp_path / "bundled"
    bundle(root, "default", ALLENNLP)
    bundle(root, DEFAULT_DOCUMENT_MODEL, BILM_TF)
    monkeypatch.setattr(models_module, "BUNDLED_DIR", root)
    return root


def flat_documents(embedder: Embedder) -> list[np.ndarray]:
    return list(embedder.embed_documents(DOCUMENTS))


def test_an_unnamed_embedder_reads_documents_with_the_document_model(two_bundled, capsys):
    unnamed = Embedder()
    np.testing.assert_array_equal(unnamed.embed_sentence(DOCUMENTS[0][0]),
                                  Embedder.from_model("default").embed_sentence(DOCUMENTS[0][0]))
    got = flat_documents(unnamed)
    assert "`default-document`" in capsys.readouterr().err
    expected = flat_documents(Embedder.from_model(DEFAULT_DOCUMENT_MODEL))
    assert [a.shape for a in got] == [a.shape for a in expected]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    default = flat_documents(Embedder.from_model("default"))
    assert not np.allclose(got[0], default[0])  # the two fixtures' weights differ: a real switch


def test_a_named_model_reads_documents_itself(two_bundled, capsys):
    got = flat_documents(Embedder.from_model("default"))
    assert "default-document" not in capsys.readouterr().err
    direct = Embedder.from_model("default").embed_document_batch(DOCUMENTS)
    for a, b in zip(got, direct):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_without_the_document_model_documents_fall_back_to_default(tmp_path, monkeypatch):
    root = tmp_path / "bundled"
    bundle(root, "default", ALLENNLP)
    monkeypatch.setattr(models_module, "BUNDLED_DIR", root)
    assert default_model_name("document") == "default"
    assert default_model_name("sentence") == "default"


def test_elmo_embed_context_document_without_model_runs_the_document_model(two_bundled, tmp_path, capsys):
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join("\n".join(" ".join(s) for s in d) for d in DOCUMENTS) + "\n", encoding="utf-8")
    assert cli_main(["embed", str(text), str(tmp_path / "unnamed.hdf5"), "--context", "document"]) == 0
    assert "no --model: --context document runs the bundled model `default-document`" in capsys.readouterr().err
    assert cli_main(["embed", str(text), str(tmp_path / "named.hdf5"), "--context", "document",
                     "--model", DEFAULT_DOCUMENT_MODEL]) == 0
    with h5py.File(tmp_path / "unnamed.hdf5") as a, h5py.File(tmp_path / "named.hdf5") as b:
        keys = [k for k in a if k != "sentence_to_index"]
        assert keys and sorted(keys) == sorted(k for k in b if k != "sentence_to_index")
        for k in keys:
            np.testing.assert_array_equal(a[k][()], b[k][()])


def test_the_document_model_ships_and_loads_offline(monkeypatch):
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    assert DEFAULT_DOCUMENT_MODEL in bundled_models()
    model = models_module.resolve(DEFAULT_DOCUMENT_MODEL)
    assert model.files.softmax_file is not None and Path(model.files.softmax_file).is_file()
    vectors = Embedder.from_model(DEFAULT_DOCUMENT_MODEL).embed_sentence(["The", "bank", "."])
    default = Embedder.from_model("default").embed_sentence(["The", "bank", "."])
    assert vectors.shape == default.shape and np.isfinite(vectors).all()
    assert not np.allclose(vectors[1:], default[1:])  # tuned LSTM layers, not a copy of default
