"""A local model zip (an NLPL download, `--model 210.zip`) unpacked once into the cache, checked like any archive.

The copy lives in `$ELMO_CACHE/local/<key>/extracted`, keyed by the zip's resolved path, size and
modification time (elmo.nlpl.zip_key), so a replaced zip is unpacked again and the original is
never touched. The model is the one model folder in it (elmo.layout.model_dir_in).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from filelock import FileLock

from ..layout import model_dir_in
from ..nlpl import meta_facts, nlpl_files, zip_key
from .archives import extract_archive
from .cache import cache_root

LOCAL_DIR = "local"


def unpacked_zip(path: str | os.PathLike) -> Path:
    """The folder holding the model of the local zip at `path`, unpacked on first use."""
    folder = cache_root() / LOCAL_DIR / hashlib.sha256(zip_key(path).encode("utf-8")).hexdigest()[:32]
    extracted = folder / "extracted"
    if not extracted.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(folder / ".lock"):
            if not extracted.is_dir():
                extract_archive(path, extracted)
    return model_dir_in(extracted, os.fspath(path))


def cached_meta_facts(archive_url: str) -> dict[str, str]:
    """meta.json's facts of a catalog archive already unpacked in the cache ({} when not cached or without one)."""
    from .cache import CacheEntry

    extracted = CacheEntry.for_url(archive_url).extracted
    if not extracted.is_dir():
        return {}
    files = nlpl_files(model_dir_in(extracted, archive_url))
    return meta_facts(files.meta_file) if files is not None and files.meta_file is not None else {}
