"""The biLM's softmax as a word predictor: vocab.txt + softmax.hdf5 (datasets W (V, P), b (V,)).

Forward and backward LMs share it (paper section 3.1). The output of the top LSTM layer of one
direction at a position gives a distribution over the next (forward) or previous (backward) word.
"""

from __future__ import annotations

import os

import numpy as np

from elmo.formats.lm_vocab import Vocab
from elmo.training.softmax import load_softmax


class LMHead:
    """Full softmax over the vocabulary for P-dimensional LSTM outputs (numpy, read-only)."""

    def __init__(self, vocab: Vocab, weight: np.ndarray, bias: np.ndarray, source: str = ""):
        self.source = source
        self.vocab = vocab.tokens
        self.index = vocab.index
        self.unk = vocab.unk
        self.weight = weight.astype(np.float32)
        self.bias = bias.astype(np.float32)

    @property
    def dim(self) -> int:
        return self.weight.shape[1]

    @classmethod
    def from_files(cls, vocab_file: str | os.PathLike, softmax_file: str | os.PathLike, projection_dim: int) -> LMHead:
        """vocab.txt + softmax.hdf5 as `elmo export` writes them, checked against the biLM's output size."""
        vocab = Vocab.load(vocab_file)
        softmax = load_softmax(softmax_file, len(vocab), projection_dim)
        return cls(vocab, softmax.W.detach().numpy(), softmax.b.detach().numpy(), source=os.fspath(softmax_file))

    def id_of(self, token: str) -> int:
        return self.index.get(token, self.unk)

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
