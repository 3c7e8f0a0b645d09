"""Unpacking a downloaded model archive (.zip, .tar.gz, .tar.xz, .tar.bz2) without trusting it.

Every member is checked before anything is written: no absolute paths, no `..`, no links or device
files, at most MAX_MEMBERS members (counted as a tar's headers stream, from a zip's end record before its
directory is read), and at most `max_bytes` in all (counted as bytes are written, so a lying header cannot pass).
The contents go to a temporary folder beside `dest` that is renamed onto it when complete.
"""

from __future__ import annotations

import contextlib
import json
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

from elmo.errors import ModelFileError

MAX_BYTES = 8 << 30  # far above any published ELMo model, far below a full disk
MAX_MEMBERS = 10_000
REGULAR, DIRECTORY = 0o100000, 0o040000
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
UNREADABLE = (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError,
              NotImplementedError, RuntimeError)


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike, max_bytes: int = MAX_BYTES,
                    budget: Callable[[Path, list[_Member]], int] | None = None) -> Path:
    """Unpack `archive` into the new folder `dest` (which must not exist yet); refuse anything unsafe. `budget`:
    the bytes the archive's own members justify (model_budget), read before anything is written."""
    archive, dest = Path(archive), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        try:
            if zipfile.is_zipfile(archive):
                _extract_zip(archive, tmp, max_bytes, budget)
            elif tarfile.is_tarfile(archive):
                _extract_tar(archive, tmp, max_bytes, budget)
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

    def read_at_most(self, limit: int) -> bytes | None:
        """The member's bytes, or None when it holds more than `limit` (read no further than that): a budget reads
        a small member of an archive before anything is unpacked, whatever size the member claims."""
        with contextlib.closing(self.open()) as f:
            data = f.read(limit + 1)
        return None if len(data) > limit else data


def _unpack(archive: Path, dest: Path, max_bytes: int, members: list[_Member], budget=None) -> None:
    """Check every member's name, kind and the total size first, then copy within the byte budget."""
    _check_count(archive, len(members))
    seen = {}
    for m in members:
        path = _safe_name(archive, m.name)
        if not m.is_plain:
            raise ModelFileError(f"{archive}: member {m.name!r} is a link or special file; refusing to unpack the archive")
        if path.parts in seen and not (m.is_dir and seen[path.parts].is_dir):
            raise ModelFileError(f"{archive}: members {seen[path.parts].name!r} and {m.name!r} have one name; which "
                                 f"is the model's? Refusing to unpack the archive")
        seen[path.parts] = m
    if budget is not None:
        max_bytes = min(max_bytes, budget(archive, members))
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


def _declared_zip_members(archive: Path) -> int | None:
    """The member count a zip's end record declares, read before zipfile reads every central directory entry."""
    end_record = getattr(zipfile, "_EndRecData", None)
    try:
        with open(archive, "rb") as f:
            found = end_record(f) if end_record is not None else None
        return int(found[zipfile._ECD_ENTRIES_TOTAL]) if found else None
    except (*UNREADABLE, AttributeError, IndexError, TypeError, ValueError):
        return None  # zipfile gives the reason


def _extract_zip(archive: Path, dest: Path, max_bytes: int, budget=None) -> None:
    declared = _declared_zip_members(archive)
    if declared is not None:
        _check_count(archive, declared)
    with zipfile.ZipFile(archive) as z:
        members = [_Member(info.filename, info.file_size, info.is_dir(),
                           (info.external_attr >> 16) & 0o170000 in (0, REGULAR, DIRECTORY),  # Unix type, if recorded
                           lambda info=info: z.open(info)) for info in z.infolist()]
        _unpack(archive, dest, max_bytes, members, budget)


def _extract_tar(archive: Path, dest: Path, max_bytes: int, budget=None) -> None:
    with tarfile.open(archive) as t:
        members = []
        for m in t:  # counted as the headers stream: a flood of members stops at MAX_MEMBERS + 1, not at its end
            members.append(_Member(m.name, m.size, m.isdir(), m.isfile() or m.isdir(), lambda m=m: t.extractfile(m)))
            _check_count(archive, len(members))
        _unpack(archive, dest, max_bytes, members, budget)


OPTIONS_BYTES = 1 << 20  # an options.json is a few hundred bytes
OTHER_FILES_BYTES = 64 << 20  # vocabulary, meta.json, README, licence beside the weights
HDF5_OVERHEAD = 16 << 20
MAX_VOCAB_ROWS = 1 << 24


def model_budget(archive: Path, members: list[_Member]) -> int:
    """The bytes a model of the architecture its own options.json declares can take: its weights at float64, its
    softmax (when the archive has one) for the stated vocabulary, and OTHER_FILES_BYTES; read before anything is
    unpacked, so a small archive that inflates past its model is refused. Without options.json (an
    ELMoForManyLangs archive) the general MAX_BYTES."""
    from elmo.files.layout import OPTIONS_NAME, SOFTMAX_NAME
    from elmo.model.options import BiLMConfig

    options = sorted((m for m in members if not m.is_dir and PurePosixPath(m.name).name == OPTIONS_NAME),
                     key=lambda m: len(PurePosixPath(m.name).parts))
    if not options:
        return MAX_BYTES
    member = options[0]
    try:
        data = member.read_at_most(OPTIONS_BYTES)
        if data is None:
            raise ModelFileError(f"{archive}: member {member.name!r} is over {OPTIONS_BYTES} bytes, not an options.json")
        declared = json.loads(data.decode("utf-8"))
        config = BiLMConfig.from_options(declared, source=f"{archive}: member {member.name!r}")
    except ModelFileError:
        raise
    except (*UNREADABLE, ValueError) as e:  # JSON and UTF-8 errors are ValueErrors
        raise ModelFileError(f"{archive}: member {member.name!r} is not a readable options.json ({_reason(e)})") from None
    total = config.parameter_count() * 8 + HDF5_OVERHEAD + OTHER_FILES_BYTES
    if any(PurePosixPath(m.name).name == SOFTMAX_NAME for m in members):
        rows = declared.get("n_tokens_vocab") if isinstance(declared, dict) else None
        if not isinstance(rows, int) or isinstance(rows, bool) or not 0 < rows <= MAX_VOCAB_ROWS:
            rows = MAX_VOCAB_ROWS  # not stated: as many words as a vocabulary file of the allowance can list
        total += rows * (config.projection_dim + 1) * 8 + HDF5_OVERHEAD
    return total


def check_model_loads(model_dir: Path, source: str) -> None:
    """The unpacked model loads as it will at first use (options, weights and their shapes, every value finite);
    a ModelFileError naming `source` otherwise, so that the caller removes what it unpacked."""
    from elmo.errors import ElmoError
    from elmo.files.layout import OPTIONS_NAME, WEIGHTS_NAME, is_manylangs_dir, nlpl_weights
    from elmo.formats.manylangs import load_manylangs
    from elmo.formats.weights import load_bilm

    try:
        if (model_dir / WEIGHTS_NAME).is_file():
            load_bilm(model_dir / OPTIONS_NAME, model_dir / WEIGHTS_NAME)
        elif nlpl_weights(model_dir) is not None:
            load_bilm(model_dir / OPTIONS_NAME, nlpl_weights(model_dir))
        elif is_manylangs_dir(model_dir):
            load_manylangs(model_dir)
    except ElmoError as e:
        raise ModelFileError(f"{source}: the model in the archive does not load, so its unpacked copy was removed: "
                             f"{e}") from None
