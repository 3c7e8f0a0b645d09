"""The model side of `elmo serve`, in worker processes: each loads the model once and embeds the batches
it is sent. A process of its own, not a thread of the server's: a thread running the LSTM's many small
torch calls and the event loop reading requests would pass the GIL back and forth at every call, and on
a busy server each call then waits for the event loop (measured: a 4-sentence batch of a tiny model took
50 ms in a thread of a server under load; batches stayed small because requests were read slowly).

The process talks to the server over one pipe (`serve`): first the load's answer, then one answer per
batch sent, until the pipe closes. No executor machinery between them: when the process dies, the
server's end of the pipe reads end-of-file at once, and nothing else can be left waiting on it.

Each sentence comes with what its answer needs (an `OutputSpec`: the chosen layers, averaged and pooled
for /v1/embeddings), applied here, so only that crosses back to the server: one vector per input rather
than every token's layers (98 MB for a 16,000-token request before)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

import numpy as np

_embedder = None


def load(model, int8: bool, threads: int | None) -> tuple[int, int, int] | str:
    """The process's first task: load `model` (a resolved `elmo.models.Model`, its files already local).
    Returns (layers, dimension, pid), or one line saying why the model did not load (never a traceback:
    the server prints it as its error and, for a replacement worker, keeps running)."""
    global _embedder
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the whole group: the server stops its workers
    try:
        from elmo.embed.embedder import Embedder
        from elmo.errors import ElmoError
        from elmo.model.threads import set_threads

        set_threads(threads, "--threads")
        _embedder = Embedder.from_model(model, int8=int8)
        return _embedder.bilm.num_layers, _embedder.bilm.output_dim(), os.getpid()
    except ElmoError as e:
        return str(e)
    except Exception as e:  # a damaged file fails deep inside h5py or torch: its own words, on one line
        return f"{type(e).__name__}: {' '.join(str(e).split())}"


def compute(sentences: list[Sequence[str]], outputs: list) -> list[np.ndarray]:
    """Every sentence's answer array: its (L+1, n, D) layers, each from zero state (sorted by length
    inside), reduced by its `OutputSpec` (None: all layers)."""
    arrays = _embedder.embed_sentences(sentences, layers="all", batch_size=64)
    return [layers if output is None else output.apply(layers) for layers, output in zip(arrays, outputs)]


def serve(conn, model, int8: bool, threads: int | None) -> None:
    """A worker process's whole life: load, say how it went, then answer every batch sent on `conn`."""
    loaded = load(model, int8, threads)
    conn.send(loaded)
    if isinstance(loaded, str):
        return
    while True:
        try:
            sentences, outputs = conn.recv()
        except (EOFError, OSError):  # the server closed its end: stop
            return
        try:
            answer = ("ok", compute(sentences, outputs))
        except Exception as e:  # the model's error, for the server to answer with
            answer = ("error", e)
        try:
            conn.send(answer)
        except (EOFError, OSError):  # the server closed its end meanwhile (stopping): nobody to answer
            return
        except Exception as e:  # an answer that does not pickle (an odd exception): its words instead
            conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))
