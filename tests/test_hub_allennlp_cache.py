"""Files in AllenNLP's download cache are found without the network: both sidecars, both S3 spellings."""

from __future__ import annotations

import hashlib
import json

import pytest
from test_hub_download import hub_env  # noqa: F401 (fixture)

from elmo.errors import OfflineError
from elmo.hub.allennlp_cache import find_in_allennlp_cache
from elmo.hub.fetch import fetch

PATH_STYLE = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/x/elmo_x_weights.hdf5"
VIRTUAL_HOST = "https://allennlp.s3.amazonaws.com/models/elmo/x/elmo_x_weights.hdf5"
DATA = b"weights" * 1000


def put(cache, url: str, data: bytes, sidecar: str, etag: str | None = '"abc-2"'):
    """A file as AllenNLP names it: sha256(url).sha256(etag), with the 0.9 or the >= 1.2 sidecar."""
    name = hashlib.sha256(url.encode()).hexdigest()
    if etag:
        name += "." + hashlib.sha256(etag.encode()).hexdigest()
    cache.mkdir(parents=True, exist_ok=True)
    (cache / name).write_bytes(data)
    meta = {"url": url, "etag": etag} if sidecar == "0.9" else {
        "resource": url, "cached_path": str(cache / name), "creation_time": 0.0, "size": len(data), "etag": etag,
        "extraction_dir": False}
    (cache / (name + ".json")).write_text(json.dumps(meta))
    (cache / (name + ".lock")).write_text("")
    return cache / name


@pytest.mark.parametrize("sidecar", ["0.9", "2.x"])
@pytest.mark.parametrize("stored,asked", [(PATH_STYLE, PATH_STYLE), (PATH_STYLE, VIRTUAL_HOST),
                                          (VIRTUAL_HOST, PATH_STYLE), (VIRTUAL_HOST, VIRTUAL_HOST)])
def test_found_offline_in_either_spelling_and_sidecar(hub_env, monkeypatch, sidecar, stored, asked):  # noqa: F811
    monkeypatch.setenv("ELMO_OFFLINE", "1")  # any network use would be an OfflineError
    path = put(hub_env / "allennlp" / "cache", stored, DATA, sidecar)
    assert find_in_allennlp_cache(asked) == path
    assert fetch(asked) == path


def test_default_folder_is_home_dot_allennlp(hub_env, monkeypatch):  # noqa: F811
    monkeypatch.delenv("ALLENNLP_CACHE_ROOT")
    monkeypatch.setenv("HOME", str(hub_env / "home"))
    path = put(hub_env / "home" / ".allennlp" / "cache", VIRTUAL_HOST, DATA, "0.9", etag=None)
    assert find_in_allennlp_cache(PATH_STYLE) == path


def test_the_cached_path_packages_folder_is_looked_in_too(hub_env):  # noqa: F811
    path = put(hub_env / "cached_path", VIRTUAL_HOST, DATA, "2.x")
    assert find_in_allennlp_cache(VIRTUAL_HOST) == path


def test_a_file_that_disagrees_with_its_sidecar_is_not_used(hub_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    md5_etag = '"' + hashlib.md5(b"other bytes").hexdigest() + '"'  # a single-part S3 ETag is the MD5
    put(hub_env / "allennlp" / "cache", VIRTUAL_HOST, DATA, "0.9", etag=md5_etag)
    assert find_in_allennlp_cache(VIRTUAL_HOST) is None
    with pytest.raises(OfflineError, match="not in any cache"):
        fetch(VIRTUAL_HOST)


def test_a_matching_md5_etag_is_accepted_and_a_wrong_size_refused(hub_env):  # noqa: F811
    cache = hub_env / "allennlp" / "cache"
    good = put(cache, VIRTUAL_HOST, DATA, "0.9", etag='"' + hashlib.md5(DATA).hexdigest() + '"')
    assert find_in_allennlp_cache(VIRTUAL_HOST) == good
    meta = {"resource": VIRTUAL_HOST, "size": len(DATA) + 1, "etag": None}
    (cache / (good.name + ".json")).write_text(json.dumps(meta))
    assert find_in_allennlp_cache(VIRTUAL_HOST) is None
