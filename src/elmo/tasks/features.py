"""Frozen biLM features, computed once per data set into HDF5 (with our `embed_file`) and read per batch.

The biLM is frozen in these experiments, so its L+1 layers never change for a sentence: computing
them once and training the task model on the cache is what makes the experiments affordable on a
CPU. A cache file's name carries a hash of the model files and of the sentences, so a changed model
or data set never reuses a stale cache. Features with document context (each sentence's vectors from
its whole document, `elmo.embed.documents`) are cached under a name that also carries the documents'
boundaries; sentence-mode names are as they always were.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmo.embed.documents import check_context
from elmo.embed.embedder import Embedder
from elmo.embed.stream import embed_file
from elmo.errors import InputError
from elmo.files.fileio import atomic_path
from elmo.files.hdf5_files import open_hdf5
from elmo.formats.fingerprints import files_fingerprint
from elmo.models import resolve


@dataclass(frozen=True)
class ElmoSpec:
    """Which biLM: a bundled model name or directory, or an options/weights pair. Saved with task models."""

    options_file: str
    weight_file: str
    name: str | None = None
    int8: bool = False  # features from the int8 biLM (`elmo.model.int8`): cached under their own key

    @classmethod
    def resolve(cls, model: str | None = None, options: str | None = None, weights: str | None = None,
                int8: bool = False) -> ElmoSpec:
        files = resolve(model, options, weights).original_files()
        return cls(os.path.abspath(files.options_file), os.path.abspath(files.weight_file), model, int8)

    def embedder(self, batch_size: int = 32, device: str = "cpu") -> Embedder:
        return Embedder.from_files(self.options_file, self.weight_file, device=device, batch_size=batch_size,
                                   int8=self.int8)

    def fingerprint(self) -> str:
        """Hash of the model's bytes (options + weights), not of its path; int8 features get their own."""
        digest = files_fingerprint(self.options_file, self.weight_file)
        return digest + "-int8" if self.int8 else digest

    def num_layers(self) -> int:
        """L+1: the token layer and the LSTM layers, from options.json (checked before any work is done)."""
        from elmo.model.options import read_options
        return read_options(self.options_file).n_layers + 1

    def describe(self) -> str:
        return (self.name or f"{self.options_file} + {self.weight_file}") + (" (int8)" if self.int8 else "")


def bilm_token(token: str) -> str:
    """A token as one whitespace-free item (embed_file splits lines on whitespace)."""
    parts = token.split()
    return "_".join(parts) if parts else "_"


def sentences_fingerprint(sentences: Sequence[Sequence[str]]) -> str:
    h = hashlib.sha256()
    for tokens in sentences:
        h.update(" ".join(bilm_token(t) for t in tokens).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()[:16]


def document_ids(examples: Sequence, context: str, source: str) -> list[int] | None:
    """Each example's document for context "document" (None for "sentence"); data without documents are refused."""
    if check_context(context) == "sentence":
        return None
    ids = [e.document for e in examples]
    if any(d is None for d in ids):
        raise InputError(f"{source}: --context document needs data marked in documents (CoNLL-2003's -DOCSTART- "
                         "lines, CoNLL-U's # newdoc comments); this file has sentences outside any document")
    return ids


def document_lines(documents: Sequence[int]) -> list[int]:
    """The line of each sentence in a cache's text, a blank line before each new document."""
    lines, line = [], 0
    for i, document in enumerate(documents):
        if i > 0 and document != documents[i - 1]:
            line += 1  # the blank line between documents
        lines.append(line)
        line += 1
    return lines


class FeatureCache:
    """Read access to one cache file: `cache[i]` is sentence i's (L+1, n, D) float32 array. `lines`:
    sentence i's line (key) in the file, where blank lines separate documents (default: line i)."""

    def __init__(self, path: str | os.PathLike, lengths: Sequence[int], lines: Sequence[int] | None = None):
        self.path = os.fspath(path)
        self.file = open_hdf5(self.path, "feature cache", InputError)
        self.lengths = list(lengths)
        self.keys = [str(i) for i in (range(len(self.lengths)) if lines is None else lines)]
        first = self.file.get("0")
        expected = int(self.keys[-1]) + 1 if self.keys else 0
        if first is None or len([k for k in self.file if k.isdigit()]) != expected:
            raise InputError(f"{self.path}: expected {len(self.lengths)} sentence datasets; rebuild the cache "
                             "(delete the file)")
        self.num_layers, _, self.dim = first.shape

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self._read(i, slice(None))

    def layer(self, i: int, layer: int) -> np.ndarray:
        """(n, D): one layer of sentence i, read without the others."""
        return self._read(i, layer)

    def _read(self, i: int, layers) -> np.ndarray:
        data = self.file[self.keys[i]]
        if data.shape[1] != self.lengths[i]:
            raise InputError(f"{self.path}: sentence {i} has {data.shape[1]} vectors, expected {self.lengths[i]} "
                             "tokens; the cache does not match the data (delete it to rebuild)")
        return data[layers]

    def close(self) -> None:
        self.file.close()


def build_cache(spec: ElmoSpec, sentences: Sequence[Sequence[str]], cache_dir: str | os.PathLike, tag: str,
                batch_size: int = 32, device: str = "cpu", embedder: Embedder | None = None,
                documents: Sequence[int] | None = None) -> FeatureCache:
    """The cache of `sentences` under this model, computed now unless an up-to-date one exists.

    `documents` (each sentence's document, consecutive sentences of one document together): features
    with document context (`document_ids`); None: each sentence on its own."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    safe_tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
    lines = None if documents is None else document_lines(documents)
    context = "" if lines is None else f".document-{sentences_fingerprint([[str(n)] for n in lines])}"
    path = cache_dir / f"{safe_tag}.{spec.fingerprint()}.{sentences_fingerprint(sentences)}{context}.hdf5"
    if not path.exists():
        embedder = embedder or spec.embedder(batch_size=batch_size, device=device)
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            text = os.path.join(tmp, "sentences.txt")
            with atomic_path(text) as t, open(t, "w", encoding="utf-8") as f:
                for i, tokens in enumerate(sentences):
                    if lines is not None and i > 0 and lines[i] > lines[i - 1] + 1:
                        f.write("\n")  # a blank line: the next document starts
                    f.write(" ".join(bilm_token(tok) for tok in tokens) + "\n")
            embed_file(embedder, text, path, output_format="all", batch_size=batch_size, forget_sentences=True,
                       context="sentence" if lines is None else "document")
    return FeatureCache(path, [len(s) for s in sentences], lines)
