"""The reference set: real sentences embedded once, so every panel can show nearest neighbours.

Built at startup from a small budget of sentences (Wikipedia, UD English-EWT with POS tags,
SemCor with word senses) and cached on disk, keyed by a hash of the model's weights and the budget,
so a restart with the same model is instant. Without the shared data, the lab's own example
sentences stand in, and the panels that need labelled data say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from elmo.embed.embedder import Embedder
from elmo.formats.fingerprints import model_fingerprint
from elmo.model.bilm import BiLM

from . import corpora
from .examples import EXAMPLE_SENTENCES
from .trace import char_stages
from .vectors import top_k, unit_rows

CACHE_VERSION = 2


@dataclass(frozen=True)
class ReferenceSpec:
    """How much real text to embed: the lab's startup budget."""

    wiki_sentences: int = 150
    pos_tokens: int = 400
    per_sense: int = 12
    max_types: int = 3000  # distinct token types kept for the context-free stages


def default_cache_dir() -> Path:
    base = os.environ.get("ELMO_LAB_CACHE") or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / ("" if os.environ.get("ELMO_LAB_CACHE") else "elmo/lab")


class ReferenceSet:
    """Tokens of the reference sentences with all their layers, labels and context-free stages.

    Arrays: `tokens` (N,), `sent_starts` (S+1,), `sources` (S,), `layers` (N, L+1, D),
    `upos` / `senses` (N,) with '' for none, `types` (T,) with `type_cnn` (T, F), `type_highway`
    (n_highway, T, F) and `type_proj` (T, P): the context-free stages of the most frequent types.
    Read-only once built: requests share it without locks.
    """

    ARRAYS = ("tokens", "sent_starts", "sources", "layers", "upos", "senses", "types", "type_cnn",
              "type_highway", "type_proj", "gloss_keys", "gloss_texts")

    def __init__(self, arrays: dict[str, np.ndarray]):
        for name in self.ARRAYS:
            setattr(self, name, arrays[name])
        self.glosses = dict(zip(self.gloss_keys.tolist(), self.gloss_texts.tolist()))
        counts = np.diff(self.sent_starts)
        self.tok_sent = np.repeat(np.arange(len(counts)), counts)
        self.half = self.layers.shape[2] // 2
        self._units: dict[str, np.ndarray] = {}
        for j in range(self.layers.shape[1]):
            self._units[f"layer{j}"] = unit_rows(self.layers[:, j])
            self._units[f"layer{j}.forward"] = unit_rows(self.layers[:, j, : self.half])
            self._units[f"layer{j}.backward"] = unit_rows(self.layers[:, j, self.half :])
        self._units["cnn"] = unit_rows(self.type_cnn)
        for k, table in enumerate(self.type_highway):
            self._units[f"highway{k + 1}"] = unit_rows(table)
        self._units["projection"] = unit_rows(self.type_proj)

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    def sentence(self, s: int) -> list[str]:
        return self.tokens[self.sent_starts[s] : self.sent_starts[s + 1]].tolist()

    def sense_label(self, key: str) -> str:
        word = key.split("%")[0]
        gloss = self.glosses.get(key, "")
        return f"{word}: {gloss}" if gloss else key

    def context(self, i: int, width: int = 4) -> dict:
        """Token i with a few words either side, for a neighbour list."""
        s = int(self.tok_sent[i])
        start, end = int(self.sent_starts[s]), int(self.sent_starts[s + 1])
        left = self.tokens[max(start, i - width) : i].tolist()
        right = self.tokens[i + 1 : min(end, i + 1 + width)].tolist()
        out = {"token": str(self.tokens[i]), "left": " ".join(left), "right": " ".join(right),
               "source": str(self.sources[s])}
        if self.senses[i]:
            out["sense"] = self.sense_label(str(self.senses[i]))
        return out

    def nearest(self, table: str, vector: np.ndarray, k: int = 5) -> list[tuple[int, float]]:
        """(row, cosine) of the k nearest rows of a table: 'layerJ', 'layerJ.forward'/'.backward'
        (token occurrences) or 'cnn', 'highwayK', 'projection' (token types)."""
        return top_k(vector, self._units[table], k)

    def describe(self, i: int, similarity: float) -> dict:
        return {**self.context(i), "similarity": round(similarity, 4)}

    def neighbours(self, table: str, vector: np.ndarray, k: int = 5) -> list[dict]:
        """The nearest rows described for the page: the token, its context (or just the type)."""
        found = self.nearest(table, vector, k)
        if not table.startswith("layer"):  # a context-free stage: token types
            return [{"token": str(self.types[i]), "similarity": round(sim, 4)} for i, sim in found]
        return [self.describe(i, sim) for i, sim in found]

    def mixed_units(self, weights: np.ndarray) -> np.ndarray:
        """Unit rows of sum_j s_j * layer_j (gamma does not change a cosine)."""
        return unit_rows(np.einsum("j,njd->nd", weights.astype(np.float32), self.layers))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}.npz")
        np.savez(tmp, **{name: getattr(self, name) for name in self.ARRAYS})
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> ReferenceSet:
        with np.load(path, allow_pickle=False) as z:
            return cls({name: z[name] for name in cls.ARRAYS})


def collect_sentences(data: Path | None, spec: ReferenceSpec) -> list[corpora.Sentence]:
    if data is None:
        return [corpora.Sentence(list(s), "examples") for s in EXAMPLE_SENTENCES]
    found = (corpora.wiki_sentences(data, spec.wiki_sentences) + corpora.ewt_sentences(data, spec.pos_tokens)
             + corpora.semcor_sentences(data, spec.per_sense))
    return found or [corpora.Sentence(list(s), "examples") for s in EXAMPLE_SENTENCES]


@torch.no_grad()
def build_reference(bilm: BiLM, data: Path | None, spec: ReferenceSpec = ReferenceSpec(),
                    cache_dir: Path | None = None, log=None) -> ReferenceSet:
    """Embed the reference sentences with `bilm`, or load them from the cache."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    key = hashlib.sha256(json.dumps([CACHE_VERSION, model_fingerprint(bilm), str(data), asdict(spec)]).encode())
    path = Path(cache_dir or default_cache_dir()) / f"reference-{key.hexdigest()[:20]}.npz"
    if path.is_file():
        try:
            return ReferenceSet.load(path)
        except Exception as e:  # a damaged cache, whatever numpy raises for it, is rebuilt, never fatal
            log(f"elmo lab: rebuilding the unreadable cache {path} ({type(e).__name__}: {e})")
    sentences = collect_sentences(data, spec)
    n_tokens = sum(len(s.tokens) for s in sentences)
    log(f"elmo lab: embedding the reference set ({len(sentences)} sentences, {n_tokens} tokens); cached afterwards")
    embedder = Embedder(bilm.eval())
    layers = np.concatenate([a.transpose(1, 0, 2) for a in embedder.embed_sentences([s.tokens for s in sentences])])
    tokens = [t for s in sentences for t in s.tokens]
    counts: dict[str, int] = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    types = sorted(counts, key=lambda t: (-counts[t], t))[: spec.max_types]
    cnn, highway, proj = [], [], []
    for start in range(0, len(types), 256):
        stages = char_stages(bilm.char_encoder, types[start : start + 256])
        cnn.append(stages.cnn.numpy())
        highway.append(np.stack([h.numpy() for h in stages.highway]) if stages.highway
                       else np.zeros((0, len(stages.cnn), bilm.config.n_filters), np.float32))
        proj.append(stages.projection.numpy())
    width, half = bilm.config.n_filters, bilm.config.projection_dim
    keys = sorted({k for s in sentences for k in s.senses if k})
    glosses = corpora.wordnet_glosses(data, set(keys)) if data else {}
    ref = ReferenceSet({
        "tokens": np.array(tokens, dtype=str),
        "sent_starts": np.cumsum([0] + [len(s.tokens) for s in sentences]).astype(np.int64),
        "sources": np.array([s.source for s in sentences], dtype=str),
        "layers": layers.astype(np.float32),
        "upos": np.array([u for s in sentences for u in (s.upos or [""] * len(s.tokens))], dtype=str),
        "senses": np.array([k for s in sentences for k in (s.senses or [""] * len(s.tokens))], dtype=str),
        "types": np.array(types, dtype=str),
        "type_cnn": np.concatenate(cnn) if cnn else np.zeros((0, width), np.float32),
        "type_highway": (np.concatenate(highway, axis=1) if highway
                         else np.zeros((bilm.config.n_highway, 0, width), np.float32)),
        "type_proj": np.concatenate(proj) if proj else np.zeros((0, half), np.float32),
        "gloss_keys": np.array(keys, dtype=str),
        "gloss_texts": np.array([glosses.get(k, "") for k in keys], dtype=str),
    })
    try:
        ref.save(path)
    except OSError as e:
        log(f"elmo lab: could not write the cache {path}: {e}")
    return ref
