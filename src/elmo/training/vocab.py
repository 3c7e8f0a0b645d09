"""The LM vocabulary (docs/format.md 3.4): `<S>`, `</S>`, `<UNK>`, then tokens by descending frequency.

The order matters: the sampled softmax draws negatives log-uniformly over ids, which assumes that a
small id means a frequent token.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

import numpy as np

from ..chars import BOS_TOKEN, EOS_TOKEN
from ..errors import InputError, ModelFileError, ModelFileNotFound
from ..fileio import atomic_path, iter_lines
from ..layout import VOCAB_NAME  # noqa: F401  (its old home, kept for imports)
from .data import expand_corpus, read_sentences


UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
SKIPPED_LINE = "!!!MAXTERMID"  # bilm-tf skips this line of old vocab files


def count_tokens(patterns: Iterable[str], progress: bool = False) -> Counter:
    """Token counts over tokenized corpus files (one sentence per line); streams, so memory ~ types."""
    counts: Counter = Counter()
    files = expand_corpus(patterns)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="counting", unit=" lines", unit_scale=True, mininterval=1.0)
    for path in files:
        for _, words in read_sentences(path):
            counts.update(words)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    if not counts:
        raise InputError(f"{', '.join(files)}: no tokens found (the corpus is empty or only blank lines)")
    return counts


def build_vocab(counts: Counter, min_count: int = 1, max_size: int | None = None) -> list[str]:
    """Specials first, then tokens by descending count, ties by the token's text (deterministic)."""
    if min_count < 1:
        raise InputError(f"--min-count must be at least 1, found {min_count}")
    if max_size is not None and max_size <= len(SPECIALS):
        raise InputError(f"--max-size must be more than {len(SPECIALS)} (the special tokens), found {max_size}")
    words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS), key=lambda w: (-counts[w], w))
    if max_size is not None:
        words = words[: max_size - len(SPECIALS)]
    return list(SPECIALS) + words


def write_vocab(tokens: list[str], path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in tokens)


class Vocab:
    """Token <-> id; unknown tokens map to `<UNK>`. Loaded like bilm-tf's `UnicodeCharsVocabulary`."""

    def __init__(self, tokens: list[str], source: str = "vocabulary"):
        self.tokens = tokens
        self.source = source
        self.index = {t: i for i, t in enumerate(tokens)}
        missing = [t for t in SPECIALS if t not in self.index]
        if missing:
            raise ModelFileError(
                f"{source}: the vocabulary must contain {', '.join(SPECIALS)} (case-sensitive); missing: "
                f"{', '.join(missing)}. Build one with `elmo vocab`."
            )
        self.bos, self.eos, self.unk = (self.index[t] for t in SPECIALS)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, words: list[str]) -> list[int]:
        get, unk = self.index.get, self.unk
        return [get(w, unk) for w in words]

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read one token per line (stripped; `!!!MAXTERMID` skipped); blank or repeated lines are errors."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ModelFileNotFound(f"{path}: vocabulary file not found")
        tokens: list[str] = []
        seen: dict[str, int] = {}
        for number, line in iter_lines(path):
            token = line.strip()
            if token == SKIPPED_LINE:
                continue
            if not token:
                raise ModelFileError(f"{path}, line {number + 1}: expected a token, found a blank line")
            if token in seen:
                raise ModelFileError(f"{path}, line {number + 1}: token {token!r} repeats line {seen[token] + 1}")
            seen[token] = number
            tokens.append(token)
        if not tokens:
            raise ModelFileError(f"{path}: the vocabulary file is empty")
        return cls(tokens, source=path)


def _average_ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="stable")
    _, start, size = np.unique(a[order], return_index=True, return_counts=True)
    ranks = np.empty(len(a))
    ranks[order] = np.repeat(start + (size - 1) / 2.0, size)
    return ranks


def frequency_order(vocab: Vocab, counts: Counter) -> float | None:
    """Spearman correlation of id and count over the non-special tokens: about -1 for a
    frequency-sorted vocabulary, about 0 for an unsorted one; None when there is too little to tell."""
    ids = [i for i, t in enumerate(vocab.tokens) if t not in SPECIALS]
    observed = np.array([counts.get(vocab.tokens[i], 0) for i in ids], dtype=np.float64)
    if len(ids) < 20 or (observed > 0).sum() < 20:
        return None
    a, b = _average_ranks(np.array(ids, dtype=np.float64)), _average_ranks(observed)
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom > 0 else None


def check_frequency_order(vocab: Vocab, counts: Counter, where: str) -> None:
    """Refuse a vocabulary that is clearly not sorted by frequency (the sampler relies on it)."""
    rho = frequency_order(vocab, counts)
    if rho is not None and rho > -0.1:
        raise ModelFileError(
            f"{vocab.source}: the tokens are not sorted by descending frequency (rank correlation of id and "
            f"count in {where} is {rho:+.2f}, expected clearly negative). The sampled softmax draws negatives "
            "log-uniformly over ids and needs frequent tokens first: rebuild it with `elmo vocab`, or train "
            "with --full-softmax."
        )
