"""`fetch(url)`: a local path for a remote file, from our cache, AllenNLP's, or the network (in that order).

Processes that want the same file at once download it once (a file lock on the entry); the file
appears under its final name only when complete, checked, and its sha256 recorded beside it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from elmo.errors import DownloadError, ModelFileError, OfflineError
from elmo.files.layout import cache_root

from .allennlp_cache import allennlp_cache_dirs, find_in_allennlp_cache
from .cache import OFFLINE_ENV, CacheEntry, offline
from .catalog import RemoteFile, known_file
from .download import content_problem, download, entry_lock, file_name_of
from .reference_checks import check_reference_text, check_segments, shown

SCHEMES = ("http", "https")


def check_url(url: str) -> None:
    """A URL this package fetches: http(s), a host, a path of names; refused here before any library sees it."""
    expected = "https://HOST/PATH/FILE"
    check_reference_text(url, expected)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (parsing it raises for a port that is not a number)
    except ValueError as e:
        raise ModelFileError(f"{shown(url)}: not a URL ({e}); expected {expected}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise DownloadError(shown(url), f"only http:// and https:// URLs can be fetched, not {scheme}://")
    if not parts.hostname:
        raise ModelFileError(f"{shown(url)}: no host; expected {expected}")
    if any(c.isspace() for c in url):
        raise ModelFileError(f"{shown(url)}: a space in the URL; write it as %20 (expected {expected})")
    check_segments(url, parts.path.split("/")[1:], "its path", expected)


def fetch(url: str, timeout: float | None = None, expected: RemoteFile | None = None) -> Path:
    """The local path of `url`'s file; downloads it (unless ELMO_OFFLINE=1) when no cache has it."""
    check_url(url)
    entry = CacheEntry.for_url(url)
    expected = expected or known_file(url)
    corruption = None
    try:
        found = _verified(entry)
    except ModelFileError as e:
        found, corruption = None, str(e)
    if found is None:
        found = find_in_allennlp_cache(url)
    if found is not None:
        return found
    if offline():
        raise OfflineError(url, offline_reason(url, entry, corruption))
    if corruption is not None:
        print(f"elmo: {corruption}; fetching it again", file=sys.stderr)
    return _download_once(url, entry, expected, timeout)


def _download_once(url: str, entry: CacheEntry, expected: RemoteFile | None, timeout: float | None) -> Path:
    """Download under the entry's lock; a process that waited finds the file its neighbour fetched."""
    with entry_lock(entry):  # a bounded wait naming the holder; planted links and leftovers removed
        try:
            found = _verified(entry)
        except ModelFileError:
            entry.remove()
            found = None
        if found is not None:
            return found
        result = download(url, entry.part_path, expected, timeout)
        entry.write_record(result.sha256, result.size, result.etag)
        os.replace(entry.part_path, entry.path)
        return entry.path


def _verified(entry: CacheEntry) -> Path | None:
    """The cached file if its size, sha256 and content check as at download (an older cache may hold junk)."""
    found = entry.verified()
    problem = None if found is None else content_problem(found, file_name_of(entry.url))
    if problem is not None:
        raise ModelFileError(f"corrupted cache entry for {entry.url}: {found} {problem}")
    return found


def offline_reason(url: str, entry: CacheEntry, corruption: str | None) -> str:
    """What was looked at, and how to fill the cache on a machine with network."""
    where = [str(entry.folder.parent)] + [str(d) for d in allennlp_cache_dirs()]
    first = f"{corruption}, and" if corruption else "not in any cache, and"
    return (f"{first} {OFFLINE_ENV}=1 forbids downloading it (looked in: {', '.join(where)}). On a machine with "
            f"network run `elmo download {url}` (or `elmo download NAME` for a catalog model), then copy its cache "
            f"folder {cache_root()} to this machine and point ELMO_CACHE at the copy")
