"""Files a user already downloaded through AllenNLP (or flair, which goes through AllenNLP), found offline.

AllenNLP (0.9 through 2.10.1) caches a URL in `$ALLENNLP_CACHE_ROOT/cache` (default ~/.allennlp/cache)
as `sha256(url)` or `sha256(url).sha256(etag)`, with a `.json` sidecar that is either
`{"url", "etag"}` (<= 1.1) or `{"resource", "cached_path", "creation_time", "size", "etag", ...}`
(>= 1.2, and the `cached_path` package, whose own default is ~/.cache/cached_path). The cache keys on
the URL string, so both S3 spellings are looked for. Nothing here writes there or uses the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from elmo.files.fileio import hash_file

from .catalog import known_file, url_spellings

SKIPPED_SUFFIXES = (".json", ".lock", ".tmp", "-extracted")


def allennlp_cache_dirs() -> list[Path]:
    """AllenNLP's cache folder, then the `cached_path` package's own."""
    allennlp_root = Path(os.environ.get("ALLENNLP_CACHE_ROOT") or Path.home() / ".allennlp")
    cached_path_root = Path(os.environ.get("CACHED_PATH_CACHE_ROOT") or Path.home() / ".cache" / "cached_path")
    return [allennlp_root / "cache", cached_path_root]


def find_in_allennlp_cache(url: str) -> Path | None:
    """A complete, plausible copy of `url` (either S3 spelling) in AllenNLP's caches, or None."""
    for folder in allennlp_cache_dirs():
        for spelling in url_spellings(url):
            found = _find(folder, spelling)
            if found is not None:
                return found
    return None


def _find(folder: Path, url: str) -> Path | None:
    """AllenNLP's own rule (newest by mtime), preferring a file whose sidecar names this URL."""
    prefix = hashlib.sha256(url.encode("utf-8")).hexdigest()
    if not folder.is_dir():
        return None
    candidates = [p for p in folder.glob(prefix + "*") if p.is_file() and not p.name.endswith(SKIPPED_SUFFIXES)
                  and re.fullmatch(prefix + r"(\.[0-9a-f]{64})?", p.name)]
    usable = [p for p in candidates if _plausible(p, url)]
    usable.sort(key=lambda p: (_sidecar(p).get("url", _sidecar(p).get("resource")) == url, p.stat().st_mtime),
                reverse=True)
    return usable[0] if usable else None


def _sidecar(path: Path) -> dict:
    try:
        meta = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _plausible(path: Path, url: str) -> bool:
    """Sizes (sidecar's, the catalog's) and checksums (the catalog's; an S3 ETag that is an MD5) agree."""
    meta, size = _sidecar(path), path.stat().st_size
    named = meta.get("url", meta.get("resource"))
    if named is not None and named != url:
        return False
    known = known_file(url)
    if isinstance(meta.get("size"), int) and meta["size"] != size:
        return False
    if known is not None and known.size is not None and known.size != size:
        return False
    md5s = {known.md5} if known is not None and known.md5 else set()
    etag = str(meta.get("etag") or "").strip('"')
    if re.fullmatch(r"[0-9a-f]{32}", etag):  # a single-part S3 upload's ETag is the MD5 of its bytes
        md5s.add(etag)
    if md5s and {hash_file(path, hashlib.md5()).hexdigest()} != md5s:
        return False
    return not (known is not None and known.sha256 and hash_file(path).hexdigest() != known.sha256)
