"""`Embedder`: numpy vectors for tokenized sentences, for people who just want ELMo features."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import torch

from elmo.errors import InputError
from elmo.model.allocator import keep_freed_memory
from elmo.model.bilm import BiLM
from elmo.model.devices import check_device
from elmo.model.int8 import quantize_bilm
from elmo.model.threads import ensure_threads
from elmo.models import Model, default_model_name, load_bilm, resolve

from .documents import CHUNK_STEPS, Document, check_documents, contextualize_documents

LAYER_CHOICES = ("all", "top", "average")
Layers = str | Sequence[int]  # one of LAYER_CHOICES, or layer numbers such as [1, 2]
T = TypeVar("T")
DOCUMENT_WINDOW = 4  # batches of documents read, sorted by length and embedded together


def check_batch_size(value: object, name: str = "batch_size") -> int:
    """A positive int: 0 made range() fail and a negative size silently yielded None per sentence."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{name} must be a positive integer, found {value!r}")
    return value


def check_sentences(sentences: Sequence[Sequence[str]], first: int = 0) -> None:
    """Each sentence a sequence of strings: a bare string or a non-string token is refused with its index
    (`first`: the index of sentences[0] in the caller's input)."""
    for i, sentence in enumerate(sentences, first):
        if isinstance(sentence, (str, bytes)) or not isinstance(sentence, Sequence):
            raise InputError(f"sentence {i} must be a list of token strings, found {type(sentence).__name__} "
                             f"{str(sentence)[:40]!r}")
        for j, token in enumerate(sentence):
            if not isinstance(token, str):
                raise InputError(f"sentence {i}, token {j} must be a string, found {type(token).__name__} "
                                 f"{token!r:.40}")


def windows(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """`items` in lists of `size` (the last may be shorter), read lazily."""
    buffer: list[T] = []
    for item in items:
        buffer.append(item)
        if len(buffer) == size:
            yield buffer
            buffer = []
    if buffer:
        yield buffer


def select_layers(layers: np.ndarray, choice: str) -> np.ndarray:
    """(L+1, n, D) -> the requested view: all layers, the top one, or their unweighted mean."""
    if choice == "all":
        return layers
    if choice == "top":
        return layers[-1]
    if choice == "average":
        return layers.mean(axis=0)
    raise InputError(f"layers must be one of {LAYER_CHOICES}, found {choice!r}")


def check_int8_choice(int8: bool, device: str | torch.device, bf16: bool) -> None:
    """int8 is a CPU float32 replacement: on a GPU or with bf16 it would silently mean something else."""
    if int8 and not str(device).startswith("cpu"):
        raise InputError(f"int8 runs on the CPU only, found device {device}: drop --int8 / int8=True on a GPU")
    if int8 and bf16:
        raise InputError("int8 and bf16 exclude each other: int8 replaces the float32 products, bf16 autocasts them; "
                         "choose one")


class Embedder:
    """Embed tokenized sentences with a frozen biLM; returns one (L+1, n, D) array per sentence.

    Stateless (default): batches are sorted by length internally and results come back in input
    order, identical to unsorted ones. Stateful: batches are taken in the given order and row r of a
    batch continues row r of the previous one, as the original tools did.
    """

    def __init__(self, bilm: BiLM | None = None, device: str | torch.device = "cpu", batch_size: int = 64,
                 bf16: bool = False, int8: bool = False, threads: int | None = None):
        """`bf16=True` runs the biLM under bfloat16 autocast (outputs stay float32): for GPUs with bf16
        units; on a CPU without native bf16 it is correct but several times slower than float32.
        `int8=True` runs its matrix products in int8 on the CPU (`elmo.model.int8`, docs/performance.md#int8-on-cpu).
        `threads`: torch's threads in this process; None keeps a count set through `elmo.model.threads.set_threads`,
        else `elmo.model.threads.default_threads()` (torch's own default lost several-fold on shared cores)."""
        check_int8_choice(int8, device, bf16)
        self.threads = ensure_threads(threads)
        self.device = check_device(device)
        self.batch_size = check_batch_size(batch_size)
        self.model_named = bilm is not None  # if not, embed_documents runs the bundled document model
        if bilm is None:
            bilm = resolve().load_int8() if int8 else resolve().load()
        if self.device.type == "cpu":
            keep_freed_memory()
        self.bilm = bilm.to(self.device).eval()
        self.bf16 = bf16
        self.int8 = int8
        if int8:
            quantize_bilm(self.bilm)
        self._document_embedder: Embedder | None = None
        self._lock = threading.Lock()  # one forward pass at a time: a stateful biLM's state is one per row
        self._state_thread: int | None = None  # the thread whose sentences a stateful biLM's state holds

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weight_file: str | os.PathLike, stateful: bool = False,
                   **kwargs) -> Embedder:
        """With `int8=True` the model is read for int8 inference and holds int8 weights only."""
        check_int8_choice(kwargs.get("int8", False), kwargs.get("device", "cpu"), kwargs.get("bf16", False))
        return cls(load_bilm(options_file, weight_file, stateful=stateful, int8=kwargs.get("int8", False)), **kwargs)

    @classmethod
    def from_model(cls, model: str | os.PathLike | Model | None = None, stateful: bool = False,
                   **kwargs) -> Embedder:
        """A bundled model by name ("default"), a model directory (options.json + weights.hdf5), an
        ELMoForManyLangs model directory (docs/manylangs.md), or a resolved `elmo.models.Model`. None:
        the bundled `default` for sentences, and `default-document` for `embed_documents`."""
        if model is None and not stateful:
            return cls(None, **kwargs)
        check_int8_choice(kwargs.get("int8", False), kwargs.get("device", "cpu"), kwargs.get("bf16", False))
        resolved = resolve(model)
        bilm = resolved.load_int8(stateful=stateful) if kwargs.get("int8") else resolved.load(stateful=stateful)
        return cls(bilm, **kwargs)

    @property
    def stateful(self) -> bool:
        return self.bilm.stateful

    def reset_states(self) -> None:
        """Zero the carried state; afterwards any one thread may use a stateful embedder."""
        with self._lock:
            self.bilm.reset_states()
            self._state_thread = None

    def _claim_state(self) -> None:
        """A stateful embedder's carried state belongs to one thread's stream of sentences: batches of another
        thread would continue it (silently wrong vectors), so they are refused until `reset_states()`."""
        me = threading.get_ident()
        if self._state_thread not in (None, me):
            raise InputError("this stateful Embedder carries LSTM state from another thread's sentences; using it "
                             "from a second thread would mix their state: give each thread its own Embedder, or "
                             "call reset_states() before switching threads (stateless embedders are thread-safe)")
        self._state_thread = me

    @torch.no_grad()
    def embed_batch(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One forward pass over `sentences` as one batch (row r = sentences[r])."""
        if not sentences:
            return []
        check_sentences(sentences)
        ids = self.bilm.batch_to_ids(sentences).to(self.device)
        # Only a stateful biLM needs one pass at a time; stateless passes share nothing and run in parallel.
        with self._lock if self.stateful else contextlib.nullcontext(), \
                torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if self.stateful:
                self._claim_state()
            out = self.bilm(ids)
        lengths = (out.mask.sum(1) - 2).tolist()
        layers = [layer.float().cpu() for layer in out.layers]  # (B, T+2, D) each
        return [torch.stack([layer[b, 1 : 1 + n] for layer in layers]).numpy() for b, n in enumerate(lengths)]

    def embed_sentences(self, sentences: Iterable[Sequence[str]], layers: Layers = "all",
                        batch_size: int | None = None) -> Iterator[np.ndarray]:
        """Yield one array per sentence, in input order: (L+1, n, D) for "all", (n, D) for "top" and
        "average", (k, n, D) for a list of k layer numbers such as [1, 2] (0 = token layer), as the CLI's
        `--layers`.

        Reads the input lazily, a window of batches at a time, so memory stays bounded.
        """
        if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Iterable):
            raise InputError(f"sentences must be an iterable of tokenized sentences (lists of str), found "
                             f"{type(sentences).__name__} {str(sentences)[:40]!r}")
        view = self.layer_view(layers)
        batch_size = self.batch_size if batch_size is None else check_batch_size(batch_size)
        return self._embed_lazily(sentences, view, batch_size)

    def layer_view(self, layers: Layers) -> Callable[[np.ndarray], np.ndarray]:
        """What `layers` asks for, checked before any work: (L+1, n, D) -> the array to return."""
        if isinstance(layers, str):
            if layers not in LAYER_CHOICES:
                raise InputError(f"layers must be one of {LAYER_CHOICES} or a list of layer numbers, found {layers!r}")
            return functools.partial(select_layers, choice=layers)
        if isinstance(layers, bytes) or not isinstance(layers, Iterable):
            raise InputError(f"layers must be one of {LAYER_CHOICES} or a list of layer numbers, found {layers!r}")
        picked = list(layers)
        n = self.bilm.num_layers
        if not picked or len(set(picked)) != len(picked) or not all(
                isinstance(k, int) and not isinstance(k, bool) and 0 <= k < n for k in picked):
            raise InputError(f"layers must list distinct layer numbers in 0..{n - 1} (0 = token layer), found {picked}")
        return lambda arr: arr[picked]

    def _embed_lazily(self, sentences: Iterable[Sequence[str]], view: Callable[[np.ndarray], np.ndarray],
                      batch_size: int) -> Iterator[np.ndarray]:
        first = 0
        for window in windows(sentences, batch_size if self.stateful else batch_size * 16):
            check_sentences(window, first)  # before the window is sorted, so the index is the caller's
            first += len(window)
            yield from self._embed_window(window, view, batch_size)

    def _embed_window(self, sentences: list[Sequence[str]], view: Callable[[np.ndarray], np.ndarray],
                      batch_size: int) -> Iterator[np.ndarray]:
        if self.stateful:
            order = list(range(len(sentences)))
        else:
            order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]), reverse=True)
        results: list[np.ndarray | None] = [None] * len(sentences)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            for i, arr in zip(rows, self.embed_batch([sentences[i] for i in rows])):
                results[i] = view(arr)
        yield from results

    def embed_documents(self, documents: Iterable[Document], layers: Layers = "all", batch_size: int | None = None,
                        chunk_steps: int = CHUNK_STEPS) -> Iterator[np.ndarray]:
        """Yield one array per sentence of each document (a list of tokenized sentences), in order, shaped
        as `embed_sentences`' arrays, each sentence's vectors from its whole document: the forward LM
        reads the document left to right, the backward LM right to left, each from zero state
        (`elmo.embed.documents`), so they depend on the document alone, never on the batch or the other
        documents. `batch_size` counts documents; `chunk_steps` (LSTM steps per window) bounds memory
        for long documents without changing any result. An empty sentence adds nothing to its document
        and gets an (L+1, 0, D) array. Reads the input lazily, a few batches at a time.
        """
        if self.stateful:
            raise InputError("embed_documents needs a stateless embedder: document context replaces the state "
                             "carried between batches (load the model without stateful=True)")
        embedder = self if self.model_named else self.document_embedder()
        view = embedder.layer_view(layers)
        batch_size = self.batch_size if batch_size is None else check_batch_size(batch_size)
        check_batch_size(chunk_steps, "chunk_steps")
        return embedder._documents_lazily(documents, view, batch_size, chunk_steps)

    def document_embedder(self) -> Embedder:
        """Where no model was named: the bundled model tuned on whole documents, loaded once with this
        embedder's settings (a model trained on single sentences gains little from the document)."""
        if self._document_embedder is None:
            name = default_model_name("document")
            print(f"elmo: no model named: documents are embedded with the bundled model `{name}`", file=sys.stderr)
            self._document_embedder = Embedder.from_model(name, device=self.device, batch_size=self.batch_size,
                                                          bf16=self.bf16, int8=self.int8, threads=self.threads)
        return self._document_embedder

    def _documents_lazily(self, documents: Iterable[Document], view: Callable[[np.ndarray], np.ndarray],
                          batch_size: int, chunk_steps: int) -> Iterator[np.ndarray]:
        for first, window in enumerate(windows(documents, batch_size * DOCUMENT_WINDOW)):
            check_documents(window, first * batch_size * DOCUMENT_WINDOW)
            order = sorted(range(len(window)), key=lambda d: sum(len(s) + 1 for s in window[d]), reverse=True)
            results: list[list[np.ndarray]] = [[] for _ in window]
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                arrays = iter(self.embed_document_batch([window[d] for d in rows], chunk_steps))
                for d in rows:
                    results[d] = [view(next(arrays)) for _ in window[d]]
            for arrays in results:
                yield from arrays

    @torch.no_grad()
    def embed_document_batch(self, documents: Sequence[Document], chunk_steps: int = CHUNK_STEPS) -> list[np.ndarray]:
        """One pass over `documents` as one batch: (L+1, n, D) per sentence, documents in order."""
        if not self.model_named:
            return self.document_embedder().embed_document_batch(documents, chunk_steps)
        check_documents(documents)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            sentences = contextualize_documents(self.bilm, documents, chunk_steps)
        return [s.cpu().numpy() for s in sentences]

    def sents2elmo(self, sentences: Sequence[Sequence[str]], output_layer: int = -1) -> list[np.ndarray]:
        """ELMoForManyLangs' `Embedder.sents2elmo`, in input order: -1 the mean of the layers (n, D),
        -2 all layers (L+1, n, D), k layer k (n, D). Stateless unless this embedder is stateful."""
        if (isinstance(output_layer, bool) or not isinstance(output_layer, int)
                or (output_layer not in (-1, -2) and not 0 <= output_layer < self.bilm.num_layers)):
            raise InputError(f"output_layer must be -1 (mean), -2 (all) or a layer 0..{self.bilm.num_layers - 1}, "
                             f"found {output_layer!r}")
        arrays = self.embed_sentences(sentences, layers="average" if output_layer == -1 else "all")
        return [arr if output_layer < 0 else arr[output_layer] for arr in arrays]

    def embed_sentence(self, sentence: Sequence[str], layers: Layers = "all") -> np.ndarray:
        return self.layer_view(layers)(self.embed_batch([sentence])[0])

    def sentence_vectors(self, sentences: Sequence[Sequence[str]], layers: Layers = "average",
                         batch_size: int | None = None) -> np.ndarray:
        """One masked-mean vector per sentence: (N, L+1, D) for "all", (N, k, D) for k layer numbers,
        (N, D) otherwise.

        An empty sentence gives zeros.
        """
        vectors = []
        for arr in self.embed_sentences(sentences, layers=layers, batch_size=batch_size):
            n_axis = -2
            if arr.shape[n_axis] == 0:
                vectors.append(np.zeros(arr.shape[:n_axis] + arr.shape[n_axis + 1 :], dtype=arr.dtype))
            else:
                vectors.append(arr.mean(axis=n_axis))
        return np.stack(vectors) if vectors else np.zeros((0, self.bilm.output_dim()), dtype=np.float32)
