"""The one reader of tokenized text, line by line (`elmo embed`, `elmo vocab`, training corpora, task files).

Each line is read as bytes with a size limit (a file without newlines cannot fill memory), and
decoded on its own, so every refusal names the file and the line: invalid UTF-8, NUL bytes (UTF-16
or UTF-32 without a byte-order mark, or a binary file), a carriage return inside a line (CR-only
line ends, which would make a whole file one sentence), and damaged .gz/.bz2/.xz input.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from collections.abc import Iterator
from typing import IO

from elmo.errors import InputError

MAX_LINE_BYTES = 4 << 20  # per line; `elmo embed --max-line-bytes` raises it (a sentence is a few hundred bytes)
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
DAMAGED = (EOFError, OSError, lzma.LZMAError, zlib.error, ValueError)


def open_binary(path: str) -> IO[bytes]:
    """`path` for reading bytes, decompressed by its suffix (.gz, .bz2, .xz)."""
    opener = OPENERS.get(os.path.splitext(path)[1].lower(), open)
    try:
        return opener(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror or e})") from None


def read_line(f: IO[bytes], path: str, number: int, max_bytes: int = MAX_LINE_BYTES, flag: str | None = None) -> bytes:
    """One raw line (b"" at the end), refusing one longer than `max_bytes` before it is in memory."""
    try:
        raw = f.readline(max_bytes + 1)
    except DAMAGED as e:
        kind = os.path.splitext(path)[1] or "file"
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise InputError(f"{path}, line {number + 1}: a damaged or truncated {kind} ({type(e).__name__}: "
                         f"{reason})") from None
    if len(raw) > max_bytes:
        raise InputError(f"{path}, line {number + 1}: longer than {max_bytes:,} bytes; expected one tokenized sentence "
                         "per line (is this a whole document, or not a text file?)"
                         + (f"; {flag} raises the limit" if flag else ""))
    return raw


def iter_raw_lines(path: str, max_bytes: int = MAX_LINE_BYTES, flag: str | None = None) -> Iterator[tuple[int, bytes]]:
    """(0-based line number, raw bytes with the newline) for every line of `path`."""
    with open_binary(path) as f:
        number = 0
        while raw := read_line(f, path, number, max_bytes, flag):
            yield number, raw
            number += 1


def invalid_utf8(source: str, number: int, raw: bytes, error: UnicodeDecodeError) -> InputError:
    """The one message for a line that is not UTF-8: where, and which byte."""
    return InputError(f"{source}, line {number + 1}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at column "
                      f"{error.start + 1})")


def decode_line(raw: bytes, source: str, number: int) -> str:
    """One line's bytes as text (a leading BOM, which editors write, is not text); invalid UTF-8, NUL
    bytes and a carriage return inside the line are an `InputError` naming the line."""
    if b"\0" in raw:
        raise InputError(f"{source}, line {number + 1}: {_nul_reason(raw)}")
    try:
        text = raw.decode("utf-8-sig" if number == 0 else "utf-8")
    except UnicodeDecodeError as e:
        raise invalid_utf8(source, number, raw, e) from None
    if "\r" in text.rstrip("\r\n"):
        raise InputError(f"{source}, line {number + 1}: a carriage return inside the line (column "
                         f"{text.index(chr(13)) + 1}); lines must end with LF or CRLF (a file with CR-only line ends "
                         "would be read as one sentence: convert it with `tr '\\r' '\\n'`)")
    return text


def _nul_reason(raw: bytes) -> str:
    at = raw.index(b"\0")
    odd, even = raw[1::2].count(0), raw[0::2].count(0)
    if len(raw) > 7 and raw.count(0) > 0.6 * len(raw):
        guess = "UTF-32 text without a byte-order mark"
    elif len(raw) > 3 and odd > 0.8 * (len(raw) // 2) and even < odd:
        guess = "UTF-16LE text without a byte-order mark"
    elif len(raw) > 3 and even > 0.8 * (len(raw) // 2) and odd < even:
        guess = "UTF-16BE text without a byte-order mark"
    else:
        guess = "UTF-16/UTF-32 text without a byte-order mark, or a binary file"
    return (f"a NUL byte at column {at + 1} ({raw.count(0)} in the line): this looks like {guess}; expected UTF-8 "
            "(convert it with iconv -t UTF-8)")

