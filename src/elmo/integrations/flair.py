"""flair's `ELMoEmbeddings`, on this package's biLM: `from elmo.integrations.flair import ELMoEmbeddings`.

Same constructor as flair's own (flair/embeddings/legacy.py, which needs AllenNLP 0.9): `model`
(flair's names original, small, medium, large, 5.5B, pt, portuguese, pubmed, and every reference
`elmo.models.resolve` knows), or `options_file` + `weight_file`; `embedding_mode` "all" (the layers
concatenated), "top" or "average". The biLM is frozen and runs once per flair mini-batch on
`flair.device`, on `threads` torch threads (default 1, measured: docs/integrations.md "Threads"; never more than the
CPUs the process may use; None: all of them).

Its name is `elmo-MODEL-FINGERPRINT-MODE` (FINGERPRINT: the first 12 hex digits of the weights' sha256): flair keys
a token's vectors by name and skips an embedding whose name a Sentence already holds, so two models (two folders of
one name included) and two modes of one model must be two names.

What a saved tagger holds (`save=`): "weights" (default) puts the biLM's weights in the tagger's file,
which then loads anywhere with nothing else (21.7 MB for the bundled model: the tagger stores float32);
"reference" stores only the model reference and the sha256 fingerprint of its weights, and loading
resolves the reference (from the cache, or downloads it) and refuses weights that differ. Either
way the saved record is an instance of a class of this module, so unpickling the tagger imports it
and registers the class with flair: a fresh process needs no import (docs/integrations.md). Every field of
the record is checked before anything is built (`check_record`): flair's own loader unpickles a tagger file
without torch's weights-only guard, so such a file can run code (load only taggers you trust), and a record
that says `char_rows` 10**9 must be refused, not allocated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import flair
import torch
from flair.data import Sentence
from flair.embeddings import TokenEmbeddings
from flair.embeddings.base import register_embeddings

from elmo.errors import InputError, ModelFileError
from elmo.formats.fingerprints import model_fingerprint
from elmo.model.bilm import BiLM
from elmo.model.chars import N_CODES
from elmo.model.options import BiLMConfig
from elmo.models import Model

from .common import (
    DEFAULT_THREADS,
    check_reference,
    check_threads_setting,
    layers_in_batch,
    parameter_device,
    resolve_reference,
    use_threads,
)

EMBEDDING_MODES = ("all", "top", "average")
SAVE_CHOICES = ("weights", "reference")
NAME_FINGERPRINT_DIGITS = 12


@dataclass(frozen=True)
class SavedELMo:
    """What a saved flair model keeps of an ELMoEmbeddings (its `to_params`): settings, architecture, fingerprint,
    and its name as it is then: a StackedEmbeddings prefixes it with the place in the stack ("0-elmo-default"),
    and flair concatenates a token's embeddings sorted by name, so a loaded stack must keep the same names.

    Its class living in this module is what makes `SequenceTagger.load` import (and so register) it."""

    model: str | None
    files: tuple[str, str] | None  # options_file, weight_file when given instead of a model
    embedding_mode: str
    save: str
    options: dict
    char_rows: int
    fingerprint: str
    name: str


def register() -> None:
    """Registration happens on import; this is the one call for code that wants to say so explicitly."""


@register_embeddings("elmo.ELMoEmbeddings")
class ELMoEmbeddings(TokenEmbeddings):
    """Contextual word vectors from an ELMo biLM (Peters et al. 2018) for flair Sentences."""

    def __init__(self, model: str | os.PathLike | Model = "original", options_file: str | os.PathLike | None = None,
                 weight_file: str | os.PathLike | None = None, embedding_mode: str = "all", save: str = "weights",
                 threads: int | None = DEFAULT_THREADS, *, _saved: SavedELMo | None = None):
        _check_choice("embedding_mode", embedding_mode, EMBEDDING_MODES)
        _check_choice("save", save, SAVE_CHOICES)
        threads = check_threads_setting(threads, "ELMoEmbeddings")
        if _saved is None:
            _check_arguments(model, options_file, weight_file)
            resolved = resolve_reference(model, options_file, weight_file)
            bilm, reference = resolved.load(), resolved.name
            files = None if options_file is None else (os.fspath(options_file), os.fspath(weight_file))
            model = None if files else (model.name if isinstance(model, Model) else os.fspath(model))
        else:
            bilm, model, files = _bilm_from_record(_saved), _saved.model, _saved.files
            reference = model if files is None else " + ".join(files)
        if save == "weights" and bilm.lexicon is not None:
            raise InputError(f"{reference}: a model with its own lexicon (ELMoForManyLangs) is saved by reference; "
                             "pass save='reference'")
        self._fingerprint = _saved.fingerprint if _saved else model_fingerprint(bilm)
        self.name = _saved.name if _saved else (f"elmo-{_short_name(model, options_file)}-"
                                                f"{self._fingerprint[:NAME_FINGERPRINT_DIGITS]}-{embedding_mode}")
        self.static_embeddings = True
        super().__init__()
        self.threads = threads
        self.model_reference = reference
        self._saved_reference = (model, files)
        self.embedding_mode = embedding_mode
        self.save_mode = save
        if save == "weights":
            self.bilm = bilm  # a submodule: its weights go into the tagger's state_dict
        else:
            object.__setattr__(self, "_reference_bilm", bilm)  # outside the module tree: not saved
        self._layers = bilm.num_layers
        self._dim = bilm.output_dim()
        self.eval()

    @property
    def elmo_bilm(self) -> BiLM:
        return self.bilm if self.save_mode == "weights" else self._reference_bilm

    @property
    def embedding_length(self) -> int:
        return self._dim * self._layers if self.embedding_mode == "all" else self._dim

    @property
    def embedding_type(self) -> str:
        return "word-level"

    @property
    def fingerprint(self) -> str:
        """sha256 of the biLM's architecture and weights (`elmo.formats.fingerprints.model_fingerprint`), computed once."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.elmo_bilm)
        return self._fingerprint

    def _add_embeddings_internal(self, sentences: list[Sentence]) -> list[Sentence]:
        """One biLM pass for the whole mini-batch; each token gets its row of the chosen view."""
        bilm = self.elmo_bilm
        use_threads(getattr(self, "threads", DEFAULT_THREADS))  # taggers saved before the setting have none
        if parameter_device(bilm) != flair.device:
            bilm.to(flair.device)
        tokens = [[token.text for token in sentence] for sentence in sentences]
        for sentence, layers in zip(sentences, layers_in_batch(bilm, tokens, flair.device)):
            vectors = self._view(layers)
            for token, vector in zip(sentence, vectors):
                token.set_embedding(self.name, vector)
        return sentences

    def _view(self, layers: torch.Tensor) -> torch.Tensor:
        """(L+1, n, D) -> (n, embedding_length)."""
        if self.embedding_mode == "all":
            return layers.permute(1, 0, 2).reshape(layers.shape[1], layers.shape[0] * layers.shape[2])
        return layers[-1] if self.embedding_mode == "top" else layers.mean(dim=0)

    def train(self, mode: bool = True):
        super().train(mode)
        self.elmo_bilm.eval()  # frozen: no dropout or state, whatever flair's trainer asks
        return self

    def to_params(self) -> dict:
        bilm = self.elmo_bilm
        return {"saved": SavedELMo(*self._saved_reference, self.embedding_mode, self.save_mode,
                                   bilm.config.to_options(), bilm.char_encoder.char_embed.shape[0],
                                   self.fingerprint, self.name)}

    @classmethod
    def from_params(cls, params: dict) -> ELMoEmbeddings:
        saved = check_record(params.get("saved") if isinstance(params, dict) else None)
        return cls(embedding_mode=saved.embedding_mode, save=saved.save, _saved=saved)

    def extra_repr(self) -> str:
        return f"model={self.model_reference!r}, embedding_mode={self.embedding_mode!r}, save={self.save_mode!r}"

    def __str__(self) -> str:
        return self.name


def check_record(saved: object) -> SavedELMo:
    """A saved tagger's record, every field checked as options.json is, before anything is built from it."""
    where = "the ELMoEmbeddings record of a saved flair model"
    if not isinstance(saved, SavedELMo):
        raise ModelFileError(f"{where}: expected a SavedELMo; found {type(saved).__name__}")
    if not isinstance(saved.name, str) or not saved.name:
        raise ModelFileError(f"{where}: name must be a non-empty string; found {saved.name!r}")
    where = f"{where} ({saved.name})"
    checks = [
        ("model", saved.model is None or isinstance(saved.model, str), "a string or None"),
        ("files", saved.files is None or (isinstance(saved.files, tuple) and len(saved.files) == 2
                                          and all(isinstance(f, str) for f in saved.files)), "two paths or None"),
        ("model", (saved.model is None) != (saved.files is None), "given when files are not (one of the two)"),
        ("embedding_mode", saved.embedding_mode in EMBEDDING_MODES, f"one of {', '.join(EMBEDDING_MODES)}"),
        ("save", saved.save in SAVE_CHOICES, f"one of {', '.join(SAVE_CHOICES)}"),
        ("options", isinstance(saved.options, dict), "a dict (options.json's content)"),
        ("char_rows", type(saved.char_rows) is int and saved.char_rows in (N_CODES, N_CODES + 1),
         f"{N_CODES} or {N_CODES + 1} (the character table's rows, as in weights.hdf5)"),
        ("fingerprint", isinstance(saved.fingerprint, str) and len(saved.fingerprint) == 64
         and all(c in "0123456789abcdef" for c in saved.fingerprint), "64 hex digits (sha256)"),
    ]
    for field, ok, expected in checks:
        if not ok:
            raise ModelFileError(f"{where}: {field} must be {expected}; found {getattr(saved, field)!r:.80}")
    return saved


def _bilm_from_record(saved: SavedELMo) -> BiLM:
    """"weights": the architecture alone (the tagger's state_dict fills it); "reference": resolved and checked."""
    config = BiLMConfig.from_options(saved.options, source=f"the saved ELMoEmbeddings {saved.name}")
    if saved.save == "weights":
        return BiLM(config, char_rows=saved.char_rows)
    bilm = resolve_reference(saved.model, *(saved.files or (None, None))).load()
    found = model_fingerprint(bilm)
    if found != saved.fingerprint:
        where = saved.model if saved.files is None else " + ".join(saved.files)
        raise ModelFileError(f"{where}: the flair model was saved with ELMo weights of fingerprint "
                             f"{saved.fingerprint[:16]}..., but this reference now gives {found[:16]}...; "
                             "restore the original model files, or save the tagger with save='weights'")
    return bilm


def _check_arguments(model: object, options_file: object, weight_file: object) -> None:
    """The model arguments' types, each named: a reference (or a Model), or two file paths."""
    for name, value in (("options_file", options_file), ("weight_file", weight_file)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise InputError(f"ELMoEmbeddings: {name} must be a path (str or os.PathLike); found "
                             f"{type(value).__name__} {value!r:.80}")
    if options_file is None and weight_file is None:
        check_reference(model, "ELMoEmbeddings")


def _short_name(model: object, options_file: object) -> str:
    if options_file is not None:
        return os.path.basename(os.path.dirname(os.path.abspath(os.fspath(options_file)))) or "files"
    if isinstance(model, Model):
        return model.name
    return os.fspath(model).rstrip("/").rsplit("/", 1)[-1]


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}; found {value!r}")
