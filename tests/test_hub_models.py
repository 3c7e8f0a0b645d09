"""Published models wherever a model is taken: by URL, by archive URL, by name; the legacy default; offline use."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import tarfile

import h5py
import numpy as np
import pytest
import torch
from conftest import REPO
from hub_server import serve
from test_hub_download import hub_env  # noqa: F401 (fixture)

import elmo
import elmo.hub.allennlp_cache
from elmo.cli import main
from elmo.errors import DownloadError, ModelFileError, OfflineError
from elmo.hub.catalog import find_published

SENTENCES = [["The", "bank", "raised", "rates", "."], ["A", "river", "bank"]]


@pytest.fixture
def fixture_server(allennlp_dir):
    """The tiny fixture model served over HTTP, as two files and as a .tar.gz of a model directory."""
    options, weights = (allennlp_dir / "options.json").read_bytes(), (allennlp_dir / "lm_weights.hdf5").read_bytes()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as t:
        for name, data in (("tiny/options.json", options), ("tiny/weights.hdf5", weights)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with serve({"/m/options.json": options, "/m/weights.hdf5": weights, "/tiny.tar.gz": archive.getvalue()}) as s:
        yield s


def vectors(module) -> np.ndarray:
    with torch.no_grad():
        return module(elmo.batch_to_ids(SENTENCES))["elmo_representations"][0].numpy()


def test_a_model_by_url_gives_exactly_the_vectors_of_the_same_files_from_disk(hub_env, fixture_server, allennlp_dir):  # noqa: F811
    o, w = fixture_server.url("/m/options.json"), fixture_server.url("/m/weights.hdf5")
    lo, lw = allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5"
    torch.manual_seed(0)
    local = vectors(elmo.Elmo(lo, lw, 1, dropout=0.0))
    torch.manual_seed(0)
    np.testing.assert_array_equal(vectors(elmo.Elmo(o, w, 1, dropout=0.0)), local)
    expected = elmo.Embedder.from_files(lo, lw).embed_batch(SENTENCES)
    for embedder in (elmo.Embedder.from_files(o, w), elmo.Embedder(elmo.load_bilm(o, w)),
                     elmo.Embedder.from_model(elmo.models.resolve(options=o, weights=w)),
                     elmo.ElmoEmbedder(o, w).embedder):
        for got, want in zip(embedder.embed_batch(SENTENCES), expected):
            np.testing.assert_array_equal(got, want)
    assert sum(fixture_server.gets.values()) == 2  # each file downloaded once, then taken from the cache


def test_an_archive_url_is_a_model_reference(hub_env, fixture_server, allennlp_dir):  # noqa: F811
    url = fixture_server.url("/tiny.tar.gz")
    expected = elmo.Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5").embed_batch(SENTENCES)
    for embedder in (elmo.Embedder.from_model(url), elmo.Embedder(elmo.load_model(url))):
        for got, want in zip(embedder.embed_batch(SENTENCES), expected):
            np.testing.assert_array_equal(got, want)
    assert elmo.Elmo.from_pretrained(url, 1, dropout=0.0) is not None
    assert fixture_server.gets["/tiny.tar.gz"] == 1


def test_commands_take_urls(hub_env, fixture_server, allennlp_dir, tmp_path, capsys):  # noqa: F811
    text = tmp_path / "in.txt"
    text.write_text("The bank raised rates .\nA river bank\n")
    o, w = fixture_server.url("/m/options.json"), fixture_server.url("/m/weights.hdf5")
    assert main(["embed", str(text), str(tmp_path / "local.hdf5"), "--options", str(allennlp_dir / "options.json"),
                 "--weights", str(allennlp_dir / "lm_weights.hdf5")]) == 0
    assert main(["embed", str(text), str(tmp_path / "url.hdf5"), "--options", o, "--weights", w]) == 0
    assert main(["embed", str(text), str(tmp_path / "archive.hdf5"), "--model", fixture_server.url("/tiny.tar.gz")]) == 0
    with h5py.File(tmp_path / "local.hdf5") as a, h5py.File(tmp_path / "url.hdf5") as b, h5py.File(tmp_path / "archive.hdf5") as c:
        for key in ("0", "1"):
            np.testing.assert_array_equal(a[key][()], b[key][()])
            np.testing.assert_array_equal(a[key][()], c[key][()])
    assert main(["embed", str(text), str(tmp_path / "x.hdf5"), "--options", o, "--weights",
                 fixture_server.url("/m/gone.hdf5")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{fixture_server.url('/m/gone.hdf5')}: HTTP 404 Not Found (no such "
                                                    "file on the server: check the URL)")


def test_a_single_file_url_as_a_model_says_what_to_give(hub_env):  # noqa: F811
    with pytest.raises(ModelFileError, match=r"must name an archive .* --options URL --weights URL"):
        elmo.models.resolve("https://example.org/weights.hdf5")
    with pytest.raises(DownloadError, match="only http:// and https://"):
        elmo.models.resolve("ftp://example.org/model.zip")


def fill_allennlp_cache(root, allennlp_dir, urls: dict[str, str], sidecar: str = "0.9") -> None:
    """Put the fixture files where AllenNLP 0.9 (or >= 1.2) would have cached these URLs (name: sha256(url).sha256(etag))."""
    cache = root / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for url, source in urls.items():
        etag = '"0123-4"'  # a multipart ETag: not an MD5, so not checked
        name = hashlib.sha256(url.encode()).hexdigest() + "." + hashlib.sha256(etag.encode()).hexdigest()
        (cache / name).write_bytes((allennlp_dir / source).read_bytes())
        meta = {"url": url, "etag": etag} if sidecar == "0.9" else {"resource": url, "etag": etag, "size": None}
        (cache / (name + ".json")).write_text(json.dumps(meta))


@pytest.fixture
def offline_with_original_in_allennlp_cache(hub_env, allennlp_dir, monkeypatch):  # noqa: F811
    """`original`'s two URLs (in the spelling allennlp >= 0.8.5 used) cached by AllenNLP, holding the tiny fixture.

    The fixture stands in for the 374 MB file, so the catalog's known sizes are not applied here
    (their check has its own test below)."""
    original = find_published("original")
    fill_allennlp_cache(hub_env / "allennlp", allennlp_dir, {original.options.url: "options.json",
                                                            original.weights.url: "lm_weights.hdf5"})
    monkeypatch.setattr(elmo.hub.allennlp_cache, "known_file", lambda url: None)
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    return original


TUTORIAL = '''
from elmo import Elmo, batch_to_ids

options_file = "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
weight_file = "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"

# Compute two different representation for each token.
# Each representation is a linear weighted combination for the
# 3 layers in ELMo (i.e., charcnn, the outputs of the two BiLSTM))
elmo = Elmo(options_file, weight_file, 2, dropout=0)

# use batch_to_ids to convert sentences to character ids
sentences = [['First', 'sentence', '.'], ['Another', '.']]
character_ids = batch_to_ids(sentences)

embeddings = elmo(character_ids)
'''

LEGACY_09 = '''
from elmo import ElmoEmbedder

options_file = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
weight_file = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"
elmo = ElmoEmbedder(options_file, weight_file)
vectors = elmo.embed_sentence(["I", "ate", "an", "apple", "for", "breakfast"])
'''


def test_the_tutorial_and_the_09_snippet_run_offline_from_allennlps_cache(offline_with_original_in_allennlp_cache):
    """Only the import changed (the 0.9 snippet in the path-style spelling, the cache holding the other one)."""
    scope: dict = {}
    exec(TUTORIAL, scope)
    assert [tuple(r.shape) for r in scope["embeddings"]["elmo_representations"]] == [(2, 3, 32)] * 2
    scope = {}
    exec(LEGACY_09, scope)
    assert scope["vectors"].shape == (3, 6, 32)


def test_names_load_from_a_cache_offline(offline_with_original_in_allennlp_cache, allennlp_dir, tmp_path):
    expected = elmo.Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5").embed_batch(SENTENCES)
    for embedder in (elmo.Embedder.from_model("original"), elmo.Embedder(elmo.load_model("original")),
                     elmo.ElmoEmbedder().embedder):
        for got, want in zip(embedder.embed_batch(SENTENCES), expected):
            np.testing.assert_array_equal(got, want)
    assert elmo.Elmo.from_pretrained("original", 1).get_output_dim() == 32
    text = tmp_path / "in.txt"
    text.write_text("The bank\n")
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), "--model", "original"]) == 0


def test_the_catalogs_size_keeps_a_wrong_file_out(hub_env, allennlp_dir, monkeypatch):  # noqa: F811
    original = find_published("original")
    fill_allennlp_cache(hub_env / "allennlp", allennlp_dir, {original.weights.url: "lm_weights.hdf5"}, sidecar="2.x")
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    assert elmo.hub.allennlp_cache.find_in_allennlp_cache(original.weights.url) is None  # 450,896 bytes, not 374,434,792


def test_legacy_default_offline_with_empty_caches_is_the_clear_error(hub_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    with pytest.raises(OfflineError) as error:
        elmo.ElmoEmbedder()
    message = str(error.value)
    assert message.startswith(find_published("original").options.url)
    for part in ("ElmoEmbedder() with no files means AllenNLP 0.9's default", "1024-dimensional",
                 "`elmo download original`", "elmo.models.resolve('default')", "ELMO_OFFLINE=1"):
        assert part in message


def test_default_stays_the_bundled_model_and_needs_no_network(hub_env, monkeypatch, tmp_path):  # noqa: F811
    """The README quickstart's `elmo embed` (and `Embedder()`, `from_pretrained()`) touch no network."""
    def no_network(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert main(["embed", str(REPO / "examples" / "sentences.txt"), str(tmp_path / "s.hdf5"), "--overwrite"]) == 0
    assert elmo.Embedder().embed_batch([["a"]])[0].shape == (3, 1, 512)
    assert elmo.models.resolve().name == "default"


def test_a_hostile_archive_by_url_is_refused_and_nothing_lands_outside_the_cache(hub_env):  # noqa: F811
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as t:
        info = tarfile.TarInfo("../../escaped.json")
        info.size = 2
        t.addfile(info, io.BytesIO(b"{}"))
    with serve({"/evil.tar.gz": archive.getvalue()}) as server:
        url = server.url("/evil.tar.gz")
        with pytest.raises(ModelFileError, match=r"escaped.json.* points outside"):
            elmo.models.resolve(url)
        assert main(["embed", str(REPO / "examples" / "sentences.txt"), str(hub_env / "o.hdf5"), "--model", url]) == 2
    assert not list(hub_env.rglob("escaped.json"))
    assert not list((hub_env / "elmo-cache").rglob("extracted"))
