"""Load a trained task model and run it on new tokenized sentences (ELMo computed live, not from a cache).

    >>> tagger = load_tagger("runs/ner-elmo.pt")
    >>> tagger.predict(["U.N.", "official", "Ekeus", "heads", "for", "Baghdad", "."])
    ['B-ORG', 'O', 'B-PER', 'O', 'O', 'B-LOC', 'O']
    >>> tagger.layer_weights()   # the learned scalar mix: {"input": {"weights": [...], "gamma": g}, ...}
    >>> tagger.input_parts(tokens)  # the paper's [x; ELMo] halves per token: {"word": ..., "elmo": ...}
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from elmo.errors import ElmoError, InputError, ModelFileError

from .data import make_batch
from .features import ElmoSpec, bilm_token
from .model_file import read_task_model
from .readers import Example
from .train import build_model


class TaskModel:
    """A trained tagger or sentence classifier with what it needs to predict: vocabulary, labels, biLM."""

    def __init__(self, path: str | os.PathLike, elmo: ElmoSpec | None = None, device: str = "cpu"):
        path = os.fspath(path)
        state = read_task_model(path)
        self.path, self.task, self.device = path, state["task"], device
        self.config = state["config"]
        self.model = _build_checked(path, self.config, state["state_dict"])
        self.model.to(device).eval()
        self.vocab = {w: i for i, w in enumerate(state["vocab"])}
        self.labels = {n: i for i, n in enumerate(self.config.labels)}
        self.static_path = state["static"]
        self.saved_mixes = state["scalar_mix"]
        self.metrics = state.get("metrics", {})
        self.elmo = elmo or (ElmoSpec(**state["elmo"]) if state["elmo"] else None)
        if elmo is None and self.elmo and self.elmo.name and not os.path.isfile(self.elmo.weight_file):
            self.elmo = ElmoSpec.resolve(model=self.elmo.name, int8=self.elmo.int8)  # a bundled model, installed elsewhere now
        if self.config.elmo_layers and self.elmo is None:
            raise ModelFileError(f"{path}: the model was trained with ELMo but names no biLM")
        self._embedder = None
        self._vectors = None

    @property
    def uses_elmo(self) -> bool:
        return self.config.elmo_layers > 0

    def layer_weights(self) -> dict:
        """The learned scalar mixes: {"input": {"weights": softmax(w), "gamma": g}, "output": ... or None}."""
        return self.model.mixes()

    def _extend_vocab(self, sentences: Sequence[Sequence[str]]) -> None:
        """Give words outside the training-time table their static vector, when the vectors file is at hand."""
        if not self.config.static_dim or not self.static_path or not os.path.isfile(self.static_path):
            return
        from .static import load_vectors, lookup
        if self._vectors is None:
            self._vectors = load_vectors(self.static_path)
        new = []
        for s in sentences:
            for t in s:
                if t not in self.vocab and t.lower() not in self.vocab:
                    v = lookup(self._vectors, t)
                    if v is not None:
                        self.vocab[t] = len(self.vocab)
                        new.append(torch.tensor(v, dtype=torch.float32))
        if new:
            emb = self.model.words.static
            emb.weight = torch.nn.Parameter(torch.cat([emb.weight.data, torch.stack(new).to(emb.weight.device)]),
                                            requires_grad=False)

    def _batch(self, sentences: Sequence[Sequence[str]]):
        if not sentences or any(len(s) == 0 for s in sentences):
            raise InputError("every sentence needs at least one token")
        self._extend_vocab(sentences)
        elmo = None
        if self.uses_elmo:
            if self._embedder is None:
                self._embedder = self.elmo.embedder(device=self.device)
            elmo = list(self._embedder.embed_sentences([[bilm_token(t) for t in s] for s in sentences]))
        batch = make_batch([Example(list(s)) for s in sentences], self.vocab, None, elmo)
        for name in ("words", "chars", "mask", "elmo"):
            value = getattr(batch, name)
            if value is not None:
                setattr(batch, name, value.to(self.device))
        return batch

    def predict_batch(self, sentences: Sequence[Sequence[str]]) -> list:
        """Tags per token (tagger) or one label per sentence (classifier)."""
        names = self.config.labels
        out = self.model.decode(self._batch(sentences))
        return [[names[k] for k in o] if isinstance(o, list) else names[o] for o in out]

    @torch.no_grad()
    def input_parts(self, tokens: Sequence[str]) -> dict[str, torch.Tensor]:
        """What a tagger's encoder reads for each token, in halves: {"word": (n, dx), "elmo": (n, de)}."""
        if self.config.kind != "tagger":
            raise InputError(f"{self.path}: input_parts() is for taggers; this is a {self.config.kind}")
        return {k: v[0].cpu() for k, v in self.model.input_parts(self._batch([list(tokens)])).items()}

    def predict(self, tokens: Sequence[str]):
        if isinstance(tokens, str):
            raise InputError("predict() takes a list of tokens, not a string (split it first)")
        return self.predict_batch([tokens])[0]


def _build_checked(path: str, config, state_dict: dict) -> torch.nn.Module:
    """The model the config describes, its weights from the file: shapes compared on the meta device
    first, so a config whose sizes do not match the file's tensors allocates nothing."""
    with torch.device("meta"):
        try:
            shapes = {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}
        except ElmoError:
            raise
        except (ValueError, RuntimeError) as e:
            raise ModelFileError(f"{path}: its 'config' describes no model ({e})") from None
    found = {k: tuple(v.shape) for k, v in state_dict.items()}
    if shapes != found:
        diff = sorted(set(shapes) ^ set(found)) or [k for k in shapes if shapes[k] != found[k]]
        name = diff[0]
        raise ModelFileError(f"{path}: 'state_dict' does not match its 'config': tensor {name!r} is "
                             f"{found.get(name, 'missing')}, the config calls for {shapes.get(name, 'none')}")
    model = build_model(config)
    model.load_state_dict(state_dict)
    return model


def load_task_model(path: str | os.PathLike, elmo: ElmoSpec | None = None, device: str = "cpu") -> TaskModel:
    return TaskModel(path, elmo=elmo, device=device)


def load_tagger(path: str | os.PathLike, elmo: ElmoSpec | None = None, device: str = "cpu") -> TaskModel:
    """A trained NER/POS tagger; `elmo` overrides where its biLM's files are (e.g. on another machine)."""
    model = TaskModel(path, elmo=elmo, device=device)
    if model.config.kind != "tagger":
        raise ModelFileError(f"{path}: a {model.task} {model.config.kind}, not a tagger")
    return model
