"""Does a layer separate a word's senses? The seed's "bank" demonstration, measured on SemCor and
on hand-written homonym sets (tests/data/homonyms*.json, scripts/sense_check.py).

For each ambiguous word, take sentences where SemCor tags it with one of its two most frequent
senses (the same surface form everywhere, so the context-free layer 0 gives one vector), embed
them, and compare the mean cosine similarity of same-sense pairs with that of different-sense
pairs. margin = same - different: positive when the layer puts same-sense uses closer together.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from elmo.embed.embedder import Embedder
from elmo.errors import InputError

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


def read_sense_set(path: str | os.PathLike) -> dict[str, list[Occurrence]]:
    """word -> occurrences, from a hand-written homonym file (tests/data/homonyms.json).

    Such sets are written fresh so a check cannot be passed by memorising a public corpus. A target
    index that does not point at the word is an error: a silent off-by-one would measure the wrong token.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    chosen: dict[str, list[Occurrence]] = {}
    for entry in data["words"]:
        word = entry["word"]
        chosen[word] = []
        for sense in entry["senses"]:
            for item in sense["sentences"]:
                tokens, index = item["sentence"].split(), item["index"]
                if not 0 <= index < len(tokens) or tokens[index] != word:
                    raise InputError(f"{path}: {word!r} is not token {index} of {item['sentence']!r}")
                chosen[word].append(Occurrence(word, sense["sense"], tokens, index))
    return chosen


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def occurrence_vectors(embedder: Embedder, occurrences: dict[str, list[Occurrence]]
                       ) -> dict[str, list[tuple[str, np.ndarray]]]:
    """word -> (sense, (L+1, D) vectors of the word's token) per occurrence, all sentences in one pass."""
    flat = [o for occ in occurrences.values() for o in occ]
    arrays = embedder.embed_sentences([o.tokens for o in flat], layers="all")
    vectors = [arr[:, o.position] for o, arr in zip(flat, arrays)]
    out: dict[str, list[tuple[str, np.ndarray]]] = {word: [] for word in occurrences}
    for o, vector in zip(flat, vectors):
        out[o.word].append((o.sense, vector))
    return out


def margins_from_vectors(vectors: dict[str, list[tuple[str, np.ndarray]]]) -> dict:
    """Per layer: per-word margins, their mean, and how many words have a positive margin.

    margin = mean cosine similarity of same-sense pairs minus that of different-sense pairs, which
    equals mean different-sense cosine distance minus mean same-sense distance. Kept apart from the
    embedding so the arithmetic can be checked on hand-made vectors.
    """
    n_layers = next((len(v) for occ in vectors.values() for _, v in occ), 0)
    result = {"words": len(vectors), "layers": {}}
    for layer in range(n_layers):
        per_word = {}
        for word, occ in vectors.items():
            same, different = [], []
            for (sense_a, a), (sense_b, b) in combinations(occ, 2):
                sim = _cosine(a[layer], b[layer])
                (same if sense_a == sense_b else different).append(sim)
            per_word[word] = float(np.mean(same) - np.mean(different))
        margins = np.array(list(per_word.values()))
        result["layers"][layer] = {
            "mean_margin": float(margins.mean()),
            "positive": int((margins > 0).sum()),
            "per_word": per_word,
        }
    return result


def sense_margins(embedder: Embedder, occurrences: dict[str, list[Occurrence]]) -> dict:
    """Per layer: per-word margins (same-sense minus different-sense mean cosine), their mean, and
    how many words have a positive margin. Works for SemCor's occurrences and hand-written sets alike."""
    return margins_from_vectors(occurrence_vectors(embedder, occurrences))


def separation_summary(result: dict) -> dict[int, dict]:
    """Per layer: how many words separate (margin > 0), the mean margin, and the words that do not,
    as the issue's check reads it ("same sense closer than different sense for >= 80% of the words")."""
    summary = {}
    for layer, info in result["layers"].items():
        failing = sorted(word for word, margin in info["per_word"].items() if not margin > 0)
        summary[layer] = {"separating": info["positive"], "words": result["words"],
                          "fraction": info["positive"] / result["words"] if result["words"] else 0.0,
                          "mean_margin": info["mean_margin"], "not_separating": failing}
    return summary
