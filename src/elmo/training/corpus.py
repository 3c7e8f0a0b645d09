"""Corpus reading for training (docs/format.md section 7, "Batching"): corpus files named by paths or
globs, their sentences through the one line reader (elmo.files.text_lines), and a `SentenceSource` that
yields sentences in a seeded, shuffled order resumable exactly from a small position record, never
holding more than one chunk of lines (a `DocumentSource` yields whole documents, separated by blank
lines, the same way). The batchers that cut them into windows are in batchers.py.
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import IO

import numpy as np

from elmo.embed.documents import check_document_length, is_document_break
from elmo.errors import InputError
from elmo.files.fileio import check_file
from elmo.files.text_lines import decode_line, open_binary, read_line

MAX_LINE_BYTES = 100_000  # far above any real sentence (wiki_corpus' longest is ~3 KB)
CHUNK_LINES = 100_000  # lines shuffled together; memory is one chunk of raw lines


def expand_corpus(patterns: Iterable[str] | str) -> list[str]:
    """Files named by paths or globs, each glob sorted; a pattern that matches nothing is an error."""
    if isinstance(patterns, str):
        patterns = [patterns]
    files: list[str] = []
    for pattern in patterns:
        if os.path.isfile(pattern):
            files.append(pattern)
            continue
        matches = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        if not matches:
            raise InputError(f"{pattern}: no corpus file found (expected a file or a glob of files)")
        files.extend(matches)
    if not files:
        raise InputError("no corpus files given")
    return files


def _open_binary(path: str) -> IO[bytes]:
    check_file(path, "a corpus file", noun="corpus file")
    return open_binary(path)  # the one line reader of elmo.files.text_lines: .gz/.bz2/.xz, damage named


def _read_line(f: IO[bytes], path: str, number: int) -> bytes:
    """One raw line, refusing absurdly long ones before they are read into memory."""
    return read_line(f, path, number, MAX_LINE_BYTES)


def read_sentences(path: str) -> Iterator[tuple[int, list[str]]]:
    """(0-based line number, whitespace-split tokens) for each non-blank line of a corpus file."""
    with _open_binary(path) as f:
        number = 0
        while raw := _read_line(f, path, number):
            words = decode_line(raw, path, number).split()
            if words:
                yield number, words
            number += 1


class SentenceSource:
    """Sentences of a corpus, as token lists, in a reproducible order.

    With `shuffle`, each epoch visits the files in a seeded random order and shuffles each chunk of
    `chunk_lines` lines (bilm-tf shuffles whole shards; a chunk bounds memory). With `shard=(r, n)`,
    only every n-th sentence of each chunk from the r-th on is kept (one DDP rank's share). `loop`
    starts a new epoch after the last file; otherwise the source ends. `state()`/`restore()` give
    the exact position, so a resumed run reads exactly what an uninterrupted one would.
    """

    documents = False  # items are single lines; DocumentSource's are lists of lines

    def __init__(self, files: list[str], seed: int = 0, shuffle: bool = True, loop: bool = True,
                 shard: tuple[int, int] = (0, 1), chunk_lines: int = CHUNK_LINES):
        self.files, self.seed, self.shuffle, self.loop = list(files), seed, shuffle, loop
        self.shard, self.chunk_lines = shard, chunk_lines
        self.epoch, self.file_pos, self.chunk_no, self.index = 0, 0, -1, 0
        self.chunk_start = 0  # the line the current chunk starts at
        self._chunk: list = []
        self._file_ended = True  # so the first call opens file_pos 0, chunk 0
        self._handle: IO[bytes] | None = None
        self._lines_read = 0
        self._produced_this_epoch = False
        self._done = False

    def state(self) -> dict:
        return {"epoch": self.epoch, "file_pos": self.file_pos, "chunk_no": self.chunk_no, "index": self.index,
                "chunk_start": self.chunk_start}

    def restore(self, state: dict) -> None:
        self.close()
        self.epoch, self.file_pos, self.chunk_no = state["epoch"], state["file_pos"], state["chunk_no"]
        self._done = False
        self._produced_this_epoch = True
        if self.chunk_no < 0:
            self._chunk, self._file_ended, self.index = [], True, 0
            return
        self._open(self.file_order()[self.file_pos])
        for _ in range(state.get("chunk_start", self.chunk_no * self.chunk_lines)):  # older checkpoints: fixed chunks
            if not _read_line(self._handle, self._path, self._lines_read):
                break
            self._lines_read += 1
        self._read_chunk()
        self.index = state["index"]

    def file_order(self) -> list[str]:
        if not self.shuffle:
            return self.files
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.files))
        return [self.files[i] for i in order]

    def _open(self, path: str) -> None:
        self.close()
        self._path, self._handle, self._lines_read = path, _open_binary(path), 0

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _read_chunk(self) -> None:
        """Read chunk `chunk_no` of the open file (the handle is positioned at its start): `chunk_lines`
        lines, or for documents at least that many and on to the end of the document."""
        items: list = []
        document: list[str] = []
        self.chunk_start = start = self._lines_read
        self._file_ended = False
        while self._lines_read - start < self.chunk_lines or (self.documents and document):
            raw = _read_line(self._handle, self._path, self._lines_read)
            if not raw:
                self._file_ended = True
                break
            number = self._lines_read
            self._lines_read += 1
            if not self.documents:
                if raw.strip():
                    items.append(decode_line(raw, self._path, number))
            elif is_document_break(line := decode_line(raw, self._path, number)):
                if document:
                    items.append(document)
                document = []
            else:
                document.append(line)
                check_document_length(len(document), self._path, number)
        if document:
            items.append(document)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, self.file_pos, self.chunk_no])
            items = [items[i] for i in rng.permutation(len(items))]
        rank, world = self.shard
        self._chunk = items[rank::world]
        self.index = 0

    def _advance(self) -> bool:
        """Move to the next chunk; False when a non-looping source is finished."""
        if self._file_ended:
            self.close()
            if self.chunk_no >= 0:
                self.file_pos += 1
            if self.file_pos >= len(self.files):
                if not self._produced_this_epoch:
                    raise InputError(
                        f"{', '.join(self.files)}: no {'documents' if self.documents else 'sentences'}"
                        + (f" for rank {self.shard[0]} of {self.shard[1]}" if self.shard[1] > 1 else "")
                        + " (the corpus is empty or only blank lines)"
                    )
                if not self.loop:
                    return False
                self.epoch, self.file_pos, self._produced_this_epoch = self.epoch + 1, 0, False
            self._open(self.file_order()[self.file_pos])
            self.chunk_no = 0
        else:
            self.chunk_no += 1
        self._read_chunk()
        return True

    def next(self) -> list | None:
        """The next sentence's tokens (a document's: a list of them), or None when a non-looping source is done."""
        while self.index >= len(self._chunk):
            if self._done or not self._advance():
                self._done = True
                return None
        item = self._chunk[self.index]
        self.index += 1
        self._produced_this_epoch = True
        return [line.split() for line in item] if self.documents else item.split()

    def __iter__(self) -> Iterator[list]:
        while (item := self.next()) is not None:
            yield item


class DocumentSource(SentenceSource):
    """Documents (lists of sentences' tokens) instead of sentences: blank lines or `-DOCSTART-` lines
    separate them, and a chunk ends at a document's end, so no document is split or shuffled apart."""

    documents = True


def count_targets(files: list[str]) -> int:
    """Tokens a pass over the corpus predicts per direction: each sentence's words plus its end marker."""
    total = 0
    for path in files:
        for _, words in read_sentences(path):
            total += len(words) + 1
    return total


def head_counts(files: list[str], max_tokens: int = 200_000) -> Counter:
    """Token counts of the corpus' first `max_tokens` tokens (files in the given order)."""
    counts: Counter = Counter()
    seen = 0
    for path in files:
        for _, words in read_sentences(path):
            counts.update(words)
            seen += len(words)
            if seen >= max_tokens:
                return counts
    return counts
