"""Small numpy tools for the lab: cosine neighbours, a 2-D PCA, k-means cluster purity.

Plain numpy on purpose: the lab needs a few hundred to a few thousand vectors at a time, and a
reader should be able to check every number the page shows against these few lines.
"""

from __future__ import annotations

import numpy as np


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero), so a dot product is a cosine."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(unit_rows(a[None])[0] @ unit_rows(b[None])[0])


def pairwise_cosine(x: np.ndarray) -> np.ndarray:
    u = unit_rows(x)
    return np.clip(u @ u.T, -1.0, 1.0)


def top_k(query: np.ndarray, table_units: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k rows of `table_units` (already unit rows) most cosine-similar to `query`, best first."""
    k = min(k, table_units.shape[0])
    if k <= 0:
        return []
    sims = table_units @ unit_rows(query[None])[0]
    idx = np.argpartition(-sims, k - 1)[:k]
    idx = idx[np.argsort(-sims[idx], kind="stable")]
    return [(int(i), float(sims[i])) for i in idx]


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Project rows onto their first two principal axes -> ((n, 2) coordinates, variance shares).

    Signs are fixed (largest loading positive) so the same input always draws the same picture.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n == 0:
        return np.zeros((0, 2)), [0.0, 0.0]
    centred = x - x.mean(axis=0)
    if n == 1 or not np.any(centred):
        return np.zeros((n, 2)), [0.0, 0.0]
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    axes = vt[:2]
    signs = np.sign(axes[np.arange(axes.shape[0]), np.abs(axes).argmax(axis=1)])
    axes = axes * signs[:, None]
    coords = centred @ axes.T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    var = s**2
    shares = (var[:2] / var.sum()).tolist() if var.sum() > 0 else [0.0, 0.0]
    return coords, (shares + [0.0, 0.0])[:2]


def _sq_dists(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    d2 = (x**2).sum(1)[:, None] - 2.0 * x @ centres.T + (centres**2).sum(1)[None]
    return np.maximum(d2, 0.0)


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    centres = [x[rng.integers(len(x))]]
    d2 = _sq_dists(x, centres[0][None])[:, 0]
    for _ in range(1, k):
        total = d2.sum()
        pick = rng.integers(len(x)) if total <= 0 else rng.choice(len(x), p=d2 / total)
        centres.append(x[pick])
        d2 = np.minimum(d2, _sq_dists(x, x[pick][None])[:, 0])
    return np.stack(centres)


def kmeans(x: np.ndarray, k: int, seed: int = 0, restarts: int = 5, iters: int = 50) -> np.ndarray:
    """Cluster ids for the rows of x (k-means++ starts, best of `restarts` by inertia); deterministic."""
    x = np.asarray(x, dtype=np.float64)
    k = max(1, min(k, len(x)))
    rng = np.random.default_rng(seed)
    best, best_inertia = np.zeros(len(x), dtype=int), np.inf
    for _ in range(restarts):
        centres = _kmeans_pp(x, k, rng)
        assign = np.full(len(x), -1)
        for _ in range(iters):
            new = _sq_dists(x, centres).argmin(axis=1)
            if np.array_equal(new, assign):
                break
            assign = new
            for c in range(k):
                members = x[assign == c]
                if len(members):
                    centres[c] = members.mean(axis=0)
        inertia = ((x - centres[assign]) ** 2).sum()
        if inertia < best_inertia - 1e-12:
            best, best_inertia = assign.copy(), inertia
    return best


def purity(clusters: np.ndarray, labels: list[str]) -> float:
    """Share of points whose label is their cluster's most common label (1.0 = every cluster pure)."""
    if len(labels) == 0:
        return 0.0
    labels_arr = np.asarray(labels)
    agree = 0
    for c in np.unique(clusters):
        _, counts = np.unique(labels_arr[clusters == c], return_counts=True)
        agree += int(counts.max())
    return agree / len(labels)


def cluster_purity(x: np.ndarray, labels: list[str], seed: int = 0) -> float:
    """k-means with k = number of distinct labels on unit-length vectors, then its purity."""
    k = len(set(labels))
    return purity(kmeans(unit_rows(x), k, seed=seed), labels)


def softmax_weights(scalars: list[float]) -> np.ndarray:
    """The paper's s = softmax(w) for the layer mix."""
    w = np.asarray(scalars, dtype=np.float64)
    e = np.exp(w - w.max())
    return e / e.sum()
