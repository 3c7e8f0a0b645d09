"""Building the LM vocabulary from a corpus (docs/format.md 3.4): `<S>`, `</S>`, `<UNK>`, then tokens by
descending frequency. The file itself (`Vocab`, `write_vocab`) is read and written by elmo.formats.lm_vocab.

The order matters: the sampled softmax draws negatives log-uniformly over ids, which assumes that a
small id means a frequent token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from elmo.errors import InputError, ModelFileError
from elmo.formats.lm_vocab import SPECIALS, Vocab

from .corpus import expand_corpus, read_sentences


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
