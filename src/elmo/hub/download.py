"""One HTTP(S) download into a `.part` file: resumable, length-checked, hashed as it streams, with a bar.

`requests` does the HTTP (TLS certificates always verified: `verify` is never turned off); every
network fault becomes one `DownloadError` that names the URL. The `.part` file survives a failure
so that the next try continues where this one stopped, when the server accepts ranges.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import re
import shutil
import socket
import sys
import tarfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests
import urllib3
from filelock import FileLock, Timeout
from tqdm import tqdm

from elmo.errors import DownloadError, ElmoError, ModelFileError
from elmo.files.fileio import atomic_path, hash_file

from .archives import ARCHIVE_SUFFIXES, extract_archive
from .cache import CacheEntry
from .catalog import RemoteFile

TIMEOUT_ENV = "ELMO_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT = 30.0  # the stall limit: seconds without a byte (connect or read) before a download is given up
MIN_RATE_ENV = "ELMO_DOWNLOAD_MIN_RATE"
DEFAULT_MIN_RATE = 4096.0  # bytes/s over the whole download, checked once RATE_GRACE_ENV seconds have passed
RATE_GRACE_ENV = "ELMO_DOWNLOAD_RATE_GRACE"
DEFAULT_RATE_GRACE = 60.0
CHUNK = 1 << 16  # a cut connection loses at most this much of what arrived
HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml")


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name) or ""
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise DownloadError("(settings)", f"{name}={text!r}: expected a positive number")
    return value


@dataclass(frozen=True)
class Downloaded:
    size: int
    sha256: str
    etag: str | None


def timeout_seconds(timeout: float | None = None) -> float:
    """The stall limit: `timeout`, else $ELMO_DOWNLOAD_TIMEOUT, else 30 s."""
    return timeout if timeout is not None else _env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT)


def download(url: str, part: Path, expected: RemoteFile | None = None, timeout: float | None = None) -> Downloaded:
    """Fetch `url` into `part` (continuing it if the server allows), check it, return its size and sha256.

    Does not rename: the caller records the sha256 and moves `part` under the final name.
    """
    seconds = timeout_seconds(timeout)
    resume = _resume_state(part)
    headers = {"Accept-Encoding": "identity", "User-Agent": "elmo-bilm"}  # raw bytes, so ranges mean bytes
    if resume is not None:
        headers["Range"] = f"bytes={part.stat().st_size}-"
        if resume.get("validator"):
            headers["If-Range"] = resume["validator"]
    try:
        with requests.get(url, headers=headers, stream=True, timeout=seconds, allow_redirects=True) as response:
            _check_status(url, response)
            total, offset = _plan(url, response, part, resume)
            _save_resume_state(part, response, total)
            digest = hash_file(part) if offset else hashlib.sha256()
            got = _stream(response, part, offset, total, digest, url)
    except ElmoError:  # a DownloadError (an OSError) from the checks above, already saying what went wrong
        raise
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as e:
        raise DownloadError(url, _network_reason(e, seconds, part)) from None
    if total is not None and got != total:
        raise DownloadError(url, f"the server sent {got} of {total} bytes and closed the connection"
                            f"{_kept(part)}")
    _check_expected(url, part, got, digest, expected)
    problem = content_problem(part, file_name_of(url))
    if problem is not None:  # resuming cannot fix a body that is not what it claims to be
        _drop(part)
        raise DownloadError(url, f"the downloaded file {problem}; it was not kept")
    part.with_name(part.name + ".json").unlink(missing_ok=True)
    return Downloaded(got, digest.hexdigest(), response.headers.get("ETag"))


def _check_status(url: str, response: requests.Response) -> None:
    if response.status_code in (200, 206):
        return
    hint = {403: " (access denied: the file may have moved or been made private)",
            404: " (no such file on the server: check the URL)"}.get(response.status_code, "")
    if response.status_code >= 500:
        hint = " (a server error: try again later)"
    raise DownloadError(url, f"HTTP {response.status_code} {response.reason}{hint}")


def _plan(url: str, response: requests.Response, part: Path, resume: dict | None) -> tuple[int | None, int]:
    """(total length or None, bytes of `part` to keep): 206 continues the part, 200 starts over."""
    if response.status_code == 206 and resume is not None:
        match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", response.headers.get("Content-Range", "").strip())
        offset = part.stat().st_size
        if match is None or int(match.group(1)) != offset:
            raise DownloadError(url, f"the server answered a request for bytes {offset}- with Content-Range "
                                f"{response.headers.get('Content-Range')!r}")
        total = None if match.group(2) == "*" else int(match.group(2))
        if resume.get("total") is not None and total is not None and total != resume["total"]:
            part.unlink()  # the file changed on the server since the part was written
            raise DownloadError(url, "the file changed on the server during the download; run again to start over")
        return total, offset
    if response.status_code == 206:
        raise DownloadError(url, "the server sent a partial answer (206) to a request for the whole file")
    length = response.headers.get("Content-Length")
    return (int(length) if length and length.isdigit() else None), 0


def _stream(response: requests.Response, part: Path, offset: int, total: int | None, digest, url: str) -> int:
    """Append the body to `part`; read1 returns what has arrived, so a trickle is seen and held to the
    rate floor (a plain read waits for a whole chunk, and its timeout restarts with every byte)."""
    got, start = offset, time.monotonic()
    floor, grace = _env_seconds(MIN_RATE_ENV, DEFAULT_MIN_RATE), _env_seconds(RATE_GRACE_ENV, DEFAULT_RATE_GRACE)
    with _open_part(part, offset) as f, tqdm(
            total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, delay=1.0,
            desc=part.name[:-len(".part")], leave=False) as bar:
        while chunk := response.raw.read1(CHUNK, decode_content=False):
            f.write(chunk)
            digest.update(chunk)
            got += len(chunk)
            bar.update(len(chunk))
            if total is not None and got > total:
                raise DownloadError(url, f"the server sent more than the {total} bytes it announced")
            elapsed = time.monotonic() - start
            if elapsed > grace and (got - offset) / elapsed < floor:
                f.flush()
                raise DownloadError(url, f"{(got - offset) / elapsed:,.0f} bytes/s over {elapsed:.0f} s, below the "
                                    f"floor of {floor:,.0f} (set {MIN_RATE_ENV} and {RATE_GRACE_ENV} to change it)"
                                    f"{_kept(part)}")
    return got


def _open_part(part: Path, offset: int):
    """`part` for writing at `offset`, never through a link: a link planted there is removed first."""
    if part.is_symlink():
        part.unlink()
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | (0 if offset else os.O_TRUNC)
    f = os.fdopen(os.open(part, flags, 0o666), "wb")
    f.seek(offset)
    f.truncate()
    return f


def _drop(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".json")):
        p.unlink(missing_ok=True)


def file_name_of(url: str) -> str:
    return urlsplit(url).path.rsplit("/", 1)[-1].lower()


def content_problem(path: Path, name: str) -> str | None:
    """Why the file at `path` is not what its name `name` says (None when it is): an HDF5 file must
    open and hold datasets (a biLM's weights its RNN_0), JSON must parse, an archive must list whole."""
    with open(path, "rb") as f:
        head = f.read(512).lstrip().lower()
    if head.startswith(HTML_STARTS) and not name.endswith((".html", ".htm", ".xml")):
        return f"is an HTML page (it starts with {head[:40]!r}), not {name}"
    try:
        if name.endswith((".hdf5", ".h5")):
            return _hdf5_problem(path, name)
        if name.endswith(".json"):
            json.loads(path.read_text(encoding="utf-8"))
        elif name.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            return None if bad is None else f"is a zip archive whose member {bad!r} is damaged (bad CRC)"
        elif name.endswith(ARCHIVE_SUFFIXES):
            with tarfile.open(path) as t:
                t.getmembers()  # reads the whole compressed stream: a truncated one fails here
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError,
            NotImplementedError, RuntimeError) as e:  # an unsupported compression method; an encrypted member
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        return f"is not a readable {name} ({type(e).__name__}: {reason})"
    return None


def _hdf5_problem(path: Path, name: str) -> str | None:
    from elmo.files.hdf5_files import open_hdf5

    try:
        with open_hdf5(path, name) as f:
            if "weights" in name and "RNN_0" not in f:
                return f"is an HDF5 file without the datasets of a biLM's weights (no 'RNN_0'; found {sorted(f)[:5]})"
            if not len(f):
                return "is an empty HDF5 file"
    except ModelFileError as e:
        reason = str(e).split(": ", 1)[-1]
        return reason if reason.startswith("is ") else "is " + reason
    return None


def _check_expected(url: str, part: Path, size: int, digest, expected: RemoteFile | None) -> None:
    """The catalog's size and checksums, where known; a mismatch drops the part (it cannot be resumed)."""
    if expected is None:
        return
    problems = []
    if expected.size is not None and size != expected.size:
        problems.append(f"{size} bytes where {expected.size} were expected")
    if expected.sha256 and digest.hexdigest() != expected.sha256:
        problems.append(f"sha256 {digest.hexdigest()} where {expected.sha256} was expected")
    if expected.md5 and hash_file(part, hashlib.md5()).hexdigest() != expected.md5:
        problems.append(f"an md5 other than the published {expected.md5}")
    if problems:
        part.unlink()
        raise DownloadError(url, "the downloaded file has " + " and ".join(problems) + "; it was not kept")


def _resume_state(part: Path) -> dict | None:
    """What is known about a `.part` left by an earlier try (None: start from zero)."""
    state_file = part.with_name(part.name + ".json")
    if not part.is_file() or part.stat().st_size == 0 or not state_file.is_file():
        return None
    try:
        return json.loads(state_file.read_text(encoding="utf-8"))
    except ValueError:
        return None


def _save_resume_state(part: Path, response: requests.Response, total: int | None) -> None:
    """The validator (strong ETag or Last-Modified) that makes a later Range request safe to append."""
    etag = response.headers.get("ETag")
    validator = etag if etag and not etag.startswith("W/") else response.headers.get("Last-Modified")
    with atomic_path(part.with_name(part.name + ".json")) as tmp:
        Path(tmp).write_text(json.dumps({"validator": validator, "total": total}), encoding="utf-8")


def _kept(part: Path) -> str:
    size = part.stat().st_size if part.is_file() else 0
    return f"; {size} bytes kept, run again to resume" if size else ""


def _network_reason(error: requests.RequestException, seconds: float, part: Path) -> str:
    """One line for each way the network fails."""
    text = str(error)
    if isinstance(error, requests.exceptions.SSLError):
        return f"TLS certificate verification failed ({text[:200]})"
    if isinstance(error, (requests.exceptions.ConnectTimeout, requests.exceptions.ReadTimeout,
                          urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return f"no answer from the server within {seconds:g} s (set {TIMEOUT_ENV} to wait longer){_kept(part)}"
    if isinstance(error, requests.exceptions.ConnectionError):
        if "NameResolutionError" in text or "Name or service not known" in text or "getaddrinfo" in text:
            return "the host name could not be resolved (no network, or a mistyped host)"
        if "Connection refused" in text or "ConnectionRefused" in text:
            return "the server refused the connection"
        if "Read timed out" in text:
            return f"no answer from the server within {seconds:g} s (set {TIMEOUT_ENV} to wait longer){_kept(part)}"
        return f"the connection failed or was cut ({type(error).__name__}){_kept(part)}"
    if isinstance(error, (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError)):
        return f"the server cut the connection in the middle of the file{_kept(part)}"
    return f"the download failed ({type(error).__name__}: {text[:200]}){_kept(part)}"


LOCK_WAIT_ENV = "ELMO_LOCK_WAIT"
DEFAULT_LOCK_WAIT = 900.0  # seconds to wait for another process's download or unpack of the same entry


@contextlib.contextmanager
def entry_lock(entry: CacheEntry):
    """Hold `entry`'s lock (one process downloads or unpacks it); the wait is bounded and names the holder.
    Once held: links planted where the entry's own files go are removed, and earlier runs' leftovers."""
    if entry.folder.is_symlink():
        raise DownloadError(entry.url, f"the cache folder {entry.folder} is a link; remove it (a cache entry is "
                            "never written through a link)")
    entry.folder.mkdir(parents=True, exist_ok=True)
    owner = entry.folder / ".lock.owner"
    for path in (entry.lock_path, owner):
        if path.is_symlink():
            path.unlink()
    lock = FileLock(entry.lock_path)
    try:
        lock.acquire(timeout=2)
    except Timeout:
        wait = _env_seconds(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT)
        print(f"elmo: waiting up to {wait:g} s for {_holder(owner)}, which is fetching {entry.url}", file=sys.stderr)
        try:
            lock.acquire(timeout=wait)
        except Timeout:
            raise DownloadError(entry.url, f"{_holder(owner)} has held {entry.lock_path} for more than {wait:g} s; "
                                f"it may be stuck: stop it, or set {LOCK_WAIT_ENV} to wait longer") from None
    try:
        with atomic_path(owner) as tmp:
            Path(tmp).write_text(f"{os.getpid()} {socket.gethostname()}\n", encoding="utf-8")
        _clean(entry)
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _own_files(entry: CacheEntry) -> tuple[Path, ...]:
    part_state = entry.part_path.with_name(entry.part_path.name + ".json")
    return entry.path, entry.record_path, entry.part_path, part_state


def _holder(owner: Path) -> str:
    try:
        pid, host = owner.read_text(encoding="utf-8").split()[:2]
        return f"process {int(pid)} on {host}"
    except (OSError, ValueError):
        return "another process"


def _clean(entry: CacheEntry) -> None:
    """Remove links where the entry's files go, and temporaries of runs that were killed (unpack folders,
    half-written records): the lock is held, so nothing else is writing them."""
    for path in (*_own_files(entry), entry.extracted):
        if path.is_symlink():
            print(f"elmo: removing the link {path} (a cache entry is never written through a link)", file=sys.stderr)
            path.unlink()
    for path in entry.folder.iterdir():
        if path.name.startswith(".extract-") or (path.name.startswith(".") and path.name.endswith(".tmp")):
            _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def forget(entry: CacheEntry) -> None:
    """Drop everything of `entry` (`elmo download --force`, a damaged archive): the next use fetches it again."""
    for path in (*_own_files(entry), entry.extracted):
        _remove(path)


def forget_reference(reference: str) -> None:
    """`elmo download --force`: every cache entry of a catalog model or URL dropped, under its lock."""
    from .catalog import find_published

    model = find_published(reference)
    for url in [f.url for f in model.remote_files] if model is not None else [reference]:
        entry = CacheEntry.for_url(url)
        if entry.folder.is_dir():
            with entry_lock(entry):
                forget(entry)


def unpack_entry(entry: CacheEntry, archive: Path, budget=None) -> None:
    """Unpack `archive` into the entry (its lock held); a damaged archive of ours leaves the cache. `budget`: as
    extract_archive's (archives.model_budget for a model archive)."""
    try:
        extract_archive(archive, entry.extracted, budget=budget)
    except ModelFileError as e:
        if archive != entry.path:
            raise
        forget(entry)
        raise ModelFileError(f"{e}; the archive was removed from the cache, run again to fetch it again") from None
