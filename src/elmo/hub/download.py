"""One HTTP(S) download into a `.part` file: resumable, length-checked, hashed as it streams, with a bar.

`requests` does the HTTP (TLS certificates always verified: `verify` is never turned off); every
network fault becomes one `DownloadError` that names the URL. The `.part` file survives a failure
so that the next try continues where this one stopped, when the server accepts ranges.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import requests
from tqdm import tqdm

from ..errors import DownloadError
from ..fileio import atomic_path, hash_file
from .catalog import RemoteFile

TIMEOUT_ENV = "ELMO_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT = 30.0  # seconds without a byte (connect or read) before a download is given up
CHUNK = 1 << 16  # a cut connection loses at most this much of what arrived


@dataclass(frozen=True)
class Downloaded:
    size: int
    sha256: str
    etag: str | None


def timeout_seconds(timeout: float | None = None) -> float:
    if timeout is not None:
        return timeout
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)


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
    except requests.RequestException as e:
        raise DownloadError(url, _network_reason(e, seconds, part)) from None
    if total is not None and got != total:
        raise DownloadError(url, f"the server sent {got} of {total} bytes and closed the connection"
                            f"{_kept(part)}")
    _check_expected(url, part, got, digest, expected)
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
    got = offset
    with open(part, "r+b" if offset else "wb") as f, tqdm(
            total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, delay=1.0,
            desc=part.name[:-len(".part")], leave=False) as bar:
        f.seek(offset)
        f.truncate()
        for chunk in response.iter_content(CHUNK):
            f.write(chunk)
            digest.update(chunk)
            got += len(chunk)
            bar.update(len(chunk))
            if total is not None and got > total:
                raise DownloadError(url, f"the server sent more than the {total} bytes it announced")
    return got


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
    if isinstance(error, (requests.exceptions.ConnectTimeout, requests.exceptions.ReadTimeout)):
        return f"no answer from the server within {seconds:g} s (set {TIMEOUT_ENV} to wait longer){_kept(part)}"
    if isinstance(error, requests.exceptions.ConnectionError):
        if "NameResolutionError" in text or "Name or service not known" in text or "getaddrinfo" in text:
            return "the host name could not be resolved (no network, or a mistyped host)"
        if "Connection refused" in text or "ConnectionRefused" in text:
            return "the server refused the connection"
        if "Read timed out" in text:
            return f"no answer from the server within {seconds:g} s (set {TIMEOUT_ENV} to wait longer){_kept(part)}"
        return f"the connection failed or was cut ({type(error).__name__}){_kept(part)}"
    if isinstance(error, requests.exceptions.ChunkedEncodingError):
        return f"the server cut the connection in the middle of the file{_kept(part)}"
    return f"the download failed ({type(error).__name__}: {text[:200]}){_kept(part)}"
