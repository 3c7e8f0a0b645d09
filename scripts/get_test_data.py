"""Fetch the fixtures and data the tests read from ../shared, for a checkout cloned without it.

    python scripts/get_test_data.py                 # into ../shared beside the checkout (or $ELMO_SHARED)
    python scripts/get_test_data.py --dest DIR      # elsewhere (then run the tests with ELMO_SHARED=DIR)
    python scripts/get_test_data.py --only fixtures/allennlp-elmo data/conll2003

Every file comes from a public source pinned in scripts/test_data.json (a URL at a fixed commit, and
the sha256 of the file as it is in the project's ../shared) and is written under its ../shared path
only after its sha256 matches: through a temporary name, then renamed. A file already there with the
right sha256 is kept. Files with no public source are named with the reason, and the tests that need
them keep skipping. `.gz` files are made with `gzip -9 -n` as ../shared's were (bytes identical);
without a gzip program Python's zlib writes them and the uncompressed content is checked instead.
--base-url (or $ELMO_TEST_DATA_URL) fetches each URL's host and path from another server (a mirror,
or the tests' local one).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

MANIFEST = Path(__file__).with_name("test_data.json")
DEFAULT_DEST = Path(os.environ.get("ELMO_SHARED") or Path(__file__).resolve().parents[2] / "shared")  # as conftest
TIMEOUT = 60


class Refused(Exception):
    """One file that could not be fetched or does not match: the message is one line."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_url(url: str, base_url: str | None) -> str:
    """`url`, or its host and path under `base_url` (http://mirror/raw.githubusercontent.com/...)."""
    if not base_url:
        return url
    return base_url.rstrip("/") + "/" + url.split("://", 1)[1]


def download(url: str, cache: dict[str, bytes | Refused]) -> bytes:
    """The body of `url`; an archive shared by several entries is fetched (or refused) once."""
    if url not in cache:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
                cache[url] = response.read()
        except urllib.error.HTTPError as e:
            cache[url] = Refused(f"{url}: HTTP {e.code} {e.reason}")
        except OSError as e:  # urllib's network errors are OSErrors
            cache[url] = Refused(f"{url}: {getattr(e, 'reason', None) or e}")
    if isinstance(cache[url], Refused):
        raise cache[url]
    return cache[url]


def member(archive: bytes, name: str, kind: str, url: str) -> bytes:
    """One file out of a zip or tar archive."""
    try:
        if kind == "zip":
            with zipfile.ZipFile(io.BytesIO(archive)) as z:
                return z.read(name)
        with tarfile.open(fileobj=io.BytesIO(archive)) as t:
            f = t.extractfile(name)
            if f is None:
                raise KeyError(name)
            return f.read()
    except KeyError:
        raise Refused(f"{url}: the archive holds no {name}") from None
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as e:
        raise Refused(f"{url}: not a readable {kind} archive ({e})") from None


def gzip_bytes(data: bytes) -> bytes:
    """`gzip -9 -n`, as ../shared's files were made; Python's zlib (same content, other bytes) without it."""
    program = shutil.which("gzip")
    if program:
        return subprocess.run([program, "-9", "-n", "-c"], input=data, capture_output=True, check=True).stdout
    return gzip.compress(data, compresslevel=9, mtime=0)


def make(entry: dict, base_url: str | None, cache: dict) -> bytes:
    """The bytes of one manifest entry, as its `make` says: copy, gzip, unzip or untar+gzip."""
    url = source_url(entry["url"], base_url)
    data = download(url, cache)
    steps = entry["make"].split("+")
    if steps[0] in ("unzip", "untar"):
        if steps[0] == "unzip" and entry.get("archive_sha256") and sha256(data) != entry["archive_sha256"]:
            raise Refused(f"{url}: sha256 {sha256(data)}, expected {entry['archive_sha256']}")
        data = member(data, entry["member"], steps[0][2:], url)
    if steps[-1] == "gzip":
        return gzip_bytes(data)
    return data


def check(entry: dict, data: bytes, url: str) -> str:
    """'' when `data` is the file of ../shared; a note when only its uncompressed content is; else refuse."""
    if sha256(data) == entry["sha256"]:
        return ""
    if entry.get("content_sha256") and sha256(gzip.decompress(data)) == entry["content_sha256"]:
        return " (same content; compressed by Python's zlib, so the .gz bytes differ from ../shared's)"
    found = sha256(gzip.decompress(data)) if entry.get("content_sha256") else sha256(data)
    expected = entry.get("content_sha256") or entry["sha256"]
    hint = "" if entry.get("checked", True) else "; this source was not checked against ../shared"
    raise Refused(f"{url}: sha256 {found}, expected {expected}{hint}; nothing written")


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def fetch_entry(entry: dict, dest: Path, base_url: str | None, cache: dict) -> str:
    """Fetch one file unless it is there already; -> the line to print."""
    path = dest / entry["path"]
    if path.is_file() and sha256(path.read_bytes()) == entry["sha256"]:
        return f"ok       {entry['path']} (already there)"
    data = make(entry, base_url, cache)
    note = check(entry, data, source_url(entry["url"], base_url))
    write_atomically(path, data)
    return f"fetched  {entry['path']}{note}"


def selected(paths: list[dict], only: list[str] | None) -> list[dict]:
    if not only:
        return paths
    return [e for e in paths if any(e["path"] == p or e["path"].startswith(p.rstrip("/") + "/") for p in only)]


def run(manifest: dict, dest: Path, base_url: str | None, only: list[str] | None) -> int:
    """Fetch every selected entry; one line each; -> 0 when all are there, 1 when any failed."""
    failed, cache = 0, {}
    for entry in selected(manifest["files"], only):
        try:
            print(fetch_entry(entry, dest, base_url, cache), flush=True)
        except (Refused, OSError, subprocess.CalledProcessError) as e:
            print(f"get_test_data: error: {entry['path']}: {e}", file=sys.stderr, flush=True)
            failed += 1
    for gap in selected(manifest.get("unavailable", []), only):
        print(f"missing  {gap['path']}: {gap['why']}; the tests that need it skip")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dest", type=Path, default=DEFAULT_DEST, help=f"the ../shared-shaped folder (default {DEFAULT_DEST})")
    p.add_argument("--base-url", default=os.environ.get("ELMO_TEST_DATA_URL"),
                   help="fetch each URL's host and path from this server instead ($ELMO_TEST_DATA_URL)")
    p.add_argument("--only", nargs="+", metavar="PATH", help="only these files or folders (paths as under ../shared)")
    p.add_argument("--manifest", type=Path, default=MANIFEST, help=argparse.SUPPRESS)  # the tests' own
    args = p.parse_args(argv)
    try:
        manifest = json.loads(args.manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"get_test_data: error: {args.manifest}: {e}", file=sys.stderr)
        return 1
    return run(manifest, args.dest, args.base_url, args.only)


if __name__ == "__main__":
    sys.exit(main())
