"""A spaCy v3 component: `nlp.add_pipe("elmo", config={"model": "default"})`.

Found through the `spacy_factories` entry point (pyproject.toml), so `spacy.load` of a saved pipeline
needs no import. Each Doc gets every layer in `doc._.elmo` ((L+1, n, D) float32) and, unless told not
to, `Doc.tensor` and vector/similarity hooks for tokens, spans and docs from the chosen view of the
layers: "all" (the layers side by side, (n, (L+1)D)), "top", "average", or a fixed mix (one weight per
layer, used as given). `tensor`: "set" replaces what an earlier component wrote there, "append" adds
ours as the last columns when the tensor already has one row per token (else sets it), "none" leaves
it alone. `nlp.pipe` embeds `batch_size` docs per biLM call. `to_disk` writes the biLM's own files
(options.json + weights.hdf5) into the component's folder and `from_disk` loads them from there, so
the reference in config.cfg is never read again (docs/integrations.md: what survives to_bytes/DocBin).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Union

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc
from spacy.util import minibatch

from ..bilm import BiLM
from ..devices import check_device
from ..embedder import check_batch_size
from ..errors import InputError, ModelFileError
from ..models import OPTIONS_NAME, WEIGHTS_NAME
from ..weights import load_bilm, save_bilm
from .common import layers_in_batch, resolve_reference

LAYER_VIEWS = ("all", "top", "average")
TENSOR_CHOICES = ("set", "append", "none")
DEFAULT_CONFIG = {"model": "default", "layers": "all", "batch_size": 32, "device": "cpu", "tensor": "set",
                  "vectors": True}

if not Doc.has_extension("elmo"):
    Doc.set_extension("elmo", default=None)


@Language.factory("elmo", default_config=DEFAULT_CONFIG)
def make_elmo(nlp: Language, name: str, model: str, layers: Union[str, list[float]], batch_size: int, device: str,
              tensor: str, vectors: bool) -> ELMoComponent:
    return ELMoComponent(name, model, layers, batch_size, device, tensor, vectors)


class ELMoComponent:
    """The pipeline component; the biLM loads on first use (or from a saved pipeline's folder)."""

    def __init__(self, name: str = "elmo", model: str = "default", layers: str | list[float] = "all",
                 batch_size: int = 32, device: str = "cpu", tensor: str = "set", vectors: bool = True):
        if tensor not in TENSOR_CHOICES:
            raise InputError(f"elmo component: tensor must be one of {', '.join(TENSOR_CHOICES)}; found {tensor!r}")
        if isinstance(layers, str) and layers not in LAYER_VIEWS:
            raise InputError(f"elmo component: layers must be one of {', '.join(LAYER_VIEWS)} or a list of weights, "
                             f"one per layer; found {layers!r}")
        self.name, self.model_reference, self.layers = name, model, layers
        self.batch_size = check_batch_size(batch_size)
        self.device = check_device(device)
        self.tensor, self.vectors = tensor, vectors
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
        arrays = layers_in_batch(self.bilm, [[token.text for token in doc] for doc in docs], self.device)
        for doc, layers in zip(docs, arrays):
            doc._.elmo = layers.cpu().numpy()
            if self.tensor != "none":
                _write_tensor(doc, self.view(doc._.elmo), self.tensor)
            if self.vectors:
                add_vector_hooks(doc, self.layers)

    def view(self, layers: np.ndarray) -> np.ndarray:
        return layer_view(layers, self.layers)

    def to_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> None:
        bilm = self.bilm
        if bilm.lexicon is not None:
            raise ModelFileError(f"{self.model_reference}: an ELMoForManyLangs model cannot be written into a spaCy "
                                 "pipeline (its lexicon has no options.json + weights.hdf5 form); convert it first")
        save_bilm(bilm, Path(path) / OPTIONS_NAME, Path(path) / WEIGHTS_NAME)

    def from_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> ELMoComponent:
        folder = Path(path)
        if not (folder / OPTIONS_NAME).is_file() or not (folder / WEIGHTS_NAME).is_file():
            raise ModelFileError(f"{folder}: the elmo component's folder needs {OPTIONS_NAME} and {WEIGHTS_NAME}")
        self._use(load_bilm(folder / OPTIONS_NAME, folder / WEIGHTS_NAME))
        return self

    def to_bytes(self, exclude: Iterable[str] = ()) -> bytes:
        import srsly

        with tempfile.TemporaryDirectory() as tmp:
            self.to_disk(tmp)
            files = {name: (Path(tmp) / name).read_bytes() for name in (OPTIONS_NAME, WEIGHTS_NAME)}
        return srsly.msgpack_dumps(files)

    def from_bytes(self, data: bytes, exclude: Iterable[str] = ()) -> ELMoComponent:
        import srsly

        files = srsly.msgpack_loads(data)
        with tempfile.TemporaryDirectory() as tmp:
            for name in (OPTIONS_NAME, WEIGHTS_NAME):
                (Path(tmp) / name).write_bytes(files[name])
            return self.from_disk(tmp)


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
