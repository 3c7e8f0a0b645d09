"""The biLM's softmax as a word predictor: vocab.txt + softmax.hdf5 (datasets W (V, P), b (V,)).

Forward and backward LMs share it (paper section 3.1). The output of the top LSTM layer of one
direction at a position gives a distribution over the next (forward) or previous (backward) word.
"""

from __future__ import annotations

import os

import h5py
import numpy as np

from ..errors import ModelFileError

UNK = "<UNK>"


def read_vocab(path: str | os.PathLike) -> list[str]:
    words = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                raise ModelFileError(f"{path}: line {n} is empty; a vocabulary has one token per line")
            words.append(parts[0])
    if not words:
        raise ModelFileError(f"{path}: the vocabulary is empty")
    return words


class LMHead:
    """Full softmax over the vocabulary for P-dimensional LSTM outputs."""

    def __init__(self, vocab: list[str], weight: np.ndarray, bias: np.ndarray, source: str = ""):
        if weight.ndim != 2 or weight.shape[0] != len(vocab) or bias.shape != (len(vocab),):
            v = len(vocab)
            raise ModelFileError(f"{source}: softmax W {weight.shape} and b {bias.shape} do not match "
                                 f"a vocabulary of {v} tokens (expected W ({v}, P), b ({v},))")
        self.vocab = vocab
        self.index = {w: i for i, w in enumerate(vocab)}
        self.weight = weight.astype(np.float32)
        self.bias = bias.astype(np.float32)
        self.source = source

    @property
    def dim(self) -> int:
        return self.weight.shape[1]

    @classmethod
    def from_files(cls, vocab_file: str | os.PathLike, softmax_file: str | os.PathLike,
                   projection_dim: int | None = None) -> "LMHead":
        vocab = read_vocab(vocab_file)
        try:
            with h5py.File(softmax_file, "r") as f:
                names = [n for n in ("W", "softmax/W") if n in f]
                if not names:
                    raise ModelFileError(f"{softmax_file}: no dataset 'W' (the softmax weights, (V, P))")
                w = f[names[0]][...]
                b_name = names[0][:-1] + "b"
                if b_name not in f:
                    raise ModelFileError(f"{softmax_file}: no dataset '{b_name}' (the softmax bias, (V,))")
                b = f[b_name][...]
        except OSError as e:
            raise ModelFileError(f"{softmax_file}: not a readable HDF5 file ({e})") from e
        head = cls(vocab, w, b, source=os.fspath(softmax_file))
        if projection_dim is not None and head.dim != projection_dim:
            raise ModelFileError(f"{softmax_file}: W has {head.dim} columns; this biLM's LSTM outputs have "
                                 f"{projection_dim} (expected W ({len(vocab)}, {projection_dim}))")
        return head

    def id_of(self, token: str) -> int:
        return self.index.get(token, self.index.get(UNK, -1))

    def predict(self, hidden: np.ndarray, targets: list[str], k: int = 5) -> list[dict]:
        """For each row of hidden (n, P): top-k words with probabilities and the target's own."""
        logits = hidden.astype(np.float32) @ self.weight.T + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        out = []
        for row, target in zip(probs, targets):
            top = np.argsort(-row, kind="stable")[:k]
            tid = self.id_of(target)
            entry = {"top": [{"word": self.vocab[i], "p": round(float(row[i]), 5)} for i in top],
                     "target": target, "in_vocab": target in self.index}
            if tid >= 0:
                entry["target_p"] = round(float(row[tid]), 6)
                entry["target_rank"] = int((row > row[tid]).sum()) + 1
            out.append(entry)
        return out
