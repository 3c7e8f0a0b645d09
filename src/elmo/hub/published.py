"""Local files for remote model references: a catalog model, or the URL of a model archive.

Returns plain paths (an (options, weights) pair or a model directory) so that the one model
resolver (elmo.models) decides what they are; nothing here loads a model, and only elmo.models calls
these (model directories are recognised by elmo.files.layout).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

from elmo.errors import ModelFileError
from elmo.files.layout import model_dir_in

from .allennlp_cache import find_in_allennlp_cache
from .archives import ARCHIVE_SUFFIXES, check_model_loads, is_archive_name, model_budget
from .cache import CacheEntry
from .catalog import PublishedModel
from .download import entry_lock, unpack_entry
from .fetch import check_url, fetch


def fetch_published(model: PublishedModel, timeout: float | None = None) -> tuple[Path, Path] | Path:
    """A catalog model's files: (options, weights) for the original format, a directory for an archive."""
    if model.archive is not None:
        return fetch_archive_model(model.archive.url, timeout)
    return fetch(model.options.url, timeout, model.options), fetch(model.weights.url, timeout, model.weights)


def fetch_model_url(url: str, timeout: float | None = None) -> Path:
    """`--model URL` / `from_pretrained(URL)`: the URL of an archive holding one model directory."""
    check_url(url)
    if not is_archive_name(urlsplit(url).path):
        raise ModelFileError(f"{url}: a model URL must name an archive ({', '.join(ARCHIVE_SUFFIXES)}) holding one "
                             "model directory; for the two files of a model give --options URL --weights URL "
                             "(options_file=URL, weight_file=URL)")
    return fetch_archive_model(url, timeout)


def cache_status(model: PublishedModel) -> str:
    """Where a catalog model's files are, without the network: "elmo", "allennlp", or "" (not cached)."""
    places = []
    for remote in model.remote_files:
        entry = CacheEntry.for_url(remote.url)
        if entry.path.is_file() and entry.record_path.is_file():
            places.append("elmo")
        elif find_in_allennlp_cache(remote.url) is not None:
            places.append("allennlp")
        else:
            return ""
    return "allennlp" if "allennlp" in places else "elmo"


def fetch_archive_model(url: str, timeout: float | None = None) -> Path:
    """The one model directory inside the archive at `url`, unpacked (once) beside the download."""
    archive = fetch(url, timeout)
    entry = CacheEntry.for_url(url)
    if archive != entry.path:  # found in AllenNLP's cache: unpack into our own entry, never theirs
        entry.folder.mkdir(parents=True, exist_ok=True)
    if not entry.extracted.is_dir() or entry.extracted.is_symlink():
        with entry_lock(entry):  # a bounded wait; planted links and killed unpacks' leftovers removed
            if not entry.extracted.is_dir():
                unpack_entry(entry, archive, budget=model_budget)  # a damaged archive leaves the cache
                try:  # a model that does not load leaves no unpacked copy behind
                    check_model_loads(model_dir_in(entry.extracted, url), url)
                except ModelFileError:
                    shutil.rmtree(entry.extracted, ignore_errors=True)
                    raise
    return model_dir_in(entry.extracted, url)
