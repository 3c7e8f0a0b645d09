"""NLPL-shaped models (options.json + model.hdf5, vocab.txt and meta.json optional, n_characters 261 or 262),
as folders and zips built from the shared fixtures, through every entry point that takes a model reference."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import elmo
from elmo.cli import main as cli_main
from elmo.errors import ModelFileError
from elmo.formats.nlpl import is_model_zip, meta_facts, nlpl_files
from elmo.simple_elmo import ElmoModel

META = {"id": 210, "handle": "http://vectors.nlpl.eu/repository/20/210.zip", "dimensions": 32,
        "algorithm": {"name": "ELMo", "id": 9},
        "corpus": [{"description": "A tiny test corpus", "language": "nor", "lemmatized": True, "tokens": 1234}]}
SENTENCES = [["The", "bank", "raised", "rates", "."], ["Hei", "på", "deg"], ["•"]]


def nlpl_dir(root: Path, fixture: Path, n_characters: int = 262, vocab: bool = True, meta: bool = True,
             weights_name: str = "model.hdf5") -> Path:
    """A folder laid out as an NLPL download, from a fixture model."""
    root.mkdir(parents=True)
    options = json.loads((fixture / "options.json").read_text())
    options["char_cnn"]["n_characters"] = n_characters
    (root / "options.json").write_text(json.dumps(options))
    shutil.copy(fixture / "lm_weights.hdf5", root / weights_name)
    if vocab:
        shutil.copy(fixture / "vocab_test.txt", root / "vocab.txt")
    if meta:
        (root / "meta.json").write_text(json.dumps(META))
    return root


def zipped(folder: Path, into_subfolder: bool = False) -> Path:
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.iterdir()):
            z.write(path, f"{folder.name}/{path.name}" if into_subfolder else path.name)
    return archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    return tmp_path / "elmo-cache"


@pytest.fixture(scope="module")
def expected(allennlp_dir):
    """The fixture model's vectors, loaded from its own files."""
    embedder = elmo.Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")
    return list(embedder.embed_sentences(SENTENCES))


def test_folder_layouts_are_recognised(tmp_path, allennlp_dir):
    d = nlpl_dir(tmp_path / "210", allennlp_dir)
    files = nlpl_files(d)
    assert (files.weight_file.name, files.vocab_file.name, files.meta_file.name) == ("model.hdf5", "vocab.txt",
                                                                                      "meta.json")
    bare = nlpl_dir(tmp_path / "bare", allennlp_dir, vocab=False, meta=False, weights_name="elmo_weights.hdf5")
    files = nlpl_files(bare)
    assert files.weight_file.name == "elmo_weights.hdf5" and files.vocab_file is None and files.meta_file is None
    shutil.copy(bare / "elmo_weights.hdf5", bare / "other.hdf5")
    with pytest.raises(ModelFileError, match="2 .hdf5 files.*elmo_weights.hdf5, other.hdf5"):
        nlpl_files(bare)
    original = tmp_path / "original"
    original.mkdir()
    shutil.copy(allennlp_dir / "options.json", original / "options.json")
    shutil.copy(allennlp_dir / "lm_weights.hdf5", original / "weights.hdf5")
    assert nlpl_files(original) is None and nlpl_files(tmp_path / "missing") is None
    assert is_model_zip(zipped(d)) and not is_model_zip(d / "options.json")


def test_meta_facts(tmp_path, allennlp_dir):
    facts = meta_facts(nlpl_dir(tmp_path / "m", allennlp_dir) / "meta.json")
    assert facts == {"id": "210", "handle": META["handle"], "dimensions": "32", "algorithm": "ELMo",
                     "corpus": "A tiny test corpus", "language": "nor", "lemmatized": "True", "tokens": "1234"}
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ModelFileError, match="bad.json: expected a JSON object"):
        meta_facts(tmp_path / "bad.json")


def nlpl_variants(root: Path, fixture: Path) -> list[Path]:
    """Folders and zips, 261 and 262, with and without vocab.txt (the zip of one in a subfolder)."""
    found = []
    for n in (261, 262):
        for vocab in (True, False):
            d = nlpl_dir(root / f"m{n}-{int(vocab)}", fixture, n_characters=n, vocab=vocab, meta=vocab)
            found += [d, zipped(d, into_subfolder=not vocab)]
    return found


def assert_same(arrays, expected):
    assert len(arrays) == len(expected)
    for got, want in zip(arrays, expected):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_every_entry_point(tmp_path, allennlp_dir, expected, cache, one_thread):
    for ref in nlpl_variants(tmp_path / "models", allennlp_dir):
        assert_same(list(elmo.Embedder.from_model(str(ref)).embed_sentences(SENTENCES)), expected)
        bilm = elmo.models.resolve(str(ref)).load()
        with torch.no_grad():
            out = bilm(elmo.batch_to_ids(SENTENCES[:1]))
        np.testing.assert_allclose(out.layers[2][0, 1:-1].numpy(), expected[0][2], atol=1e-6)
        module = elmo.Elmo.from_pretrained(str(ref), num_output_representations=1, dropout=0.0)
        assert module(elmo.batch_to_ids(SENTENCES))["elmo_representations"][0].shape == (3, 5, 32)
        vectors = ElmoModel()
        vectors.load(str(ref))
        all_layers = vectors.get_elmo_vectors(SENTENCES, layers="all")
        for row, want in enumerate(expected):
            np.testing.assert_allclose(all_layers[row, :, : want.shape[1]], want, atol=1e-6)


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_elmo_embed_model(tmp_path, allennlp_dir, expected, cache, kind, one_thread):
    d = nlpl_dir(tmp_path / "m", allennlp_dir, n_characters=261, vocab=False)
    ref = d if kind == "folder" else zipped(d)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert cli_main(["embed", str(src), str(out), "--model", str(ref)]) == 0
    with h5py.File(out, "r") as f:
        assert_same([f[str(i)][...] for i in range(3)], expected)


def test_a_zip_is_unpacked_once_and_again_when_replaced(tmp_path, allennlp_dir, cache):
    from elmo.hub.nlpl_zip import unpacked_zip

    archive = zipped(nlpl_dir(tmp_path / "z", allennlp_dir))
    first = unpacked_zip(archive)
    assert first.is_dir() and (first / "model.hdf5").is_file() and cache in first.parents
    assert unpacked_zip(archive) == first
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("README.txt", "changed")
    again = unpacked_zip(archive)  # unpacked again, replacing its old copy (#66.8): one copy per zip
    assert again.is_dir() and any(p.name == "README.txt" for p in again.parent.rglob("*"))
    assert len(list((cache / "local").iterdir())) == 1


def test_a_zip_without_a_model_is_refused(tmp_path, cache):
    from elmo.hub.nlpl_zip import unpacked_zip

    archive = tmp_path / "empty.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("notes.txt", "no model here")
    with pytest.raises(ModelFileError, match="empty.zip: the archive holds no model directory"):
        unpacked_zip(archive)
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../options.json", "{}")
    with pytest.raises(ModelFileError, match="outside"):
        unpacked_zip(evil)


NLPL_URL = "http://vectors.nlpl.eu/repository/20/{}.zip"


def test_catalog_nlpl_entries_agree_with_their_recorded_sources():
    """Offline: each NLPL entry's URL, corpus and preprocessing against the words its sources record."""
    from elmo.hub.catalog import find_published, published_models

    entries = [m for m in published_models() if m.format == "nlpl"]
    assert [m.name for m in entries] == ["nlpl-210", "nlpl-211", "nlpl-217", "nlpl-218"]
    assert find_published("norelmo100") is find_published("NLPL-218")
    for m in entries:
        model_id = m.name.removeprefix("nlpl-")
        by_fact = {s.fact.split(" ")[0].rstrip(","): s for s in m.sources}
        listing = by_fact["id"].says
        assert listing.startswith(f"ID {model_id}")
        assert all(s.url.startswith(("http://", "https://")) for s in m.sources)
        assert m.archive.url == NLPL_URL.format(model_id)
        pattern = by_fact["url"].says
        example = pattern.rsplit(" ", 1)[-1]
        assert example.startswith(NLPL_URL.split("{}")[0]) and example.endswith(".zip")
        assert ("lemmatized" in listing) == (m.preprocessing == "lemmas") and m.preprocessing in ("lemmas", "tokens")
        assert m.language == "Norwegian" and m.language in by_fact["language"].says
        for part in m.corpus.replace(";", ",").split(", "):
            words = part.split(" (")[0].lower().replace("dump", "").split()
            assert all(w in listing.lower() for w in words), (m.name, part)
        assert m.vector_size is None and m.download_size is None and m.licence.startswith("not stated")


def test_elmo_models_lists_the_nlpl_entries(capsys):
    assert cli_main(["models"]) == 0
    listed = capsys.readouterr().out
    for name in ("nlpl-210", "nlpl-211", "nlpl-217", "nlpl-218"):
        assert name in listed


def cache_nlpl_download(cache: Path, url: str, archive: Path) -> None:
    """Put `archive` in the cache as if it had been downloaded from `url` and unpacked."""
    import hashlib

    from elmo.hub.archives import extract_archive
    from elmo.hub.cache import CacheEntry

    entry = CacheEntry.for_url(url)
    entry.folder.mkdir(parents=True)
    shutil.copy(archive, entry.path)
    data = entry.path.read_bytes()
    entry.write_record(hashlib.sha256(data).hexdigest(), len(data), None)
    extract_archive(entry.path, entry.extracted)


def test_elmo_models_shows_meta_facts_of_a_cached_model(tmp_path, allennlp_dir, cache, capsys):
    from elmo.hub.catalog import find_published

    url = find_published("nlpl-210").archive.url
    cache_nlpl_download(cache, url, zipped(nlpl_dir(tmp_path / "210", allennlp_dir, n_characters=261)))
    assert cli_main(["models"]) == 0
    out = capsys.readouterr().out
    assert "nlpl-210 meta.json: id=210, handle=" in out and "corpus=A tiny test corpus, language=nor" in out
    assert "nlpl-211 meta.json" not in out
    assert cli_main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["nlpl-210"]["cached"] == "elmo" and rows["nlpl-210"]["meta"]["lemmatized"] == "True"
    assert rows["nlpl-210"]["preprocessing"] == "lemmas" and rows["nlpl-211"]["meta"] == {}
    embedder = elmo.Embedder.from_model("nlpl-210")  # the catalog name, from the cache (offline)
    assert embedder.bilm.output_dim() == 32
