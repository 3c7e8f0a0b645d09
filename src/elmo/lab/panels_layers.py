"""Panel 5: the reference tokens per layer, coloured by POS tag or by word sense, with cluster purity.

Purity: k-means on the unit-length vectors with k = the number of labels, then the share of tokens
whose label is their cluster's majority. For senses it is taken per word (k = its 2 senses) and
averaged over words weighted by their counts, so it measures telling senses apart, not words.
Computed once at startup from the reference set; requests only read it.
"""

from __future__ import annotations

import numpy as np

from .reference import ReferenceSet
from .vectors import cluster_purity, pca_2d


def _majority(labels: list[str]) -> float:
    _, counts = np.unique(labels, return_counts=True)
    return float(counts.max() / len(labels)) if len(labels) else 0.0


def _points(ref: ReferenceSet, idx: np.ndarray, layer: int) -> dict:
    coords, variance = pca_2d(ref.layers[idx, layer])
    return {"x": np.round(coords[:, 0], 3).tolist(), "y": np.round(coords[:, 1], 3).tolist(),
            "variance": [round(v, 4) for v in variance]}


def _view(ref: ReferenceSet, idx: np.ndarray, labels: list[str]) -> dict:
    layers = range(ref.layers.shape[1])
    return {
        "tokens": [str(t) for t in ref.tokens[idx]],
        "contexts": [f"{c['left']} [{c['token']}] {c['right']}" for c in (ref.context(int(i), 3) for i in idx)],
        "labels": labels,
        "layers": [_points(ref, idx, j) for j in layers],
        "purity": [round(cluster_purity(ref.layers[idx, j], labels), 4) for j in layers],
        "majority": round(_majority(labels), 4),
    }


def layer_views(ref: ReferenceSet) -> dict:
    """{"pos": view or None, "senses": {word: view}, "sense_purity": [per layer], "why": ...}."""
    out: dict = {"pos": None, "senses": {}, "sense_purity": None, "sense_majority": None, "why": {}}
    pos_idx = np.flatnonzero(ref.upos != "")
    if len(pos_idx) >= 10:
        out["pos"] = _view(ref, pos_idx, [str(u) for u in ref.upos[pos_idx]])
    else:
        out["why"]["pos"] = "not available: needs ../shared/data/ud_english_ewt (POS-tagged sentences)"
    sense_idx = np.flatnonzero(ref.senses != "")
    words: dict[str, list[int]] = {}
    for i in sense_idx:
        words.setdefault(str(ref.senses[i]).split("%")[0], []).append(int(i))
    weighted, majority, total = np.zeros(ref.layers.shape[1]), 0.0, 0
    for word, idx in sorted(words.items()):
        labels = [ref.sense_label(str(k)) for k in ref.senses[idx]]
        if len(set(labels)) < 2:
            continue
        view = _view(ref, np.array(idx), labels)
        out["senses"][word] = view
        weighted += np.array(view["purity"]) * len(idx)
        majority += view["majority"] * len(idx)
        total += len(idx)
    if total:
        out["sense_purity"] = [round(float(v), 4) for v in weighted / total]
        out["sense_majority"] = round(majority / total, 4)
    else:
        out["why"]["senses"] = "not available: needs ../shared/data/wsd_raganato (SemCor sense annotations)"
    return out
