"""Local files for remote model references: a catalog model, a file URL, or the URL of a model archive.

Returns plain paths (an (options, weights) pair or a model directory) so that the one model
resolver (elmo.models) decides what they are; nothing here loads a model.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ModelFileError
from .allennlp_cache import find_in_allennlp_cache
from .archives import ARCHIVE_SUFFIXES, extract_archive, is_archive_name
from .cache import CacheEntry
from .catalog import PublishedModel
from .download import entry_lock, unpack_entry
from .fetch import check_url, fetch

MODEL_DIR_DEPTH = 3  # archives put the model at the top or one or two folders down


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


def download_reference(reference: str, timeout: float | None = None) -> list[Path]:
    """`elmo download`: a catalog name or a URL (a file or an archive) into the cache; the local paths."""
    from .catalog import find_published, is_url

    model = find_published(reference)
    if model is not None:
        found = fetch_published(model, timeout)
        return list(found) if isinstance(found, tuple) else [found]
    if is_url(reference):
        if is_archive_name(urlsplit(reference).path):
            return [fetch_archive_model(reference, timeout)]
        return [fetch(reference, timeout)]
    raise ModelFileError(f"{reference}: not a published model's name nor a URL (`elmo models` lists the names)")


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
                unpack_entry(entry, archive)  # a damaged archive leaves the cache
    return model_dir_in(entry.extracted, url)


def model_dir_in(folder: Path, source: str) -> Path:
    """The single folder under `folder` that holds a model (options.json + weights.hdf5, or ELMoForManyLangs)."""
    from ..manylangs import is_manylangs_dir

    found = []
    for current, dirs, files in os.walk(folder):
        depth = len(Path(current).relative_to(folder).parts)
        if depth >= MODEL_DIR_DEPTH:
            dirs[:] = []
        dirs.sort()
        if {"options.json", "weights.hdf5"} <= set(files) or is_manylangs_dir(current):
            found.append(Path(current))
    if len(found) != 1:
        what = "no model directory" if not found else f"{len(found)} model directories"
        raise ModelFileError(f"{source}: the archive holds {what} (expected one folder with options.json + "
                             f"weights.hdf5, or an ELMoForManyLangs model); unpacked in {folder}")
    return found[0]
