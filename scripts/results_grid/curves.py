"""Two laws for a validation curve at a fixed learning rate, fitted by least squares: where an unfinished
PTB run is heading."""

from __future__ import annotations

import numpy as np

# Two laws for a validation curve at a fixed learning rate, each a + b * shape(epoch, c): name -> (formula, shape).
CURVE_LAWS = {"power law": ("a + b·epoch^−c", lambda t, c: t ** -c),
              "exponential": ("a + b·exp(−c·epoch)", lambda t, c: np.exp(-c * t))}


def fit_curve(epochs: np.ndarray, values: np.ndarray, shape) -> tuple[float, np.ndarray, float]:
    """Least squares for a and b on a grid of c; returns (squared error, (a, b), c)."""
    best = None
    for c in np.linspace(0.05, 3.0, 591):
        design = np.stack([np.ones_like(epochs), shape(epochs, c)], axis=1)
        coef, *_ = np.linalg.lstsq(design, values, rcond=None)
        error = float(np.sum((design @ coef - values) ** 2))
        if best is None or error < best[0]:
            best = (error, coef, c)
    return best


def first_rate_fits(records: list[dict]) -> tuple[list[int], list[tuple[float, str, object]]]:
    """Both laws fitted to the forward validation perplexity at the first learning rate, better fit first.

    Uses the epochs from 2 on (epoch 1 starts from random weights and follows neither law) and
    returns them with the fits, each (squared error, law's name, epoch -> perplexity); no fits
    with fewer than 4 such epochs.
    """
    points = [(r["epoch"], r["valid"]["forward"]) for r in records if r["lr"] == records[0]["lr"] and r["epoch"] >= 2]
    fitted = [e for e, _ in points]
    if len(points) < 4:
        return fitted, []
    epochs = np.array(fitted, dtype=float)
    ppl = np.array([v for _, v in points])
    fits = []
    for name, (_, shape) in CURVE_LAWS.items():
        error, (a, b), c = fit_curve(epochs, ppl, shape)
        fits.append((error, name, lambda t, a=a, b=b, c=c, shape=shape: a + b * shape(np.asarray(t, dtype=float), c)))
    return fitted, sorted(fits, key=lambda fit: fit[0])

