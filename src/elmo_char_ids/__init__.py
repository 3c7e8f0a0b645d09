"""ELMo's character ids with numpy only: the input of an exported ONNX graph, without torch.

`import elmo` loads torch; this package does not (it is shipped beside `elmo` in the same
distribution, and is this one file: copy it where only numpy is installed, or install the
distribution without its dependencies: `pip install --no-deps elmo-bilm numpy`). It makes exactly
what `elmo.batch_to_ids` makes (`elmo.model.chars` takes its rule from here): per token 50 ids,
begin-of-word 259, the token's UTF-8 bytes + 1 (at most 48 bytes), end-of-word 260, then 261 up to 50;
a token spelled `<S>` or `</S>` gets the sentence marker's ids (257 or 258 inside); rows of 0 pad the
shorter sentences on the right. The sentence markers themselves are not added: the graph adds them.

Models in ELMoForManyLangs' format read their own ids (their char.dic/word.dic), not these.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = ["MAX_CHARS", "batch_to_ids", "token_ids"]

MAX_CHARS = 50
BOS_CHAR = 256  # inside the <S> token
EOS_CHAR = 257  # inside the </S> token
BOW_CHAR = 258  # beginning of word
EOW_CHAR = 259  # end of word
PAD_CHAR = 260  # fills the unused slots of a token; every id is its code + 1 (0 means no token)
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"
_MARKERS = {BOS_TOKEN: BOS_CHAR, EOS_TOKEN: EOS_CHAR}


@lru_cache(maxsize=1 << 16)
def token_ids(token: str) -> tuple[int, ...]:
    """The 50 ids of one token."""
    if not isinstance(token, str):
        raise TypeError(f"a token must be a str, found {type(token).__name__}: {token!r}")
    if token in _MARKERS:
        codes = [BOW_CHAR, _MARKERS[token], EOW_CHAR]
    else:
        codes = [BOW_CHAR, *token.encode("utf-8", "ignore")[: MAX_CHARS - 2], EOW_CHAR]
    codes += [PAD_CHAR] * (MAX_CHARS - len(codes))
    return tuple(code + 1 for code in codes)


def batch_to_ids(sentences: Sequence[Sequence[str]]) -> np.ndarray:
    """(sentences, longest sentence, 50) int64 ids for tokenized sentences, padded on the right with rows of 0."""
    if isinstance(sentences, (str, bytes)) or any(isinstance(s, (str, bytes)) for s in sentences):
        raise TypeError("batch_to_ids expects a list of tokenized sentences (a list of lists of str)")
    longest = max((len(s) for s in sentences), default=0)
    ids = np.zeros((len(sentences), longest, MAX_CHARS), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        if len(sentence):
            ids[row, : len(sentence)] = [token_ids(token) for token in sentence]
    return ids
