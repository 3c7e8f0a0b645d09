"""The static baseline: word2vec (gensim) trained on the same text as the biLM, looked up per task.

GloVe is "a passport photo": one vector per word whatever the sentence. Training it on the biLM's
own corpus (wiki_corpus) keeps the two arms of the comparison on the same text, so that what differs
is context, not data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from elmo.errors import InputError, InputFileNotFound
from elmo.files.fileio import atomic_path, check_file, iter_lines


def _gensim():
    try:
        import gensim  # noqa: F401
        from gensim.models import KeyedVectors, Word2Vec
    except ImportError:
        raise InputError("the static baseline needs gensim: pip install 'elmo-bilm[tasks]'") from None
    return KeyedVectors, Word2Vec


class Corpus:
    """Whitespace-tokenized sentences of one or more files (plain or .gz); re-iterable, as gensim needs.

    Each pass shows a tqdm bar with its rate; `max_sentences` reads only the first sentences (a slice).
    """

    def __init__(self, paths: Sequence[str], max_sentences: int | None = None):
        self.paths = list(paths)
        for p in self.paths:
            check_file(p, "a corpus file", noun="corpus file")
        self.max_sentences = max_sentences
        self.passes = 0

    def __iter__(self) -> Iterator[list[str]]:
        self.passes += 1
        n = 0
        with tqdm(desc=f"word2vec pass {self.passes}", unit="sent", unit_scale=True, dynamic_ncols=True) as bar:
            for path in self.paths:
                for _, line in iter_lines(path):
                    if self.max_sentences is not None and n >= self.max_sentences:
                        return
                    tokens = line.split()
                    if tokens:
                        n += 1
                        bar.update(1)
                        yield tokens


def train_word2vec(corpus: Iterable[list[str]], output: str | os.PathLike, dim: int = 300, window: int = 5,
                   min_count: int = 5, epochs: int = 5, skipgram: bool = True, workers: int = 1, seed: int = 1) -> int:
    """Train word2vec (skip-gram with negative sampling by default) and write word2vec binary format.

    Returns the vocabulary size. The file is written under a temporary name, renamed at the end.
    One worker gives the same file for the same corpus and seed (a lost file can be rebuilt exactly);
    several are faster, but their threads race over the shared vectors.
    """
    _, Word2Vec = _gensim()
    model = Word2Vec(vector_size=dim, window=window, min_count=min_count, sg=int(skipgram), workers=workers,
                     seed=seed, epochs=epochs)
    model.build_vocab(corpus)
    if not model.wv.index_to_key:
        raise InputError(f"no word occurs at least {min_count} times in the corpus; lower --min-count")
    model.train(corpus, total_examples=model.corpus_count, epochs=epochs)
    with atomic_path(output) as tmp:
        model.wv.save_word2vec_format(tmp, binary=True)
    return len(model.wv.index_to_key)


def load_vectors(path: str | os.PathLike):
    """gensim KeyedVectors from word2vec format: text for .txt/.vec(.gz), binary otherwise."""
    KeyedVectors, _ = _gensim()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputFileNotFound(f"{path}: static vectors not found (train them with `elmo static train`)")
    binary = not path.endswith((".txt", ".vec", ".txt.gz", ".vec.gz"))
    try:
        return KeyedVectors.load_word2vec_format(path, binary=binary)
    except (ValueError, UnicodeDecodeError, EOFError) as e:
        raise InputError(f"{path}: not a word2vec {'binary' if binary else 'text'} file ({e})") from None


def lookup(vectors, word: str) -> np.ndarray | None:
    """The vector of `word`, else of its lower-case form, else None."""
    for w in (word, word.lower()):
        if w in vectors.key_to_index:
            return vectors[w]
    return None


def embedding_table(vectors, words: Iterable[str]) -> tuple[list[str], np.ndarray]:
    """The rows a task needs: ["<pad>", "<unk>", words with a vector...] and their (V, dim) matrix.

    Restricting to the words of the task's files keeps saved models small; the vectors stay frozen,
    so including dev/test words leaks nothing.
    """
    vocab, rows = ["<pad>", "<unk>"], [np.zeros(vectors.vector_size, np.float32)] * 2
    seen = set()
    for w in words:
        if w in seen:
            continue
        seen.add(w)
        v = lookup(vectors, w)
        if v is not None:
            vocab.append(w)
            rows.append(np.asarray(v, np.float32))
    return vocab, np.stack(rows)
