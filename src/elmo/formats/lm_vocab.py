"""The LM vocabulary file (docs/format.md 3.4): `<S>`, `</S>`, `<UNK>`, then tokens by descending frequency.

Reading and writing it is a core concept: training, the TensorFlow import, the lab and simple_elmo's LM
scoring all use it, so it lives on the ground floor (building one from a corpus is training's, in
training/vocab.py).
"""

from __future__ import annotations

import os

from elmo.errors import ModelFileError, ModelFileNotFound
from elmo.files.fileio import atomic_path, iter_lines
from elmo.model.chars import BOS_TOKEN, EOS_TOKEN

UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
SKIPPED_LINE = "!!!MAXTERMID"  # bilm-tf skips this line of old vocab files


def write_vocab(tokens: list[str], path: str | os.PathLike) -> None:
    """One token per line, written to a temporary name and renamed (a killed run leaves no half file)."""
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
