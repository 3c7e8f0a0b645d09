"""The report's PNG figures: the NER learning curve, the probes per layer, the learned layer weights and
the PTB validation curves; each drawn every time (empty if need be) and written under a temporary name."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import numpy as np

from elmo.files.fileio import atomic_path

from .curves import first_rate_fits
from .grid import FRACTIONS, Grid
from .ptb import PTB_EPOCHS, PTB_RUNS, PTB_TARGET, ptb_finished


def ptb_plot(path: Path, logs: list[list[dict]]) -> None:
    """Validation perplexity per epoch of each run, the target, the halvings, the test scores and
    (the target's run, unfinished) the lr-1 projections."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    highest = 0.0
    for index, ((short, *_), records, color) in enumerate(zip(PTB_RUNS, logs, ("tab:blue", "tab:orange", "tab:green"))):
        if not records:
            continue
        name = f"run {index + 1}, {short}"
        epochs = [r["epoch"] for r in records]
        ax.plot(epochs, [r["valid"]["forward"] for r in records], "o-", color=color, ms=4, label=f"{name}: valid, forward")
        ax.plot(epochs, [r["valid"]["backward"] for r in records], "s:", color=color, ms=3, label=f"{name}: valid, backward")
        highest = max(highest, *(r["valid"]["forward"] for r in records))
        for before, after in itertools.pairwise(records):
            if after["lr"] != before["lr"]:
                ax.axvline(before["epoch"] + 0.5, color=color, lw=0.8, ls=":")
        if ptb_finished(records):
            ax.plot([records[-1]["epoch"]], [records[-1]["test"]["forward"]], "*", color=color, ms=12,
                    label=f"{name}: test, forward")
        elif index == 0:
            grid = np.linspace(2, PTB_EPOCHS, 100)
            for (_, law_name, law), style in zip(first_rate_fits(records)[1], ("--", "-.")):
                ax.plot(grid, law(grid), style, color=color, lw=1, label=f"{name}: kept at lr {records[0]['lr']:g}, {law_name}")
    if highest:
        ax.axhline(PTB_TARGET, color="tab:red", lw=1, label=f"target (test) {PTB_TARGET}")
        ax.set_xlim(0.5, PTB_EPOCHS + 0.5)
        ax.set_ylim(PTB_TARGET - 10, min(260, highest + 10))
    ax.set_xlabel("epoch (dotted lines: learning rate halved)")
    ax.set_ylabel("word-level perplexity")
    ax.set_title("PTB, LSTM-Char-Small-sized biLM")
    _save(fig, path, legend_size=7)


def plots(grid: Grid, curve, probe_rows, weights) -> None:
    """The three figures; drawn (possibly empty) every time, so the report's images always exist."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    docs = grid.docs
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for arm, index, style in (("static", 0, "o--"), ("+ELMo", 1, "s-")):
        xs = [f for f in FRACTIONS if curve[f][index]]
        ys = [statistics.mean(curve[f][index]) for f in xs]
        es = [statistics.stdev(curve[f][index]) if len(curve[f][index]) > 1 else 0 for f in xs]
        if xs:
            ax.errorbar([100 * x for x in xs], ys, yerr=es, fmt=style, capsize=3, label=arm)
    ax.set_xscale("log")
    ax.set_xticks([1, 10, 100], ["1%", "10%", "100%"])
    ax.set_xlabel("fraction of CoNLL-2003 training sentences")
    ax.set_ylabel("test span F1")
    ax.set_title("NER: low-resource curve")
    _save(fig, docs / "results_lowres.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for probe, label in (("pos-ptb", "POS PTB (acc.)"), ("pos-ud", "POS UD (acc.)"), ("wsd", "WSD ALL (F1)")):
        pts = [(layer, v) for p, layer, v in probe_rows if p == probe and v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax.set_xticks(range(grid.num_layers))
    ax.set_xlabel("biLM layer (0 = token layer)")
    ax.set_ylabel("test score")
    ax.set_title("What one layer knows")
    _save(fig, docs / "results_probes.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    width = 0.8 / max(len(weights), 1)
    for i, ((task, where), w) in enumerate(sorted(weights.items())):
        ax.bar([j + i * width for j in range(len(w))], w, width, label=f"{task} ({where})")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(grid.num_layers)], [f"layer {j}" for j in range(grid.num_layers)])
    ax.set_ylabel("softmax weight s_j")
    ax.set_ylim(0, max([0.6] + [1.3 * v for w in weights.values() for v in w]))
    ax.set_title("Learned layer weights")
    _save(fig, docs / "results_layer_weights.png", legend_size="small")


def _save(fig, path: Path, legend_size=None) -> None:
    """The legend, or "no runs yet" on an empty plot; written under a temporary name, then renamed."""
    ax = fig.axes[0]
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)
    else:
        ax.text(0.5, 0.5, "no runs yet", transform=ax.transAxes, ha="center", va="center", color="grey")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)

