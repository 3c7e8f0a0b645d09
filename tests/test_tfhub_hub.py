"""Issue #63 item 1: TF-Hub handles: TF-Hub's own cache first (offline, no TensorFlow), then ours, then a download
through the verified cache (here from a server on 127.0.0.1 in tfhub.dev's place); the catalog's google/elmo/N."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from hub_server import serve

pytest.importorskip("google_crc32c", reason="the `tf` extra (google-crc32c) is not installed")

import elmo.tf.hub_handles as tfhub  # noqa: E402
from elmo.cli import main  # noqa: E402
from elmo.hub.catalog import find_published  # noqa: E402
from elmo.tfhub import Module  # noqa: E402

DATA = Path(__file__).parent / "data" / "tfhub"
ARCHIVE = DATA / "fixture-module.tar.gz"
REFERENCE = np.load(DATA / "fixture-outputs.npz")
SENTENCES = ["the cat is on the mat", "dogs are in the fog"]
HANDLE = "https://tfhub.dev/google/elmo/3"


@pytest.fixture
def caches(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "tfhub-cache"))
    monkeypatch.setenv("ALLENNLP_CACHE_ROOT", str(tmp_path / "allennlp"))
    monkeypatch.delenv("ELMO_OFFLINE", raising=False)
    return tmp_path


def put_in_tfhub_cache(root: Path, handle: str) -> Path:
    """As tensorflow_hub's compressed resolver leaves a module: <cache>/<sha1(handle)>/ and a descriptor beside it."""
    folder = root / hashlib.sha1(handle.encode("utf-8")).hexdigest()
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(folder, filter="data")
    folder.with_name(folder.name + ".descriptor.txt").write_text(f"Module: {handle}\n")
    return folder


def first_sentence_elmo(module: Module) -> np.ndarray:
    return module(SENTENCES, as_dict=True)["elmo"][0, :6]


@pytest.mark.parametrize("written", [HANDLE, "https://www.kaggle.com/models/google/elmo/TensorFlow1/elmo/3",
                                     "https://www.kaggle.com/models/google/elmo/frameworks/tensorFlow1/variations/elmo/versions/3"])
def test_found_in_tfhub_cache_offline_under_any_spelling(caches, monkeypatch, written):
    """The user loaded it once with hub.Module(written); every spelling of the same module finds that folder."""
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    found = put_in_tfhub_cache(caches / "tfhub-cache", written)
    for asked in (HANDLE, "https://www.kaggle.com/models/google/elmo/tensorFlow1/elmo/3", "google/elmo/3", "tfhub-elmo-3"):
        module = Module(asked)
        np.testing.assert_allclose(module(SENTENCES[:1], as_dict=True)["elmo"][0], REFERENCE["default/elmo"][0, :6],
                                   atol=1e-6, rtol=0)
    assert module.default_pooling == "tokens" and found.is_dir()
    assert not (caches / "elmo-cache" / "files").exists()  # nothing downloaded, nothing copied


def test_default_tfhub_cache_is_the_temp_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("TFHUB_CACHE_DIR", raising=False)
    monkeypatch.setattr(tfhub.tempfile, "gettempdir", lambda: str(tmp_path))
    assert tfhub.tfhub_cache_dir() == tmp_path / "tfhub_modules"


def test_versions_1_and_2_pool_default_over_padding(caches, monkeypatch):
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    put_in_tfhub_cache(caches / "tfhub-cache", "https://tfhub.dev/google/elmo/2")
    module = Module("https://tfhub.dev/google/elmo/2")
    assert module.default_pooling == "all"
    from make_tfhub_references import SENTENCES as ALL

    np.testing.assert_allclose(module(ALL), REFERENCE["all_pooling/default/default"], atol=1e-6, rtol=0)


def test_downloaded_once_through_the_verified_cache(caches, monkeypatch):
    data = ARCHIVE.read_bytes()
    with serve({"/google/elmo/3": data}) as server:
        monkeypatch.setattr(tfhub, "TFHUB_ROOT", server.url("").rstrip("/"))
        np.testing.assert_allclose(first_sentence_elmo(Module(HANDLE)), REFERENCE["default/elmo"][0, :6], atol=1e-6, rtol=0)
        Module(HANDLE)  # ours now: no second request
        assert server.gets["/google/elmo/3"] == 1
    files = list((caches / "elmo-cache" / "files").rglob("*.json"))
    assert len(files) == 1 and '"sha256"' in files[0].read_text()  # recorded, checked on reuse
    assert not (caches / "tfhub-cache").exists()  # TF-Hub's cache is read, never written


def test_elmo_download_and_a_compressed_url(caches, monkeypatch, capsys):
    with serve({"/google/elmo/1": ARCHIVE.read_bytes(), "/mirror/m": ARCHIVE.read_bytes()}) as server:
        monkeypatch.setattr(tfhub, "TFHUB_ROOT", server.url("").rstrip("/"))
        assert main(["download", "tfhub-elmo-1"]) == 0
        assert "saved_model" not in capsys.readouterr().err
        assert main(["download", "https://tfhub.dev/google/elmo/1"]) == 0  # the handle: the same module, no new request
        assert "extracted" in capsys.readouterr().out and server.gets["/google/elmo/1"] == 1
        url = server.url("/mirror/m") + "?tf-hub-format=compressed"
        out = caches / "imported"
        assert main(["import-tf", url, str(out)]) == 0
        assert (out / "tfhub_module.json").is_file() and (out / "weights.hdf5").is_file()


def test_catalog_entries():
    for version in (1, 2, 3):
        model = find_published(f"google/elmo/{version}")
        assert model.name == f"tfhub-elmo-{version}" and model.format == "tfhub" and model.vector_size == 1024
        assert model.archive.url == f"https://tfhub.dev/google/elmo/{version}?tf-hub-format=compressed"
        assert "1 Billion Word" in model.corpus and model.licence.startswith("not stated")
    assert "tokens only" in find_published("tfhub-elmo-3").description
    assert "over padding" in find_published("tfhub-elmo-1").description


def test_handle_parsing():
    assert tfhub.parse_handle("https://tfhub.dev/google/elmo/3").version == 3
    assert tfhub.parse_handle("https://tfhub.dev/google/elmo/2?tf-hub-format=compressed").version == 2
    kaggle = tfhub.parse_handle("https://www.kaggle.com/models/google/elmo/TensorFlow1/elmo/1")
    assert kaggle.version == 1 and kaggle.download_url == "https://tfhub.dev/google/elmo/1?tf-hub-format=compressed"
    assert tfhub.parse_handle("https://example.org/model.tar.gz") is None
    assert tfhub.parse_handle("original") is None


def test_offline_and_in_no_cache_is_one_line(caches, monkeypatch, capsys):
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    text = caches / "in.txt"
    text.write_text("a b\n")
    assert main(["embed", str(text), str(caches / "out.hdf5"), "--model", HANDLE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "TF-Hub's cache" in err and "ELMO_OFFLINE=1" in err, err
    assert not (caches / "out.hdf5").exists() and not (caches / "tfhub-cache").exists()


def test_a_damaged_download_leaves_the_cache(caches, monkeypatch):
    from elmo.errors import ModelFileError

    with serve({"/google/elmo/3": ARCHIVE.read_bytes()[:20000]}) as server:
        monkeypatch.setattr(tfhub, "TFHUB_ROOT", server.url("").rstrip("/"))
        with pytest.raises(ModelFileError, match="damaged"):
            Module(HANDLE)
    leftovers = [p for p in (caches / "elmo-cache" / "files").rglob("*") if p.is_file() and p.name != ".lock"]
    assert leftovers == []
    shutil.rmtree(caches / "elmo-cache")
