"""Unpacking a downloaded model archive (.zip, .tar.gz, .tar.xz, .tar.bz2) without trusting it.

Every member is checked before anything is written: no absolute paths, no `..`, no links or device
files, and at most `max_bytes` in all (counted as bytes are written, so a lying header cannot pass).
The contents go to a temporary folder beside `dest` that is renamed onto it when complete.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO, NamedTuple

from ..errors import ModelFileError

MAX_BYTES = 8 << 30  # far above any published ELMo model, far below a full disk
MAX_MEMBERS = 10_000
REGULAR, DIRECTORY = 0o100000, 0o040000
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
UNREADABLE = (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError,
              NotImplementedError, RuntimeError)


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike, max_bytes: int = MAX_BYTES) -> Path:
    """Unpack `archive` into the new folder `dest` (which must not exist yet); refuse anything unsafe."""
    archive, dest = Path(archive), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        try:
            if zipfile.is_zipfile(archive):
                _extract_zip(archive, tmp, max_bytes)
            elif tarfile.is_tarfile(archive):
                _extract_tar(archive, tmp, max_bytes)
            else:
                raise ModelFileError(f"{archive}: not a zip or tar archive (.zip, .tar.gz, .tar.xz, .tar.bz2)")
        except UNREADABLE as e:  # a truncated or damaged archive, found while listing it
            raise ModelFileError(f"{archive}: a damaged archive ({_reason(e)})") from None
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: " + (str(error).strip().splitlines() or [""])[0][:160]


def _safe_name(archive: Path, name: str) -> PurePosixPath:
    """The member's relative path, or a ModelFileError naming the member that would escape."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith(("/", "\\")) or (path.parts and ":" in path.parts[0]):
        raise ModelFileError(f"{archive}: member {name!r} has an absolute path; refusing to unpack the archive")
    if ".." in path.parts:
        raise ModelFileError(f"{archive}: member {name!r} points outside the archive's folder (..); refusing to unpack it")
    return path


def _copy_limited(source, target: Path, archive: Path, budget: list[int], max_bytes: int) -> None:
    """Copy a member's bytes, stopping as soon as the archive's total passes `max_bytes`."""
    with open(target, "wb") as out:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            budget[0] += len(chunk)
            if budget[0] > max_bytes:
                raise ModelFileError(f"{archive}: unpacks to more than {max_bytes} bytes; refusing to unpack it "
                                     "(a damaged or hostile archive)")
            out.write(chunk)


def _check_count(archive: Path, count: int) -> None:
    if count > MAX_MEMBERS:
        raise ModelFileError(f"{archive}: {count} members, more than the {MAX_MEMBERS} a model archive can have")


class _Member(NamedTuple):
    """What extraction needs of a zip or tar member."""

    name: str
    size: int
    is_dir: bool
    is_plain: bool  # a regular file or a folder: no link, device or fifo
    open: Callable[[], IO[bytes]]


def _unpack(archive: Path, dest: Path, max_bytes: int, members: list[_Member]) -> None:
    """Check every member's name, kind and the total size first, then copy within the byte budget."""
    _check_count(archive, len(members))
    for m in members:
        _safe_name(archive, m.name)
        if not m.is_plain:
            raise ModelFileError(f"{archive}: member {m.name!r} is a link or special file; refusing to unpack the archive")
    if sum(m.size for m in members) > max_bytes:
        raise ModelFileError(f"{archive}: unpacks to more than {max_bytes} bytes; refusing to unpack it")
    budget = [0]
    for m in members:
        target = dest.joinpath(*_safe_name(archive, m.name).parts)
        try:
            if m.is_dir:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(m.open()) as source:
                _copy_limited(source, target, archive, budget, max_bytes)
        except UNREADABLE as e:  # bad CRC, unknown method, a folder and a file of one name, a name too long
            raise ModelFileError(f"{archive}: member {m.name!r} cannot be unpacked ({_reason(e)})") from None


def _extract_zip(archive: Path, dest: Path, max_bytes: int) -> None:
    with zipfile.ZipFile(archive) as z:
        members = [_Member(info.filename, info.file_size, info.is_dir(),
                           (info.external_attr >> 16) & 0o170000 in (0, REGULAR, DIRECTORY),  # Unix type, if recorded
                           lambda info=info: z.open(info)) for info in z.infolist()]
        _unpack(archive, dest, max_bytes, members)


def _extract_tar(archive: Path, dest: Path, max_bytes: int) -> None:
    with tarfile.open(archive) as t:
        members = [_Member(m.name, m.size, m.isdir(), m.isfile() or m.isdir(), lambda m=m: t.extractfile(m))
                   for m in t.getmembers()]
        _unpack(archive, dest, max_bytes, members)
