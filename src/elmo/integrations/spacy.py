"""A spaCy v3 component: `nlp.add_pipe("elmo", config={"model": "default"})`.

Found through the `spacy_factories` entry point (pyproject.toml), so `spacy.load` of a saved pipeline
needs no import. Each Doc gets every layer in `doc._.elmo` ((L+1, n, D) float32) and, unless told not
to, `Doc.tensor` and vector/similarity hooks for tokens, spans and docs from the chosen view of the
layers: "all" (the layers side by side, (n, (L+1)D)), "top", "average", or a fixed mix (one weight per
layer, used as given). `tensor`: "set" replaces what an earlier component wrote there, "append" adds
ours as the last columns when the tensor already has one row per token (else sets it), "none" leaves
it alone. `nlp.pipe` embeds `batch_size` docs per biLM call. `to_disk` writes the biLM's own files
(options.json + weights.hdf5, in the precision the biLM was loaded in) into the component's folder and `from_disk`
loads them from there, so the reference in config.cfg is never read again (docs/integrations.md: what survives
to_bytes/DocBin). `threads`: torch's threads for the biLM's passes (default 1, measured: docs/integrations.md
"Threads"; never more than the CPUs the process may use; null: all of them).

`nlp.pipe(..., n_process=N)`: each worker runs the biLM on one thread (a forked child cannot use the parent's
OpenMP pool: it waits on it forever), and the hooks, which spaCy cannot send between processes, are put back on
each Doc in the parent from `doc._.elmo`, which it does send (`keep_hooks_across_processes`).
"""

from __future__ import annotations

import functools
import math
import multiprocessing
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc
from spacy.util import minibatch

from elmo.embed.embedder import check_batch_size
from elmo.errors import InputError, ModelFileError
from elmo.files.layout import OPTIONS_NAME, WEIGHTS_NAME
from elmo.formats.weights import load_bilm
from elmo.model.bilm import BiLM
from elmo.model.devices import check_device

from .common import (
    DEFAULT_THREADS,
    check_reference,
    check_threads_setting,
    layers_in_batch,
    resolve_reference,
    use_threads,
)
from .spacy_files import bilm_files, bilm_from_files, pack_files, save_as_loaded, unpack_files

LAYER_VIEWS = ("all", "top", "average")
TENSOR_CHOICES = ("set", "append", "none")
DEFAULT_CONFIG = {"model": "default", "layers": "all", "batch_size": 32, "device": "cpu", "tensor": "set",
                  "vectors": True, "threads": DEFAULT_THREADS}
# A fixed mix's weights multiply activations of order 1-100 and are summed in float32: beyond this they overflow
# (1e39 is already infinite in float32) or say nothing a smaller scale would not.
MAX_MIX_WEIGHT = 1e6

if not Doc.has_extension("elmo"):
    Doc.set_extension("elmo", default=None)


# `assigns`: what analyze_pipes reports (`tensor` "none" leaves doc.tensor alone; `vectors` false sets no hooks)
@Language.factory("elmo", default_config=DEFAULT_CONFIG, assigns=["doc._.elmo", "doc.tensor", "doc.user_hooks",
                                                                  "doc.user_token_hooks", "doc.user_span_hooks"])
def make_elmo(nlp: Language, name: str, model: str, layers: str | list[float], batch_size: int, device: str,
              tensor: str, vectors: bool, threads: int | None = DEFAULT_THREADS) -> ELMoComponent:
    keep_hooks_across_processes(nlp)
    return ELMoComponent(name, model, layers, batch_size, device, tensor, vectors, threads)


class ELMoComponent:
    """The pipeline component; the biLM loads on first use (or from a saved pipeline's folder)."""

    def __init__(self, name: str = "elmo", model: str = "default", layers: str | list[float] = "all",
                 batch_size: int = 32, device: str = "cpu", tensor: str = "set", vectors: bool = True,
                 threads: int | None = DEFAULT_THREADS):
        if tensor not in TENSOR_CHOICES:
            raise InputError(f"elmo component: tensor must be one of {', '.join(TENSOR_CHOICES)}; found {tensor!r}")
        check_reference(model, "elmo component")
        self.name, self.model_reference, self.layers = name, model, check_layers(layers)
        self.batch_size = check_batch_size(batch_size)
        self.device = check_device(device)
        self.tensor, self.vectors = tensor, vectors
        self.threads = check_threads_setting(threads, "elmo component")
        self._bilm: BiLM | None = None

    @property
    def bilm(self) -> BiLM:
        if self._bilm is None:
            self._use(resolve_reference(self.model_reference).load())
        return self._bilm

    def _use(self, bilm: BiLM) -> None:
        if not isinstance(self.layers, str) and len(self.layers) != bilm.num_layers:
            raise InputError(f"elmo component: layers lists {len(self.layers)} weights, the model "
                             f"{self.model_reference} has {bilm.num_layers} layers (token layer + LSTM layers)")
        self._bilm = bilm.to(self.device).eval()

    def __call__(self, doc: Doc) -> Doc:
        self._annotate([doc])
        return doc

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        """`batch_size` docs per biLM pass (the component's own setting; spaCy's argument is ignored)."""
        for batch in minibatch(docs, size=self.batch_size):
            self._annotate(batch)
            yield from batch

    def _annotate(self, docs: list[Doc]) -> None:
        use_threads(self.threads)
        arrays = layers_in_batch(self.bilm, [[token.text for token in doc] for doc in docs], self.device)
        hooks = self.vectors and not _in_spacy_worker()  # a worker's hooks would be dropped (W109); the parent adds them
        for doc, layers in zip(docs, arrays):
            doc._.elmo = layers.cpu().numpy()
            if self.tensor != "none":
                _write_tensor(doc, self.view(doc._.elmo), self.tensor)
            if hooks:
                add_vector_hooks(doc, self.layers)

    def view(self, layers: np.ndarray) -> np.ndarray:
        return layer_view(layers, self.layers)

    def to_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> None:
        bilm = self.bilm
        if bilm.lexicon is not None:
            bilm_files(bilm, self.model_reference)  # the refusal, with its message
        save_as_loaded(bilm, path)

    def from_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> ELMoComponent:
        folder = Path(path)
        if not (folder / OPTIONS_NAME).is_file() or not (folder / WEIGHTS_NAME).is_file():
            raise ModelFileError(f"{folder}: the elmo component's folder needs {OPTIONS_NAME} and {WEIGHTS_NAME}")
        self._use(load_bilm(folder / OPTIONS_NAME, folder / WEIGHTS_NAME))
        return self

    def to_bytes(self, exclude: Iterable[str] = ()) -> bytes:
        return pack_files(bilm_files(self.bilm, self.model_reference))

    def from_bytes(self, data: bytes, exclude: Iterable[str] = ()) -> ELMoComponent:
        """The biLM from `to_bytes`' output; anything else is one ModelFileError, as from_disk gives."""
        where = f"elmo component {self.name!r} from_bytes"
        self._use(bilm_from_files(unpack_files(data, where), where))
        return self


def check_layers(layers: object) -> str | list[float]:
    """The `layers` setting: a view's name, or a fixed mix of finite numbers within +-MAX_MIX_WEIGHT (as float32,
    the precision the mix is computed in); anything else is one InputError naming it."""
    if isinstance(layers, str):
        if layers not in LAYER_VIEWS:
            raise InputError(f"elmo component: layers must be one of {', '.join(LAYER_VIEWS)} or a list of weights, "
                             f"one per layer; found {layers!r}")
        return layers
    if not isinstance(layers, (list, tuple)) or not layers:
        raise InputError(f"elmo component: layers must be one of {', '.join(LAYER_VIEWS)} or a list of weights, one "
                         f"per layer; found {type(layers).__name__} {layers!r:.80}")
    for weight in layers:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or abs(weight) > MAX_MIX_WEIGHT \
                or not math.isfinite(weight):  # abs first: a huge int overflows float()
            raise InputError(f"elmo component: layers' weights must be finite numbers within +-{MAX_MIX_WEIGHT:g}; "
                             f"found {weight!r:.40} in {list(layers)!r:.120}")
    return [float(weight) for weight in layers]


def _in_spacy_worker() -> bool:
    """True in a process that spaCy's `nlp.pipe(n_process>1)` started (its target is spaCy's worker function)."""
    import spacy.language

    return getattr(multiprocessing.current_process(), "_target", None) is getattr(spacy.language, "_apply_pipes", 0)


def keep_hooks_across_processes(nlp: Language) -> None:
    """Wrap `nlp.pipe` (once per pipeline) so that with n_process > 1 each Doc that comes back from a worker gets
    the vector hooks of every elmo component again: spaCy sends Docs back as bytes, which keep `doc._.elmo` but
    no functions."""
    pipe = nlp.pipe
    if getattr(pipe, "restores_elmo_hooks", False):
        return

    @functools.wraps(pipe)
    def pipe_with_hooks(texts, *args, n_process: int = 1, as_tuples: bool = False, **kwargs):
        results = pipe(texts, *args, n_process=n_process, as_tuples=as_tuples, **kwargs)
        if n_process == 1:
            return results
        return _restore_hooks(nlp, results, as_tuples)

    pipe_with_hooks.restores_elmo_hooks = True
    nlp.pipe = pipe_with_hooks


def _restore_hooks(nlp: Language, results: Iterable, as_tuples: bool) -> Iterator:
    for item in results:
        doc = item[0] if as_tuples else item
        for _, proc in nlp.pipeline:
            if isinstance(proc, ELMoComponent) and proc.vectors and doc._.elmo is not None:
                add_vector_hooks(doc, proc.layers)
        yield item


def layer_view(layers: np.ndarray, choice: str | list[float]) -> np.ndarray:
    """(L+1, n, D) -> (n, D'): the layers side by side, the top one, their mean, or a fixed weighted sum."""
    if choice == "all":
        return np.ascontiguousarray(layers.transpose(1, 0, 2).reshape(layers.shape[1], layers.shape[0] * layers.shape[2]))
    if choice == "top":
        return layers[-1]
    if choice == "average":
        return layers.mean(axis=0)
    return np.tensordot(np.asarray(choice, dtype=np.float32), layers, axes=1)


def _write_tensor(doc: Doc, vectors: np.ndarray, mode: str) -> None:
    current = doc.tensor
    if mode == "append" and current is not None and current.ndim == 2 and current.shape[0] == len(doc) \
            and current.shape[1] > 0:
        doc.tensor = np.hstack([np.asarray(current, dtype=np.float32), vectors])
    else:
        doc.tensor = vectors


def add_vector_hooks(doc: Doc, layers: str | list[float] = "all") -> Doc:
    """Token, span and doc `.vector`/`.has_vector`/`.vector_norm`/`.similarity` from `doc._.elmo`; call it again
    on a Doc read back by `Doc.from_bytes` or a DocBin with user data (hooks are functions, never serialized)."""
    if doc._.elmo is None:
        raise InputError("add_vector_hooks: this Doc has no ELMo layers (doc._.elmo); run it through the elmo "
                         "component (or keep user data when serializing)")
    rows = layer_view(doc._.elmo, layers)

    def span_vector(span) -> np.ndarray:
        return rows[span.start : span.end].mean(axis=0) if len(span) else np.zeros(rows.shape[1], np.float32)

    for hooks, vector in ((doc.user_token_hooks, lambda token: rows[token.i]), (doc.user_span_hooks, span_vector),
                          (doc.user_hooks, lambda d: span_vector(d[:]))):
        hooks["vector"] = vector
        hooks["has_vector"] = lambda _: True
        hooks["vector_norm"] = lambda item, vector=vector: float(np.linalg.norm(vector(item)))
        hooks["similarity"] = lambda item, other: cosine(item.vector, other.vector)
    return doc


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity; 0.0 when either vector is all zeros (spaCy's convention)."""
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norm) if norm else 0.0
