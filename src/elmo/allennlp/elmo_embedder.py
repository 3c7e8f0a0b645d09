"""`ElmoEmbedder`: AllenNLP 0.9's class of that name, so old code runs with one changed import.

AllenNLP 1.0 removed `allennlp.commands.elmo.ElmoEmbedder`; taggers, protein models and notebooks
that call it stopped running. `from elmo import ElmoEmbedder` gives them the same constructor and
methods back, on top of `Embedder`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import IO

import numpy as np
import torch

from elmo.embed.embedder import Embedder, check_batch_size, check_sentences
from elmo.embed.output_file import OutputSpec, check_output
from elmo.embed.stream import embed_file, write_lines
from elmo.errors import DownloadError, InputError, ModelFileError
from elmo.files.layout import ModelFiles
from elmo.files.text_lines import decode_line
from elmo.model.boundaries import remove_sentence_boundaries
from elmo.model.chars import batch_to_ids
from elmo.models import resolve

DEFAULT_BATCH_SIZE = 64
LEGACY_DEFAULT_MODEL = "original"  # allennlp.commands.elmo.DEFAULT_OPTIONS_FILE / DEFAULT_WEIGHT_FILE in 0.9


def legacy_default_files() -> ModelFiles:
    """0.9's default model, or a DownloadError that says how to get it or ask for the bundled one."""
    try:
        return resolve(LEGACY_DEFAULT_MODEL).original_files()
    except DownloadError as e:
        raise type(e)(e.url, f"{e.reason}. ElmoEmbedder() with no files means AllenNLP 0.9's default, the "
                      f"`{LEGACY_DEFAULT_MODEL}` model (1024-dimensional vectors), and it cannot be had here. Get it "
                      f"with `elmo download {LEGACY_DEFAULT_MODEL}` on a machine with network (docs/published-models.md), "
                      "or ask for this package's bundled model (512-dimensional) explicitly: "
                      "files = elmo.models.resolve('default').original_files(); "
                      "ElmoEmbedder(files.options_file, files.weight_file)") from None


class ElmoEmbedder:
    """AllenNLP 0.9's `ElmoEmbedder(options_file, weight_file, cuda_device=-1)`.

    With no files it loads 0.9's default, the `original` model (1024-dimensional; from a cache, or
    downloaded), and when that cannot be had says so rather than give vectors of another size.

    **Stateless by default, unlike 0.9.** 0.9 carried the LSTM state from call to call, per batch
    row (docs/format.md 4.8), so the same sentence gave different vectors each time, and results depended on
    batch size, order and everything embedded before (allennlp #1169, #2092, #2643, ...). Here every
    call starts from zero state: a sentence's vectors depend only on the sentence. Pass
    `stateful=True` to get 0.9's behaviour exactly (state per row, carried between calls; reset
    with `reset_states()`).

    Other differences: an empty line in `embed_file` gives an empty dataset instead of 0.9's error,
    and `input_file` may be a path as well as an open file.
    """

    def __init__(self, options_file: str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None,
                 cuda_device: int = -1, stateful: bool = False) -> None:
        if (options_file is None) != (weight_file is None):
            raise ModelFileError("ElmoEmbedder needs both options_file and weight_file, or neither "
                                 f"(for AllenNLP 0.9's default, the `{LEGACY_DEFAULT_MODEL}` model)")
        if options_file is None:
            files = legacy_default_files()
            options_file, weight_file = files.options_file, files.weight_file
        if cuda_device >= 0 and not torch.cuda.is_available():
            raise InputError(f"cuda_device={cuda_device}: CUDA is not available on this machine")
        device = f"cuda:{cuda_device}" if cuda_device >= 0 else "cpu"
        self.cuda_device = cuda_device
        self.embedder = Embedder.from_files(options_file, weight_file, stateful=stateful, device=device,
                                            batch_size=DEFAULT_BATCH_SIZE)

    def reset_states(self) -> None:
        self.embedder.reset_states()

    @torch.no_grad()
    def batch_to_embeddings(self, batch: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Activations (B, L+1, T, D) without the markers, and the mask (B, T), as torch tensors."""
        check_sentences(batch)
        if not batch:
            raise InputError("batch holds no sentences; batch_to_embeddings needs at least one (embed_batch([]) "
                             "gives [])")
        bilm = self.embedder.bilm
        out = bilm(batch_to_ids(batch).to(self.embedder.device))
        pairs = [remove_sentence_boundaries(layer, out.mask) for layer in out.layers]
        return torch.stack([p[0] for p in pairs], dim=1), pairs[0][1]

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        """(L+1, n, D) float32 for one tokenized sentence: (3, n, 1024) for the original model."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """One (L+1, n, D) array per sentence, in one forward pass."""
        return self.embedder.embed_batch(batch)

    def embed_sentences(self, sentences: Iterable[list[str]], batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[np.ndarray]:
        """One (L+1, n, D) array per sentence, in input order, reading `sentences` lazily."""
        return self.embedder.embed_sentences(sentences, layers="all", batch_size=batch_size)

    def embed_file(self, input_file: IO | str | os.PathLike, output_file_path: str | os.PathLike,
                   output_format: str = "all", batch_size: int = DEFAULT_BATCH_SIZE, forget_sentences: bool = False,
                   use_sentence_keys: bool = False) -> None:
        """HDF5 with one dataset per line, keyed by line number (or sentence), as 0.9 wrote it (docs/format.md 6.2).

        Like 0.9, an open `input_file` is read to the end and closed.
        """
        check_batch_size(batch_size)
        if isinstance(input_file, (str, os.PathLike)):
            embed_file(self.embedder, input_file, output_file_path, output_format, batch_size=batch_size,
                       forget_sentences=forget_sentences, use_sentence_keys=use_sentence_keys)
            return
        name = getattr(input_file, "name", "input_file")
        try:
            write_lines(self.embedder, _numbered(input_file, name), check_output(output_file_path, True),
                        OutputSpec(output_format), batch_size=batch_size, forget_sentences=forget_sentences,
                        use_sentence_keys=use_sentence_keys, source=str(name))
        finally:
            input_file.close()


def _numbered(f: IO, name: str) -> Iterator[tuple[int, str]]:
    """(line number, text) from an open text or binary file; bad UTF-8 names the line."""
    number = -1
    try:
        for number, line in enumerate(f):
            yield number, _decoded(line, name, number).rstrip("\r\n")
    except UnicodeDecodeError:  # a text-mode file decodes by blocks, so only "near" a line is known
        raise InputError(f"{name}: invalid UTF-8 near line {number + 2}") from None


def _decoded(line: str | bytes, name: str, number: int) -> str:
    return decode_line(line, name, number) if isinstance(line, bytes) else line
