"""Character ids, exactly as bilm-tf's `Batcher` and AllenNLP's `batch_to_ids` make them.

A token becomes 50 codes: begin-of-word, its UTF-8 bytes (at most 48), end-of-word, then the
padding character. Every code is stored +1 so that id 0 can mean "no token here" (docs/format.md section 2).
Any byte sequence is representable, so there is no out-of-vocabulary token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

# The rule lives in the torch-free `elmo_char_ids` (an ONNX graph's users make ids without torch); one copy.
from elmo_char_ids import BOS_CHAR, BOS_TOKEN, BOW_CHAR, EOS_CHAR, EOS_TOKEN, EOW_CHAR, MAX_CHARS, PAD_CHAR  # noqa: F401
from elmo_char_ids import token_ids as _token_ids

N_CODES = 261  # rows of the stored character table


def token_to_ids(token: str, shift: int = 1) -> list[int]:
    """The 50 ids of one token; `shift=0` gives the unshifted training-time codes."""
    ids = _token_ids(token)
    return list(ids) if shift == 1 else [i - 1 + shift for i in ids]


BOS_IDS = torch.tensor(_token_ids(BOS_TOKEN), dtype=torch.long)
EOS_IDS = torch.tensor(_token_ids(EOS_TOKEN), dtype=torch.long)


def batch_to_ids(sentences: Sequence[Sequence[str]]) -> torch.Tensor:
    """(B, T, 50) int64 ids for tokenized sentences, right-padded with zero rows, no markers."""
    if isinstance(sentences, (str, bytes)) or any(isinstance(s, (str, bytes)) for s in sentences):
        raise TypeError("batch_to_ids expects a list of tokenized sentences (a list of lists of str)")
    longest = max((len(s) for s in sentences), default=0)
    ids = torch.zeros(len(sentences), longest, MAX_CHARS, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        if sentence:
            ids[row, : len(sentence)] = torch.tensor([_token_ids(t) for t in sentence], dtype=torch.long)
    return ids


class Lexicon(Protocol):
    """Turns tokens into a model's own ids when they are not UTF-8 bytes (ELMoForManyLangs' char.dic/word.dic)."""

    def batch_to_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """(B, T, ids_width) int64, right-padded with zero rows, no sentence markers."""

    def boundary_ids(self) -> torch.Tensor:
        """(2, ids_width): the ids of the begin- and end-of-sentence tokens."""

    def fingerprint(self) -> bytes:
        """The lexicon's content, for model fingerprints (the same weights with another lexicon differ)."""
