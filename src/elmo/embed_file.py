"""Embed a text file into HDF5 in the layout of AllenNLP's former `allennlp elmo` command (doc 6.2)."""

from __future__ import annotations

import json
import os
from collections import deque
from typing import Iterator

import h5py
import numpy as np
from tqdm import tqdm

from .embedder import LAYER_CHOICES, Embedder
from .errors import InputError
from .fileio import atomic_path, iter_lines


def read_sentences(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """(line number, whitespace tokens) per line; invalid UTF-8 is an error naming the line."""
    for number, line in iter_lines(path):
        yield number, line.split()


def count_tokens(path: str | os.PathLike) -> tuple[int, int]:
    lines = tokens = 0
    for _, tokens_of_line in read_sentences(path):
        lines += 1
        tokens += len(tokens_of_line)
    return lines, tokens


def embed_file(
    embedder: Embedder,
    input_file: str | os.PathLike,
    output_file: str | os.PathLike,
    output_format: str = "all",
    batch_size: int = 64,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    overwrite: bool = True,
    progress: bool = True,
) -> None:
    """Write one dataset per input line: (L+1, n, D) for "all", (n, D) for "top"/"average".

    Keys are 0-based line numbers (or the sentence text with `use_sentence_keys`); an empty line
    gives an empty dataset, so keys stay aligned with lines. Unless `forget_sentences` or
    `use_sentence_keys`, a `sentence_to_index` dataset maps each sentence to its key. The file is
    written under a temporary name and renamed at the end.
    """
    if output_format not in LAYER_CHOICES:
        raise ValueError(f"output_format must be one of {LAYER_CHOICES}, found {output_format!r}")
    output_file = os.fspath(output_file)
    if os.path.isdir(output_file):
        raise InputError(f"{output_file}: is a directory; OUTPUT must be a file path")
    if os.path.exists(output_file) and not overwrite:
        raise InputError(f"{output_file}: already exists (pass --overwrite to replace it)")
    n_lines, n_tokens = count_tokens(input_file)  # also validates UTF-8 before any work is done
    keep_index = not (forget_sentences or use_sentence_keys)
    texts: dict[str, str] = {}
    lines = (tokens for _, tokens in read_sentences(input_file))
    bar = tqdm(total=n_tokens, unit="tok", unit_scale=True, desc="embedding", disable=not progress, dynamic_ncols=True)
    with atomic_path(output_file) as tmp, h5py.File(tmp, "w") as out:
        for number, (tokens, vectors) in enumerate(_paired(lines, embedder, output_format, batch_size)):
            sentence = " ".join(tokens)
            key = sentence if use_sentence_keys else str(number)
            if use_sentence_keys and key in out:
                raise InputError(f"{input_file}, line {number + 1}: duplicate sentence, cannot be a key twice: {sentence!r}")
            if use_sentence_keys and not key:
                raise InputError(f"{input_file}, line {number + 1}: an empty line cannot be a sentence key")
            out.create_dataset(key, data=vectors.astype(np.float32, copy=False))
            if keep_index:
                texts[sentence] = key
            bar.update(len(tokens))
        if keep_index:
            table = out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype(encoding="utf-8"))
            table[0] = json.dumps(texts)
    bar.close()


def _paired(lines, embedder: Embedder, output_format: str, batch_size: int):
    """Pair each input sentence with its vectors while reading the input only once."""
    pending: deque[list[str]] = deque()

    def remember(source):
        for tokens in source:
            pending.append(tokens)
            yield tokens

    for vectors in embedder.embed_sentences(remember(lines), layers=output_format, batch_size=batch_size):
        yield pending.popleft(), vectors
