"""A local model zip (an NLPL download, `--model 210.zip`) unpacked once into the cache, checked like any archive.

The copy lives in `$ELMO_CACHE/local/zip-<key>/extracted`, keyed by the zip's resolved path alone, beside a record
of the zip's size, modification time and sha256 (source.json): a zip touched but unchanged keeps its copy, a changed
one replaces it (one copy per zip, however often it changes), and the original is never touched. The unpacked
bytes are bounded by what the model its options.json declares can take (archives.model_budget), and a copy whose
model does not load is removed. The model is the one model folder in it (elmo.files.layout.model_dir_in).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from elmo.files.fileio import atomic_path, hash_file
from elmo.files.layout import cache_root, model_dir_in
from elmo.formats.nlpl import meta_facts, nlpl_files

from .archives import check_model_loads, extract_archive, model_budget

LOCAL_DIR = "local"
RECORD = "source.json"


def _record_of(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _read_record(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(folder: Path, record: dict) -> None:
    with atomic_path(folder / RECORD) as tmp:
        Path(tmp).write_text(json.dumps(record) + "\n", encoding="utf-8")


def unpacked_zip(path: str | os.PathLike) -> Path:
    """The folder holding the model of the local zip at `path`, unpacked on first use and when the zip changes."""
    source = Path(path).resolve()
    folder = cache_root() / LOCAL_DIR / ("zip-" + hashlib.sha256(str(source).encode("utf-8")).hexdigest()[:32])
    extracted = folder / "extracted"
    now = _record_of(source)

    def current(record: dict | None) -> bool:
        return record is not None and extracted.is_dir() and all(record.get(k) == v for k, v in now.items())

    if current(_read_record(folder)):
        return model_dir_in(extracted, os.fspath(path))
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".lock"):
        record = _read_record(folder)
        if current(record):
            return model_dir_in(extracted, os.fspath(path))
        digest = hash_file(source).hexdigest()
        if record is not None and extracted.is_dir() and record.get("sha256") == digest:
            _write_record(folder, dict(now, sha256=digest))  # touched, the same bytes: the copy stands
            return model_dir_in(extracted, os.fspath(path))
        (folder / RECORD).unlink(missing_ok=True)
        if extracted.exists():  # the zip changed: its old copy goes (moved aside first: a reader keeps its files)
            old = Path(tempfile.mkdtemp(prefix=".replaced-", dir=folder))
            os.replace(extracted, old / "extracted")
            shutil.rmtree(old, ignore_errors=True)
        extract_archive(source, extracted, budget=model_budget)
        try:
            model = model_dir_in(extracted, os.fspath(path))
            check_model_loads(model, os.fspath(path))
        except BaseException:
            shutil.rmtree(extracted, ignore_errors=True)
            raise
        _write_record(folder, dict(now, sha256=digest))
    return model


def cached_meta_facts(archive_url: str) -> dict[str, str]:
    """meta.json's facts of a catalog archive already unpacked in the cache ({} when not cached or without one)."""
    from .cache import CacheEntry

    extracted = CacheEntry.for_url(archive_url).extracted
    if not extracted.is_dir():
        return {}
    files = nlpl_files(model_dir_in(extracted, archive_url))
    return meta_facts(files.meta_file) if files is not None and files.meta_file is not None else {}
