"""Local files for remote model references: a catalog model, a file URL, or the URL of a model archive.

Returns plain paths (an (options, weights) pair or a model directory) so that the one model
resolver (elmo.models) decides what they are; nothing here loads a model.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock

from ..errors import ModelFileError
from .archives import extract_archive
from .cache import CacheEntry
from .catalog import PublishedModel
from .fetch import fetch

MODEL_DIR_DEPTH = 3  # archives put the model at the top or one or two folders down


def fetch_published(model: PublishedModel, timeout: float | None = None) -> tuple[Path, Path] | Path:
    """A catalog model's files: (options, weights) for the original format, a directory for an archive."""
    if model.archive is not None:
        return fetch_archive_model(model.archive.url, timeout)
    return fetch(model.options.url, timeout, model.options), fetch(model.weights.url, timeout, model.weights)


def fetch_archive_model(url: str, timeout: float | None = None) -> Path:
    """The one model directory inside the archive at `url`, unpacked (once) beside the download."""
    archive = fetch(url, timeout)
    entry = CacheEntry.for_url(url)
    if archive != entry.path:  # found in AllenNLP's cache: unpack into our own entry, never theirs
        entry.folder.mkdir(parents=True, exist_ok=True)
    if not entry.extracted.is_dir():
        with FileLock(entry.lock_path):
            if not entry.extracted.is_dir():
                extract_archive(archive, entry.extracted)
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
