"""Small file helpers: atomic writes (HDF5 ones safe on a full disk), and reading tokenized text line by line."""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import json
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import h5py

from elmo.errors import (
    ElmoError,
    InputError,
    InputFileNotFound,
    ModelFileError,
    ModelFileNotFound,
    OutputError,
    not_found_error,
)

from .output_paths import check_output_kind
from .text_lines import MAX_LINE_BYTES, decode_line, iter_raw_lines


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    An interrupted run therefore never leaves a file under the final name that looks complete.
    """
    path = os.fspath(path)
    check_output_kind(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputFileNotFound(f"{path}: the directory {directory} does not exist")
    tmp = _create_beside(path, suffix, folder=False)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def atomic_files(path: str | os.PathLike) -> Iterator[str]:
    """Yield a new temporary folder beside `path` in which to write `path`'s file (its base name) and
    companions named after it (e.g. `NAME.data`); on success each is renamed beside `path`, the
    companions first and `path` last, so `path` never names a file whose companions are missing."""
    import shutil

    path = check_output_kind(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputFileNotFound(f"{path}: the directory {directory} does not exist")
    folder = _create_beside(path, ".tmp", folder=True)
    try:
        yield folder
        name = os.path.basename(path)
        for entry in sorted(os.listdir(folder), key=lambda n: n == name):  # path itself last
            os.replace(os.path.join(folder, entry), os.path.join(directory, entry))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _create_beside(path: str, suffix: str, folder: bool) -> str:
    """A new, empty file or folder under a fresh name beside `path`, made with the usual mode (0666 or
    0777 less the umask, applied by the system: mkstemp/mkdtemp would make it private, and reading the
    umask means setting it, which is not thread-safe)."""
    directory = os.path.dirname(os.path.abspath(path))
    for _ in range(100):
        name = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}{suffix}")
        try:
            if folder:
                os.mkdir(name, 0o777)
            else:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return name
        except FileExistsError:
            continue
    raise OutputError(f"{path}: could not create a temporary name beside it")


def check_file(path: str | os.PathLike, what: str = "a text file", regular: bool = False, noun: str = "file",
               error: type[ElmoError] = InputError) -> str:
    """`path` as a str, if it names an existing file (with `regular`, not a pipe or device, which can be
    read only once); else an `error` saying what it is instead ("<path>: <noun> not found")."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise error(f"{path}: is a directory, expected {what}")
    if not os.path.exists(path):
        raise not_found_error(error)(f"{path}: {noun} not found")
    if regular and not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file (a pipe or a device can be read only once, and this command "
                         "reads its input more than once); save it to a file first")
    return path


def hash_file(path: str | os.PathLike, digest=None):
    """Feed a file's bytes to `digest` (a new sha256 by default) in 1 MB chunks; memory does not grow."""
    digest = hashlib.sha256() if digest is None else digest
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest


def read_text(path: str | os.PathLike, what: str) -> str:
    """A whole UTF-8 file of a model (`what`: e.g. "options file"); a `ModelFileError` says what is wrong."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise ModelFileNotFound(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path}: is a directory, expected {what}") from None
    except UnicodeDecodeError as e:
        raise ModelFileError(f"{path}: {what} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path: str | os.PathLike, what: str) -> Any:
    """`read_text`, parsed as JSON; invalid JSON names the line and column."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelFileError(f"{os.fspath(path)}: {what} is not valid JSON (line {e.lineno}, column {e.colno}: "
                             f"{e.msg})") from None


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a UTF-8 text file for reading, transparently gunzipping `*.gz`; strict decoding."""
    path = check_file(path)
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="strict", newline="\n")
    return open(path, encoding="utf-8-sig", errors="strict", newline="\n")  # -sig: a leading BOM is not text


def iter_lines(path: str | os.PathLike, max_bytes: int = MAX_LINE_BYTES,
               flag: str | None = None) -> Iterator[tuple[int, str]]:
    """(0-based line number, line without its newline) for a UTF-8 file (plain, .gz, .bz2 or .xz); every
    refusal (invalid UTF-8, NUL bytes, CR-only line ends, a line over `max_bytes`) names the line.

    Reads bytes and decodes each line (elmo.files.text_lines), so memory does not depend on the file's size.
    """
    path = check_file(path)
    for number, raw in iter_raw_lines(path, max_bytes, flag):
        yield number, decode_line(raw, path, number).rstrip("\r\n")


class GuardedFile(io.RawIOBase):
    """The bytes of an HDF5 file being written, passed through Python so that a failed write cannot crash.

    HDF5 does not survive a failed write: after ENOSPC its metadata cache is inconsistent, closing the
    file raises, and the process segfaults at exit (measured: `elmo embed` into a full tmpfs, exit 139).
    Here a failed write is remembered and reported to HDF5 as done; that write and every later one are
    kept in memory (`_unwritten`, read back from there), so HDF5 sees a consistent file and closes
    normally, and `check()` raises the remembered error as an `OutputError`. Callers check after each
    write, so the memory held is about one write plus the metadata flushed at close. The file on disk
    is garbage after a failure and is meant to be removed (`hdf5_output` does).
    """

    def __init__(self, path: str, name: str) -> None:
        super().__init__()
        self._file = open(path, "w+b", buffering=0)  # noqa: SIM115 (closed in close())
        self.name_for_errors = name
        self.error: OSError | None = None
        self._unwritten: list[tuple[int, bytes]] = []  # (offset, bytes) of the writes since the failure

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        start = self._file.tell()
        view = memoryview(buffer).cast("B")
        n = self._file.readinto(view) or 0
        for offset, data in self._unwritten:  # in write order, so later writes win
            lo, hi = max(start, offset), min(start + len(view), offset + len(data))
            if lo < hi:
                view[n:max(n, hi - start)] = bytes(max(0, hi - start - n))  # zeros between EOF and this write
                view[lo - start:hi - start] = data[lo - offset:hi - offset]
                n = max(n, hi - start)
        self._file.seek(start + n)
        return n

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        start = self._file.tell()
        if self.error is None:
            try:
                self._write(view)
                return len(view)
            except OSError as e:
                self.error = e
        self._unwritten.append((start, bytes(view)))  # a copy: HDF5 reuses its buffer
        self._file.seek(start + len(view))
        return len(view)

    def _write(self, view: memoryview) -> None:
        """Write all of `view` at the current offset (a seam for tests that simulate a full disk)."""
        while view:
            view = view[self._file.write(view):]

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def truncate(self, size: int | None = None) -> int:
        if self.error is not None:
            return self.tell() if size is None else size
        try:
            return self._file.truncate(size)
        except OSError as e:
            self.error = e
            return self.tell() if size is None else size

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()

    def check(self) -> None:
        """Raise the first failed write as one clear line."""
        if self.error is not None:
            raise OutputError(f"{self.name_for_errors}: cannot write ({write_failure(self.error)}); nothing was "
                              "written under that name") from None


def write_failure(error: OSError) -> str:
    """The OS's reason, and for a full disk what to do about it."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += "; free space there and run the command again"
    return reason


@contextlib.contextmanager
def hdf5_output(path: str | os.PathLike, libver: str | None = None) -> Iterator[tuple[h5py.File, Callable[[], None]]]:
    """An HDF5 file written atomically (see `atomic_path`) and safely on a full disk (see `GuardedFile`).

    Yields the open file and a `check()` to call after each write that matters, so a full disk stops
    the work at once rather than at the end.
    """
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        raw = GuardedFile(tmp, path)
        try:
            with h5py.File(raw, "w", libver=libver) as f:
                yield f, raw.check
        except Exception:
            raw.check()  # a failed write explains whatever was raised after it
            raise
        finally:
            raw.close()
        raw.check()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, replace: tuple[str, ...] = ()) -> Iterator[str]:
    """Yield a new temporary folder beside `path`; on success it becomes `path` in one rename.

    Files of an existing `path` whose names are not in `replace` are carried over (hard links, else
    copies), so a finished write replaces exactly `replace`; a failed one leaves `path` as it was,
    never a mix of old and new files.
    """
    import shutil

    path = os.fspath(path).rstrip(os.sep) or os.sep
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputFileNotFound(f"{path}: the directory {parent} does not exist")
    check_output_kind(path, folder=True)
    tmp = _create_beside(path, ".tmp", folder=True)
    try:
        yield tmp
        if not os.path.isdir(path):
            os.replace(tmp, path)
            return
        for entry in os.scandir(path):
            if entry.name not in replace and not os.path.exists(os.path.join(tmp, entry.name)):
                target = os.path.join(tmp, entry.name)
                if entry.is_dir(follow_symlinks=False):
                    shutil.copytree(entry.path, target, symlinks=True, copy_function=_link_or_copy)
                else:
                    _link_or_copy(entry.path, target)
        old = tempfile.mkdtemp(prefix="." + os.path.basename(path) + ".", suffix=".old", dir=parent)
        os.replace(path, os.path.join(old, "previous"))
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _link_or_copy(source: str, target: str) -> str:
    import shutil

    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)
    return target


def json_text(value, indent: int | None = None) -> str:
    """Strict JSON (RFC 8259): a NaN or infinite number becomes null, never the non-JSON `NaN`/`Infinity`."""
    import json
    import math

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(value), indent=indent, allow_nan=False)


@contextlib.contextmanager
def output_lock(output_file: str | os.PathLike, flag: str = "OUTPUT") -> Iterator[None]:
    """One writer per output for the whole run: `.OUTPUT.lock` beside it, an OS lock (so a dead process's
    lock is free) holding the writer's PID; a second run refuses in one line naming that process."""
    import fcntl

    output_file = os.fspath(output_file)
    directory, name = os.path.split(os.path.abspath(output_file))
    path = os.path.join(directory, f".{name}.lock")
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except OSError as e:
            raise OutputError(f"{output_file}: cannot create its lock {path} ({write_failure(e)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise OutputError(f"{output_file}: another run (process {holder}) is writing this {flag}; wait for it "
                              f"to finish or stop it (its lock: {path})") from None
        if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
            break  # the file we locked is still the lock (a finishing run may have removed it meanwhile)
        os.close(fd)
    else:
        raise OutputError(f"{output_file}: could not take its lock {path}")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)
