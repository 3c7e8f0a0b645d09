"""A model's identity, for the caches and part files that must not outlive the model that made them.

One notion, two keys, both here: `model_fingerprint` hashes a loaded biLM (architecture and every
weight), so the same model gives the same key wherever it was loaded from (part files of
`elmo embed`, the lab's caches); `files_fingerprint` hashes the bytes of options.json +
weights.hdf5 without loading them (the task feature caches, named before any model is built). Each
key is computed as it always was, so caches written before stay valid.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import TYPE_CHECKING

from elmo.files.fileio import hash_file

if TYPE_CHECKING:
    from elmo.model.bilm import BiLM


def model_fingerprint(bilm: BiLM) -> str:
    """sha256 of the architecture and every weight: the same model gives the same hash wherever it was
    loaded from, so caches and part files can tell whether they were made by this model."""
    h = hashlib.sha256(repr(bilm.config).encode())
    if bilm.config.token_input is not None:  # only for lexicon models: the original models' hashes stay as they were
        h.update(repr(bilm.config.token_input).encode())
        h.update(bilm.lexicon.fingerprint())
    for name, tensor in sorted(bilm.state_dict().items()):
        array = tensor.detach().cpu().contiguous().numpy()
        h.update(f"{name}:{array.dtype}:{array.shape}".encode())
        h.update(memoryview(array.reshape(-1)).cast("B"))
    return h.hexdigest()


def files_fingerprint(options_file: str | os.PathLike, weight_file: str | os.PathLike) -> str:
    """The first 16 hex digits of sha256(options bytes + weights bytes): the model's files, not their path."""
    return _files_hash(os.fspath(options_file), os.fspath(weight_file),
                       os.path.getmtime(weight_file), os.path.getsize(weight_file))


@functools.lru_cache(maxsize=8)
def _files_hash(options_file: str, weight_file: str, mtime: float, size: int) -> str:
    """Hashed once per process and file version: a real weight file is hundreds of MB."""
    h = hashlib.sha256()
    for path in (options_file, weight_file):
        hash_file(path, h)
    return h.hexdigest()[:16]
