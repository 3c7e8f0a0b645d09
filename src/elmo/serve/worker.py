"""The model side of `elmo serve`, in worker processes: each loads the model once and embeds the batches
it is sent. A process of its own, not a thread of the server's: a thread running the LSTM's many small
torch calls and the event loop reading requests would pass the GIL back and forth at every call, and on
a busy server each call then waits for the event loop (measured: a 4-sentence batch of a tiny model took
50 ms in a thread of a server under load; batches stayed small because requests were read slowly)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_embedder = None


def start(model, int8: bool, threads: int | None) -> None:
    """The process's initializer: `model` is a resolved `elmo.models.Model` (its files already local)."""
    global _embedder
    import torch

    from ..embedder import Embedder

    if threads:
        torch.set_num_threads(threads)
    _embedder = Embedder.from_model(model, int8=int8)


def describe() -> tuple[int, int]:
    """(layers, dimension) of the loaded model; the first call also waits for the load."""
    return _embedder.bilm.num_layers, _embedder.bilm.output_dim()


def compute(sentences: list[Sequence[str]]) -> list[np.ndarray]:
    """Every sentence's (L+1, n, D) layers, each from zero state (sorted by length inside)."""
    return list(_embedder.embed_sentences(sentences, layers="all", batch_size=64))
