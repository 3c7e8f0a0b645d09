"""Downloads against a real server on 127.0.0.1: every network fault, resume, locking, the cache's checks."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import pytest
from hub_server import serve

from elmo.errors import DownloadError, ModelFileError, OfflineError
from elmo.hub.cache import CacheEntry
from elmo.hub.catalog import RemoteFile
from elmo.hub.fetch import fetch

DATA = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """Empty caches of our own and of AllenNLP's; the network allowed."""
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("ALLENNLP_CACHE_ROOT", str(tmp_path / "allennlp"))
    monkeypatch.setenv("CACHED_PATH_CACHE_ROOT", str(tmp_path / "cached_path"))
    monkeypatch.delenv("ELMO_OFFLINE", raising=False)
    return tmp_path


@pytest.fixture
def server():
    with serve({"/m/blob.bin": DATA}) as s:
        yield s


def final_and_part(url: str) -> tuple[Path, Path]:
    entry = CacheEntry.for_url(url)
    return entry.path, entry.part_path


@pytest.mark.parametrize("etag", [True, False])
@pytest.mark.parametrize("content_length", [True, False])
def test_download_records_sha256_beside_the_file(hub_env, server, etag, content_length):
    server.etag, server.content_length = etag, content_length
    url = server.url("/m/blob.bin")
    path = fetch(url)
    assert path.read_bytes() == DATA and path.name == "blob.bin"
    record = json.loads(path.with_name("blob.bin.json").read_text())
    assert record["sha256"] == SHA and record["size"] == len(DATA) and record["url"] == url
    assert (record["etag"] is not None) == etag
    assert fetch(url) == path and server.gets["/m/blob.bin"] == 1  # reused, not fetched again
    assert not any(p.name.endswith(".part") for p in path.parent.iterdir())


@pytest.mark.parametrize("fault,message", [
    ("404", "HTTP 404 Not Found"), ("403", "HTTP 403 Forbidden"), ("500", "HTTP 500 Internal Server Error"),
    ("cut", "cut the connection in the middle of the file"), ("short", "cut the connection in the middle of the file"),
])
def test_each_server_fault_is_one_clear_error_and_the_next_try_succeeds(hub_env, server, fault, message):
    url = server.url("/m/blob.bin")
    server.faults["/m/blob.bin"] = fault
    with pytest.raises(DownloadError, match=message) as error:
        fetch(url)
    assert str(error.value).startswith(url + ": ") and error.value.url == url
    final, _ = final_and_part(url)
    assert not final.exists()
    del server.faults["/m/blob.bin"]
    assert fetch(url).read_bytes() == DATA


def test_short_body_without_content_length_check_is_caught_by_the_catalog_size(hub_env, server):
    server.content_length, server.faults["/m/blob.bin"] = False, "short"
    url = server.url("/m/blob.bin")
    with pytest.raises(DownloadError, match=f"{len(DATA) - 7} bytes where {len(DATA)} were expected"):
        fetch(url, expected=RemoteFile(url, size=len(DATA)))
    assert not final_and_part(url)[0].exists()


@pytest.mark.parametrize("etag", [True, False])
def test_a_cut_download_resumes_with_a_range_request(hub_env, server, etag):
    server.etag = etag
    url = server.url("/m/blob.bin")
    server.faults["/m/blob.bin"] = "cut"
    with pytest.raises(DownloadError, match="bytes kept, run again to resume"):
        fetch(url)
    final, part = final_and_part(url)
    kept = part.stat().st_size
    assert 0 < kept < len(DATA) and not final.exists()
    del server.faults["/m/blob.bin"]
    assert fetch(url).read_bytes() == DATA
    assert server.ranges_asked == [f"bytes={kept}-"]
    assert json.loads(final.with_name("blob.bin.json").read_text())["sha256"] == SHA


def test_a_server_without_ranges_restarts_from_zero(hub_env, server):
    server.ranges = False
    url = server.url("/m/blob.bin")
    server.faults["/m/blob.bin"] = "cut"
    with pytest.raises(DownloadError):
        fetch(url)
    del server.faults["/m/blob.bin"]
    assert fetch(url).read_bytes() == DATA


def test_refused_connection(hub_env):
    with serve({}) as s:
        url = s.url("/gone.hdf5")
    with pytest.raises(DownloadError, match="refused the connection") as error:
        fetch(url)
    assert error.value.url == url


def test_dns_failure(hub_env):
    url = "http://nonexistent.invalid/weights.hdf5"
    with pytest.raises(DownloadError, match=r"^http://nonexistent.invalid/weights.hdf5: the host name could not be"):
        fetch(url, timeout=5)


def test_timeout(hub_env, server):
    server.faults["/m/blob.bin"], server.slow_seconds = "slow", 2.0
    url = server.url("/m/blob.bin")
    with pytest.raises(DownloadError, match=r"no answer from the server within 0\.5 s"):
        fetch(url, timeout=0.5)
    assert not final_and_part(url)[0].exists()


@pytest.mark.parametrize("url", ["ftp://example.org/w.hdf5", "s3://allennlp/models/elmo/x.hdf5", "file:///etc/passwd"])
def test_only_http_and_https(hub_env, url):
    with pytest.raises(DownloadError, match="only http:// and https:// URLs"):
        fetch(url)


def test_the_catalogs_checksum_is_enforced(hub_env, server):
    url = server.url("/m/blob.bin")
    with pytest.raises(DownloadError, match=r"an md5 other than the published 0+"):
        fetch(url, expected=RemoteFile(url, md5="0" * 32))
    final, part = final_and_part(url)
    assert not final.exists() and not part.exists()
    assert fetch(url, expected=RemoteFile(url, md5=hashlib.md5(DATA).hexdigest(), sha256=SHA)).read_bytes() == DATA


def test_a_corrupted_entry_is_refused_offline_and_fetched_again_online(hub_env, server, monkeypatch):
    url = server.url("/m/blob.bin")
    path = fetch(url)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xfe")
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    with pytest.raises(OfflineError, match=r"corrupted cache entry .* has sha256"):
        fetch(url)
    monkeypatch.delenv("ELMO_OFFLINE")
    assert fetch(url).read_bytes() == DATA and server.gets["/m/blob.bin"] == 2


def test_offline_never_touches_the_network(hub_env, server, monkeypatch):
    monkeypatch.setenv("ELMO_OFFLINE", "1")
    url = server.url("/m/blob.bin")
    with pytest.raises(OfflineError) as error:
        fetch(url)
    message = str(error.value)
    assert message.startswith(url) and "ELMO_OFFLINE=1" in message and str(hub_env / "allennlp" / "cache") in message
    assert f"elmo download {url}" in message
    assert sum(server.gets.values()) == 0


def test_the_two_s3_spellings_are_one_cache_entry():
    a = CacheEntry.for_url("https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/x/w.hdf5", Path("/c"))
    b = CacheEntry.for_url("https://allennlp.s3.amazonaws.com/models/elmo/x/w.hdf5", Path("/c"))
    assert a == b


def _fetch_in_process(args: tuple[str, str]) -> tuple[str, str]:
    url, cache = args
    os.environ["ELMO_CACHE"] = cache
    path = fetch(url)
    return str(path), hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # four interpreters, each importing torch with elmo (about 15 s on 2 cores)
def test_four_processes_download_once_and_agree(hub_env, server):
    server.per_chunk_delay = 0.001  # about 0.3 s per download, so the four overlap
    url = server.url("/m/blob.bin")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_fetch_in_process, [(url, os.environ["ELMO_CACHE"])] * 4)
    assert server.gets["/m/blob.bin"] == 1
    assert len(set(results)) == 1 and results[0][1] == SHA


def test_a_truncated_cache_file_is_refused(hub_env, server, monkeypatch):
    url = server.url("/m/blob.bin")
    path = fetch(url)
    path.write_bytes(DATA[:10])
    with pytest.raises(ModelFileError, match="has 10 bytes"):
        CacheEntry.for_url(url).verified()
