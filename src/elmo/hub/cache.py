"""Where downloaded model files live, and how an entry is recorded and checked.

One folder per file, keyed by its canonical URL (so both S3 spellings of one object are one entry):

    $ELMO_CACHE/files/<sha256(canonical URL)[:32]>/<file name>         the file, only when complete
                                                  /<file name>.json    url, size, sha256 (and ETag), beside it
                                                  /<file name>.part    a download in progress (resumable)
                                                  /.lock               held while one process downloads
                                                  /extracted/          an archive's contents, once unpacked
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from elmo.errors import ModelFileError
from elmo.files.fileio import atomic_path, hash_file
from elmo.files.layout import cache_root

from .catalog import canonical_url

OFFLINE_ENV = "ELMO_OFFLINE"


def offline() -> bool:
    """ELMO_OFFLINE=1 (or true/yes/on): never touch the network."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def file_name(url: str) -> str:
    """The last path segment of a URL, made safe as a file name ("download" when there is none)."""
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    return name or "download"


@dataclass(frozen=True)
class CacheEntry:
    """The paths of one URL's cache entry (nothing is created until a download starts)."""

    url: str
    folder: Path

    @classmethod
    def for_url(cls, url: str, root: Path | None = None) -> CacheEntry:
        key = hashlib.sha256(canonical_url(url).encode("utf-8")).hexdigest()[:32]
        return cls(canonical_url(url), (root or cache_root()) / "files" / key)

    @property
    def path(self) -> Path:
        return self.folder / file_name(self.url)

    @property
    def record_path(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    @property
    def part_path(self) -> Path:
        return self.path.with_name(self.path.name + ".part")

    @property
    def lock_path(self) -> Path:
        return self.folder / ".lock"

    @property
    def extracted(self) -> Path:
        return self.folder / "extracted"

    def record(self) -> dict | None:
        """The sidecar written when the file was downloaded, or None."""
        try:
            return json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def write_record(self, sha256: str, size: int, etag: str | None) -> None:
        """Written before the file is renamed into place, so a complete file always has its record."""
        record = {"url": self.url, "size": size, "sha256": sha256, "etag": etag, "downloaded": time.time()}
        with atomic_path(self.record_path) as tmp:
            Path(tmp).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    def problem(self) -> str | None:
        """Why the cached file cannot be trusted (None when it matches its recorded size and sha256)."""
        record = self.record()
        if record is None or not isinstance(record.get("sha256"), str):
            return f"{self.record_path} (its recorded sha256) is missing or unreadable"
        size = self.path.stat().st_size
        if size != record.get("size"):
            return f"{self.path} has {size} bytes, {record.get('size')} were recorded when it was downloaded"
        found = hash_file(self.path).hexdigest()
        if found != record["sha256"]:
            return f"{self.path} has sha256 {found}, {record['sha256']} was recorded when it was downloaded"
        return None

    def verified(self) -> Path | None:
        """The cached file if it is present and intact; None if absent; ModelFileError if corrupted."""
        if not self.path.is_file():
            return None
        problem = self.problem()
        if problem is not None:
            raise ModelFileError(f"corrupted cache entry for {self.url}: {problem}")
        return self.path

    def remove(self) -> None:
        """Drop the file and its record (a corrupted entry about to be fetched again)."""
        for path in (self.path, self.record_path):
            path.unlink(missing_ok=True)
