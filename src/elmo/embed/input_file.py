"""The input file of `elmo embed`, in one place: its path, its state when the run began, its line limits, its lines.

INPUT is read more than once (counted or planned, embedded, joined), so it must be a regular file that does
not change while the run reads it; every line is held to `LineLimits` and every refusal names the line.
`EmbedInput` carries all of that through a run: embed_file.py and embed_corpus.py open one and ask it for
lines, and neither looks back up here for a piece of the input.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from elmo.errors import InputError
from elmo.files.fileio import check_file, iter_lines
from elmo.files.text_lines import MAX_LINE_BYTES

MAX_LINE_TOKENS = 100_000  # per line; `elmo embed --max-line-tokens` raises it (a sentence is tens of tokens)


@dataclass(frozen=True)
class LineLimits:
    """What one line of `elmo embed`'s INPUT may hold. Bytes are checked as each line is read (the reader
    never holds more), tokens while INPUT is counted, before any line is embedded; either refusal names the
    line and the flag that raises the limit. A line's vectors take (L+1) x 2P x 4 bytes per token (6 KB for
    the bundled model, 12 KB for the original one), so the default token limit bounds one line's output."""

    max_bytes: int = MAX_LINE_BYTES
    max_tokens: int = MAX_LINE_TOKENS

    def __post_init__(self):
        for flag, value in (("--max-line-bytes", self.max_bytes), ("--max-line-tokens", self.max_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{flag} must be a positive integer, found {value!r}")

    def lines(self, path: str | os.PathLike) -> Iterator[tuple[int, str]]:
        """(line number, text) of `path`, a line over `max_bytes` refused by number before it is in memory."""
        return iter_lines(path, self.max_bytes, "--max-line-bytes")

    def check_tokens(self, tokens: int, source: str, number: int) -> None:
        if tokens > self.max_tokens:
            raise InputError(f"{source}, line {number + 1}: {tokens:,} tokens, more than the {self.max_tokens:,} "
                             "allowed in one line (expected one tokenized sentence per line); nothing was embedded; "
                             "--max-line-tokens raises the limit")


def check_input(input_file: str | os.PathLike) -> str:
    """INPUT must be a regular file: it is read more than once (to count, to plan parts, to join)."""
    return check_file(input_file, "a text file, one sentence per line", regular=True)


def input_state(path: str) -> tuple[int, int, int]:
    """What changes when a file is edited or replaced: size, modification time, inode."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def check_unchanged(path: str, before: tuple[int, int, int]) -> None:
    """An INPUT edited during the run would pair old vectors with new text: refuse before OUTPUT is renamed."""
    if input_state(path) != before:
        raise InputError(f"{path}: INPUT changed while this run read it (size, time or file differ from when it "
                         "started); nothing was written to OUTPUT: run again on a file that does not change")


def count_tokens(path: str | os.PathLike, limits: LineLimits | None = None) -> tuple[int, int]:
    """(lines, tokens) of `path`; invalid UTF-8 and a line over `limits` are an error naming the line."""
    limits = limits or LineLimits()
    lines = tokens = 0
    for number, text in limits.lines(path):
        n = len(text.split())
        limits.check_tokens(n, os.fspath(path), number)
        lines += 1
        tokens += n
    return lines, tokens


@dataclass(frozen=True)
class EmbedInput:
    """One run's INPUT: a checked regular file, its state when the run opened it, and the limits on its lines."""

    path: str
    limits: LineLimits = field(default_factory=LineLimits)
    state: tuple[int, int, int] = (0, 0, 0)

    @classmethod
    def open(cls, input_file: str | os.PathLike, limits: LineLimits | None = None) -> EmbedInput:
        """Check that INPUT is a regular file and remember its state, for `check_unchanged` at the end."""
        path = check_input(input_file)
        return cls(path, limits or LineLimits(), input_state(path))

    def lines(self) -> Iterator[tuple[int, str]]:
        """(0-based line number, text) of every line, each held to the byte limit as it is read."""
        return self.limits.lines(self.path)

    def check_tokens(self, tokens: int, number: int) -> None:
        self.limits.check_tokens(tokens, self.path, number)

    def count(self) -> tuple[int, int]:
        """(lines, tokens); reads the whole file, so every line's bytes, text and token count are checked."""
        return count_tokens(self.path, self.limits)

    def check_unchanged(self) -> None:
        check_unchanged(self.path, self.state)
