"""Does a layer separate a word's senses? The seed's "bank" demonstration, measured on SemCor.

For each ambiguous word, take sentences where SemCor tags it with one of its two most frequent
senses (the same surface form everywhere, so the context-free layer 0 gives one vector), embed
them, and compare the mean cosine similarity of same-sense pairs with that of different-sense
pairs. margin = same - different: positive when the layer puts same-sense uses closer together.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from ..embedder import Embedder
from .wsd_data import read_gold_keys, read_raganato_xml

# Classic ambiguous English words (nouns and verbs with distinct senses in WordNet).
AMBIGUOUS_WORDS = (
    "bank", "plant", "interest", "state", "party", "play", "match", "fire", "light", "right", "court", "key",
    "cell", "charge", "order", "rock", "pitch", "star", "club", "band", "paper", "line", "power", "table",
    "case", "head", "field", "point", "spring", "bar", "board", "church", "school", "present", "run", "hold",
    "serve", "draw", "post", "record", "service", "face", "hand", "scale", "sign", "train", "term", "note",
    "form", "figure", "position", "company", "account", "business", "capital", "degree", "letter", "view",
)


@dataclass
class Occurrence:
    word: str
    sense: str
    tokens: list[str]
    position: int


def sense_occurrences(semcor_xml: str, semcor_keys: str, words=AMBIGUOUS_WORDS, per_sense: int = 4,
                      min_per_sense: int = 2) -> dict[str, list[Occurrence]]:
    """word -> occurrences of its two most frequent senses (at most `per_sense` sentences each).

    A word qualifies when both senses have at least `min_per_sense` distinct sentences. The choice is
    deterministic: senses by count (ties by key), sentences in corpus order.
    """
    wanted = set(words)
    gold = read_gold_keys(semcor_keys)
    found: dict[str, dict[str, list[Occurrence]]] = defaultdict(lambda: defaultdict(list))
    for sentence in read_raganato_xml(semcor_xml):
        for inst in sentence.instances:
            if inst.end - inst.start != 1:
                continue
            surface = sentence.tokens[inst.start]
            if surface not in wanted or inst.id not in gold:
                continue
            sense = min(gold[inst.id])
            seen = found[surface][sense]
            if not seen or seen[-1].tokens is not sentence.tokens:
                seen.append(Occurrence(surface, sense, sentence.tokens, inst.start))
    chosen = {}
    for word in words:
        senses = sorted(found.get(word, {}).items(), key=lambda kv: (-len(kv[1]), kv[0]))[:2]
        if len(senses) == 2 and all(len(occ) >= min_per_sense for _, occ in senses):
            chosen[word] = [o for _, occ in senses for o in occ[:per_sense]]
    return chosen


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def sense_margins(embedder: Embedder, occurrences: dict[str, list[Occurrence]]) -> dict:
    """Per layer: per-word margins (same-sense minus different-sense mean cosine), their mean, and
    how many words have a positive margin."""
    flat = [o for occ in occurrences.values() for o in occ]
    arrays = list(embedder.embed_sentences([o.tokens for o in flat], layers="all"))
    vectors = {id(o): arr[:, o.position] for o, arr in zip(flat, arrays)}
    n_layers = arrays[0].shape[0] if arrays else 0
    result = {"words": len(occurrences), "layers": {}}
    for layer in range(n_layers):
        per_word = {}
        for word, occ in occurrences.items():
            same, different = [], []
            for a, b in combinations(occ, 2):
                sim = _cosine(vectors[id(a)][layer], vectors[id(b)][layer])
                (same if a.sense == b.sense else different).append(sim)
            per_word[word] = float(np.mean(same) - np.mean(different))
        margins = np.array(list(per_word.values()))
        result["layers"][layer] = {
            "mean_margin": float(margins.mean()),
            "positive": int((margins > 0).sum()),
            "per_word": per_word,
        }
    return result
