"""SeqVec with the APIs its users' code calls: bio_embeddings' `SeqVecEmbedder` and AllenNLP 0.9's `ElmoEmbedder`.

Both run on this package's biLM, so they install on current Python and torch. By default both keep 0.9's carried
state (each batch row's LSTM state continues from the same row of the previous call: docs/format.md 4.8), because
that is what produced the vectors SeqVec's users published; `stateful=False` gives vectors that depend on the
sequence alone. bio_embeddings' `SeqVecEmbedder` embeds a warm-up sequence four times when it starts, which moves
that state; so does this one when stateful (docs/proteins.md says by how much the two modes differ).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import numpy as np
import torch

from elmo.allennlp.elmo_embedder import ElmoEmbedder as ElmoEmbedder09
from elmo.embed.embedder import Embedder
from elmo.embed.long_lines import LONG_LINE_WINDOW, check_window, embed_in_windows
from elmo.errors import InputError

from .model_files import seqvec_files

logger = logging.getLogger(__name__)
T = TypeVar("T")

# bio_embeddings' warm-up sequence ("a random short sequence (T0922 from CASP2)"), embedded `warmup_rounds` times.
WARMUP_SEQUENCE = ("MGSSHHHHHHSSGLVPRGSHMASVQKFPGDANCDGIVDISDAVLIMQTMANPSKYQMTDKGRINADVTGNSDGVTVLDAQFIQSYCLGLVELPPV"
                   "E")
DEFAULT_MAX_AMINO_ACIDS = 15000  # bio_embeddings' pipeline default for seqvec (embed/pipeline.py)


class ElmoEmbedder(ElmoEmbedder09):
    """AllenNLP 0.9's `ElmoEmbedder`, stateful by default as 0.9 was: SeqVec's README code with one changed import
    (`from elmo.proteins import ElmoEmbedder`) gives the numbers 0.9 gave. `elmo.ElmoEmbedder` is the same class,
    stateless by default."""

    def __init__(self, options_file: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None,
                 cuda_device: int = -1, stateful: bool = True) -> None:
        super().__init__(options_file, weight_file, cuda_device=cuda_device, stateful=stateful)

    @classmethod
    def around(cls, embedder: Embedder) -> ElmoEmbedder:
        """0.9's methods on an `Embedder` already made (int8, a device of one's choice), its state mode kept."""
        made = cls.__new__(cls)
        made.cuda_device = (embedder.device.index or 0) if embedder.device.type == "cuda" else -1
        made.embedder = embedder
        return made


class SeqVecEmbedder:
    """bio_embeddings' `SeqVecEmbedder`: `embed(sequence)` -> (3, L, 1024) float32, `embed_batch`, `embed_many`,
    `reduce_per_protein`, and its constructor's keywords (`weights_file`, `options_file`, `model_directory`,
    `device`, `use_cpu`, `max_amino_acids`, `warmup_rounds`). With no files it loads `seqvec` from the catalog.

    `stateful=True` (default) is bio_embeddings' behaviour: AllenNLP 0.9's carried state, after `warmup_rounds`
    embeddings of `WARMUP_SEQUENCE`. `stateful=False`: every sequence from zero state, so its vectors depend on it
    alone, and a sequence longer than `window` residues is embedded in windows with the state carried inside it
    (exact, memory bounded; elmo.embed.long_lines). `int8=True` runs the matrix products in int8 (CPU only).
    """

    name = "seqvec"
    embedding_dimension = 1024
    number_of_layers = 3
    necessary_files = ["weights_file", "options_file"]

    def __init__(self, warmup_rounds: int = 4, *, weights_file: str | os.PathLike | None = None,
                 options_file: str | os.PathLike | None = None, model_directory: str | os.PathLike | None = None,
                 device: str | torch.device | None = None, use_cpu: bool = False,
                 max_amino_acids: int = DEFAULT_MAX_AMINO_ACIDS, stateful: bool = True, window: int = LONG_LINE_WINDOW,
                 int8: bool = False) -> None:
        if isinstance(warmup_rounds, bool) or not isinstance(warmup_rounds, int) or warmup_rounds < 0:
            raise InputError(f"warmup_rounds must be a whole number >= 0, found {warmup_rounds!r}")
        files = seqvec_files(options_file, weights_file, model_directory)
        self._options_file, self._weights_file = str(files.options_file), str(files.weight_file)
        self._device = _device(device, use_cpu)
        self.max_amino_acids = _positive(max_amino_acids, "max_amino_acids")
        self.window = check_window(window)
        self.warmup_rounds = warmup_rounds
        self._model = ElmoEmbedder.around(Embedder.from_files(files.options_file, files.weight_file, stateful=stateful,
                                                              device=self._device, int8=int8))
        self.warm_up()

    @property
    def stateful(self) -> bool:
        return self._model.embedder.stateful

    @property
    def embedder(self) -> Embedder:
        """The `elmo.Embedder` underneath (its biLM, threads, `reset_states`)."""
        return self._model.embedder

    def warm_up(self) -> None:
        """bio_embeddings' start: `WARMUP_SEQUENCE` embedded `warmup_rounds` times. Stateless, it would change
        nothing, so it is not run."""
        if self.stateful:
            for _ in range(self.warmup_rounds):
                self.embed(WARMUP_SEQUENCE)

    def reset_states(self) -> None:
        """Forget the carried state (as a fresh 0.9 embedder, before the warm-up)."""
        self._model.reset_states()

    def embed(self, sequence: str) -> np.ndarray:
        """(3, L, 1024) float32: `ElmoEmbedder.embed_sentence(list(sequence))`, as bio_embeddings calls it."""
        _check_sequence(sequence)
        if not self.stateful and len(sequence) > self.window:
            return embed_in_windows(self._model.embedder.bilm, list(sequence), self.window)
        return self._model.embed_sentence(list(sequence))

    def embed_batch(self, batch: list[str]) -> Iterator[np.ndarray]:
        """One (3, L, 1024) array per sequence, from one forward pass (0.9's `embed_batch`), in order."""
        for sequence in batch:
            _check_sequence(sequence)
        if not batch:
            return
        if self.stateful:
            yield from self._model.embed_batch([list(s) for s in batch])
            return
        long_ones = {i for i, s in enumerate(batch) if len(s) > self.window}
        short = [list(s) for i, s in enumerate(batch) if i not in long_ones]
        vectors = iter(self._model.embed_batch(short) if short else [])
        for i, sequence in enumerate(batch):
            yield self.embed(sequence) if i in long_ones else next(vectors)

    def embed_many(self, sequences: Iterable[str], batch_size: int | None = None) -> Iterator[np.ndarray]:
        """bio_embeddings' `embed_many`: with `batch_size` (residues), batches of whole sequences in order, a batch
        given to `embed_batch` as soon as adding the next sequence would reach `batch_size` residues, and a
        sequence longer than `batch_size` on its own; without, one `embed` per sequence."""
        if batch_size is None:
            for sequence in sequences:
                yield self.embed(sequence)
            return
        for batch in residue_batches(sequences, batch_size):
            yield from self.embed_batch(batch)

    @staticmethod
    def reduce_per_protein(embedding: np.ndarray) -> np.ndarray:
        """(1024,): the layers summed, then the mean over residues (bio_embeddings' `embedding.sum(0).mean(0)`)."""
        return embedding.sum(0).mean(0)

    @staticmethod
    def reduce_per_residue(embedding: np.ndarray) -> np.ndarray:
        """(L, 1024): the layers summed, as SeqVec's README does for per-residue predictors."""
        return embedding.sum(0)


def residue_batches(items: Iterable[T], batch_size: int, length: Callable[[T], int] = len) -> Iterator[list[T]]:
    """bio_embeddings' batching (`EmbedderInterface.embed_many`), one place for `embed_many` and the FASTA pipeline:
    items in order; a batch ends when the next item would bring it to `batch_size` residues or more; an item longer
    than `batch_size` is a batch of its own (after the batch before it: bio_embeddings gives it first, so its
    results come out of input order; for its pipeline's longest-first order the batches are the same). The batches are fixed by the order alone, so a run resumed after a
    batch continues with the batches the first run would have made."""
    batch_size = _positive(batch_size, "batch_size")
    batch: list[T] = []
    total = 0
    for item in items:
        n = length(item)
        if n > batch_size:
            logger.warning("A sequence is %d residues long, which is longer than your `batch_size` parameter "
                           "which is %d", n, batch_size)
            if batch:  # bio_embeddings yields the long one first, out of input order; here the order is kept
                yield batch
                batch, total = [], 0
            yield [item]
            continue
        if total + n >= batch_size and batch:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += n
    if batch:
        yield batch


def _check_sequence(sequence: object) -> None:
    if not isinstance(sequence, str):
        raise InputError(f"a protein sequence must be a str of one-letter residue codes, found {type(sequence).__name__}")


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a number of residues >= 1, found {value!r}")
    return value


def _device(device: str | torch.device | None, use_cpu: bool) -> torch.device:
    """bio_embeddings' choice: the GPU when there is one, unless `use_cpu` or a `device` says otherwise."""
    if use_cpu:
        return torch.device("cpu")
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
