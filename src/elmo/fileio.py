"""Small file helpers: atomic writes, and reading tokenized text (plain or .gz) line by line."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tempfile
from collections.abc import Iterator

from .errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    An interrupted run therefore never leaves a file under the final name that looks complete.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a file path to write")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InputError(f"{path}: the directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file a normal mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a UTF-8 text file for reading, transparently gunzipping `*.gz`; strict decoding."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a text file")
    if not os.path.exists(path):
        raise InputError(f"{path}: file not found")
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="strict", newline="\n")
    return open(path, encoding="utf-8", errors="strict", newline="\n")


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(0-based line number, line without its newline) for a UTF-8 file; invalid UTF-8 names the line.

    Reads bytes and decodes each line, so an error points at the exact line, and memory does not
    depend on the file's size.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a text file")
    if not os.path.exists(path):
        raise InputError(f"{path}: file not found")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for number, raw in enumerate(f):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{path}, line {number + 1}: invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
                ) from None
            yield number, text.rstrip("\r\n")
