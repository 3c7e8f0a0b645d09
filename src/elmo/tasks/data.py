"""Turning examples into padded batches: word ids, char ids, cached ELMo layers, targets."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from elmo.model.chars import batch_to_ids

from .features import FeatureCache
from .layers import TaskBatch
from .readers import Example


def word_ids(tokens: Sequence[str], index: dict[str, int]) -> list[int]:
    """Exact form, else lower case, else <unk> (1), matching how the static table was looked up."""
    return [index.get(t, index.get(t.lower(), 1)) for t in tokens]


def pad_elmo(arrays: Sequence[np.ndarray]) -> torch.Tensor:
    """(L+1, n_i, D) arrays -> (B, L+1, T, D) zero-padded tensor."""
    layers, _, dim = arrays[0].shape
    out = np.zeros((len(arrays), layers, max(a.shape[1] for a in arrays), dim), np.float32)
    for b, a in enumerate(arrays):
        out[b, :, : a.shape[1]] = a
    return torch.from_numpy(out)


def make_batch(examples: Sequence[Example], vocab: dict[str, int], labels: dict[str, int] | None,
               elmo: Sequence[np.ndarray] | None) -> TaskBatch:
    tokens = [e.tokens for e in examples]
    t = max(len(s) for s in tokens)
    words = torch.zeros(len(tokens), t, dtype=torch.long)
    mask = torch.zeros(len(tokens), t, dtype=torch.bool)
    for b, s in enumerate(tokens):
        words[b, : len(s)] = torch.tensor(word_ids(s, vocab))
        mask[b, : len(s)] = True
    targets = None
    if labels is not None and examples[0].tags is not None:
        targets = torch.zeros(len(tokens), t, dtype=torch.long)
        for b, e in enumerate(examples):
            targets[b, : len(e.tags)] = torch.tensor([labels[x] for x in e.tags])
    elif labels is not None and examples[0].label is not None:
        targets = torch.tensor([labels[e.label] for e in examples])
    return TaskBatch(words, batch_to_ids(tokens), mask, pad_elmo(elmo) if elmo is not None else None, targets)


class TaskData:
    """One split: examples plus, with ELMo, the cache and each example's row in it."""

    def __init__(self, examples: list[Example], cache: FeatureCache | None = None, rows: list[int] | None = None):
        self.examples = examples
        self.cache = cache
        self.rows = rows if rows is not None else list(range(len(examples)))

    def __len__(self) -> int:
        return len(self.examples)

    def batches(self, vocab: dict[str, int], labels: dict[str, int], batch_size: int,
                rng: random.Random | None = None) -> Iterator[tuple[list[int], TaskBatch]]:
        """(example indices, batch). With `rng`: shuffled, then sorted by length inside large chunks
        so that batches have little padding; without: input order, for evaluation."""
        order = list(range(len(self.examples)))
        if rng is not None:
            rng.shuffle(order)
            chunk = batch_size * 50
            order = [i for s in range(0, len(order), chunk)
                     for i in sorted(order[s : s + chunk], key=lambda i: len(self.examples[i].tokens))]
        groups = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
        if rng is not None:
            rng.shuffle(groups)
        for group in groups:
            elmo = [self.cache[self.rows[i]] for i in group] if self.cache is not None else None
            yield group, make_batch([self.examples[i] for i in group], vocab, labels, elmo)
