"""`LabModels`: everything the lab computes with, loaded once and then only read.

The biLM is required; the LM softmax (panel 6), the NER taggers (panel 4), learned mix presets
(panel 3) and measured results (panel 7) are optional, and each absent one carries a sentence
saying why, which the page shows instead of that part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elmo.embed.embedder import Embedder
from elmo.errors import InputError, ModelFileError
from elmo.formats.weights import load_bilm
from elmo.model.bilm import BiLM
from elmo.models import resolve

from . import results as results_mod
from .lm_head import LMHead
from .task_models import MixPreset, TaggerView, load_preset, tagger_view

NO_TAGGERS = "not available yet: no NER taggers were given (train them with `elmo task train ner ... --save " \
             "FILE`, then start the lab with --ner FILE and --ner-baseline FILE)"
NO_LM = "not available yet: this model has no vocab.txt + softmax.hdf5 (a MODEL_DIR from `elmo export` has " \
        "them; or pass --vocab and --softmax)"


@dataclass
class LabModels:
    bilm: BiLM
    name: str
    lm_head: LMHead | None = None
    taggers: dict[str, TaggerView] = field(default_factory=dict)  # "elmo" and/or "baseline"
    presets: list[MixPreset] = field(default_factory=list)
    results: dict = field(default_factory=dict)
    results_why: str = ""
    results_source: str = ""
    data_dir: Path | None = None
    lm_why: str = NO_LM
    taggers_why: str = NO_TAGGERS

    def __post_init__(self):
        self.bilm.eval()
        self.embedder = Embedder(self.bilm)
        if self.lm_head is not None:
            self.lm_why = ""
        if self.taggers:
            self.taggers_why = ""

    @property
    def num_layers(self) -> int:
        return self.bilm.num_layers

    @property
    def dim(self) -> int:
        return self.bilm.output_dim()

    def embed(self, sentences: list[list[str]]) -> list[np.ndarray]:
        """All layers, (L+1, n, D) per sentence (stateless: independent of batching)."""
        return list(self.embedder.embed_sentences(sentences))

    def embed_after(self, paragraph: list[list[str]], sentences: list[list[str]]) -> list[np.ndarray]:
        """Each sentence's layers with `paragraph` read before it, as one document (document context)."""
        arrays = list(self.embedder.embed_documents([[*paragraph, s] for s in sentences]))
        return arrays[len(paragraph) :: len(paragraph) + 1]

    def info(self) -> dict:
        c = self.bilm.config
        return {
            "model": self.name, "layers": self.num_layers, "dim": self.dim, "projection_dim": c.projection_dim,
            "char_filters": [list(f) for f in c.filters], "n_highway": c.n_highway,
            "lm": {"available": self.lm_head is not None, "why": self.lm_why,
                   "vocab_size": len(self.lm_head.vocab) if self.lm_head else 0,
                   "source": self.lm_head.source if self.lm_head else ""},
            "taggers": {"available": sorted(self.taggers), "why": self.taggers_why},
            "presets": [p.to_json() for p in self.presets],
        }

    @classmethod
    def load(cls, model: str | None = None, options: str | None = None, weights: str | None = None,
             vocab: str | None = None, softmax: str | None = None, ner: str | None = None,
             ner_baseline: str | None = None, presets: list[tuple[str, str]] = (), results: str | None = None,
             data_dir: Path | None = None) -> LabModels:
        """Load from a model name/folder (or options + weights) and the optional task parts."""
        try:
            files = resolve(model, options, weights).original_files()
        except ModelFileError as e:
            hint = "" if model or options else "; give --model DIR, or --options and --weights"
            raise ModelFileError(f"{e}{hint}") from e
        name = (Path(weights).parent.name or os.fspath(weights)) if options else (model or "default")
        bilm = load_bilm(files.options_file, files.weight_file)
        vocab = vocab or (files.vocab_file and os.fspath(files.vocab_file))
        softmax = softmax or (files.softmax_file and os.fspath(files.softmax_file))
        if (vocab is None) != (softmax is None):
            raise InputError("the LM predictions need both a vocabulary (--vocab) and softmax weights (--softmax)")
        head = LMHead.from_files(vocab, softmax, bilm.config.projection_dim) if vocab else None
        taggers = {}
        if ner:
            taggers["elmo"] = tagger_view(ner)
        if ner_baseline:
            taggers["baseline"] = tagger_view(ner_baseline)
        mixes = [load_preset(n, p) for n, p in presets]
        if "elmo" in taggers and not any(p.name == "NER" for p in mixes):
            learned = taggers["elmo"].mix("NER")
            if learned:
                mixes.insert(0, learned)
        results_path = results_mod.find_results(results)
        ours, why = results_mod.read_results(results_path)
        return cls(bilm, name, head, taggers, mixes, ours, why,
                   results_mod.shown_path(results_path) if results_path else "", data_dir)
