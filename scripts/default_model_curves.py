"""Learning curves of candidate configurations for the bundled model, and their extrapolation.

    python scripts/default_model_curves.py RUN_DIR... --valid VALID.txt --lines 1000 \
        --budget 90e6 --out docs/default-model/curves

For every checkpoint of every run: full-softmax perplexity of both directions, every sentence from
zero state (as the embedder runs the model), on the first --lines lines of --valid. Then, per run,
a power law ppl = a * tokens^-b fitted (least squares in log-log) to the checkpoints past
--fit-from tokens, extrapolated to --budget tokens (--budget 0: no fit). Writes OUT.jsonl (one
record per checkpoint and mode, plus one "fit" record per run) and OUT.png. Checkpoints already in
OUT.jsonl are not rescored. --mode sentence document also scores each document from zero state
(blank lines separate documents, docs/documents.md); --reference MODEL draws a finished model's
perplexity (a bundled name or a model directory with softmax.hdf5) as a horizontal line per mode.

    python scripts/default_model_curves.py ../runs/curve/reset-0.5 ../runs/curve/reset-0.0 \
        --valid ../runs/data/valid-400.txt --lines 400 --mode sentence document --budget 0 \
        --reference default --out docs/document-model/curves
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from elmo.training.checkpoint import list_checkpoints
from elmo.training.export import load_run
from elmo.training.perplexity import load_for_scoring, perplexity


def head(path: str, lines: int) -> str:
    out = Path(tempfile.mkdtemp(prefix="elmo-curves-")) / f"valid-first-{lines}.txt"
    with open(path, encoding="utf-8") as f:
        out.write_text("".join(line for _, line in zip(range(lines), f)), encoding="utf-8")
    return str(out)


def score_run(run: Path, valid: str, modes: list[str], done: set) -> list[dict]:
    records = []
    for step, path in list_checkpoints(run):
        todo = [mode for mode in modes if (run.name, step, mode) not in done]
        if not todo:
            continue
        model, vocab, _ = load_run(run, path)
        tokens = torch.load(path, map_location="cpu", weights_only=False)["tokens"]
        for mode in todo:
            result = perplexity(model, vocab, [valid], mode=mode, batch_size=64)
            records.append({"run": run.name, "step": step, "tokens": tokens, "mode": mode,
                            **{k: result[k] for k in ("forward", "backward", "average")}})
            print(json.dumps(records[-1]), flush=True)
    return records


def score_reference(name: str, valid: str, modes: list[str]) -> list[dict]:
    model, vocab = load_for_scoring(name)
    return [{"reference": name, "mode": mode, **{k: result[k] for k in ("forward", "backward", "average")}}
            for mode in modes for result in [perplexity(model, vocab, [valid], mode=mode, batch_size=64)]]


def fit(points: list[dict], fit_from: float, budget: float) -> dict | None:
    use = [p for p in points if p["tokens"] >= fit_from]
    if len(use) < 3:
        return None
    x = np.log([p["tokens"] for p in use])
    y = np.log([p["average"] for p in use])
    slope, intercept = np.polyfit(x, y, 1)
    return {"exponent": -slope, "scale": math.exp(intercept), "points": len(use),
            "predicted_at_budget": math.exp(intercept + slope * math.log(budget)), "budget_tokens": budget}


def plot(records: list[dict], fits: dict, references: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    modes = sorted({r["mode"] for r in records}, reverse=True)  # sentence first
    styles = {"sentence": "o-", "document": "s--"}
    for name in sorted({r["run"] for r in records}):
        color = None
        for mode in modes:
            pts = sorted((r["tokens"], r["average"]) for r in records if r["run"] == name and r["mode"] == mode)
            if pts:
                label = name if len(modes) == 1 else f"{name}, {mode} mode"
                line, = ax.plot(*zip(*pts), styles[mode], color=color, label=label)
                color = line.get_color()
    for ref in references:
        ax.axhline(ref["average"], color="grey", linestyle=styles[ref["mode"]][1:],
                   label=f"{ref['reference']}, {ref['mode']} mode: {ref['average']:.2f}")
        f = fits.get(name)
        if f:
            xs = np.geomspace(pts[0][0], f["budget_tokens"], 50)
            ax.plot(xs, f["scale"] * xs ** -f["exponent"], ":", color=line.get_color(),
                    label=f"{name} fit: {f['predicted_at_budget']:.0f} at {f['budget_tokens'] / 1e6:.0f}M")
    ax.set(xscale="log", yscale="log", xlabel="training tokens per direction",
           ylabel="valid perplexity (avg of directions)" if len(modes) > 1 else
           "valid perplexity (avg of directions, zero state)")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--valid", required=True)
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--budget", type=float, default=90e6)
    p.add_argument("--fit-from", type=float, default=5e5, help="fit only checkpoints past this many tokens")
    p.add_argument("--out", required=True, help="path prefix for .jsonl and .png")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", nargs="+", choices=["sentence", "document"], default=["sentence"])
    p.add_argument("--reference", nargs="*", default=[], help="finished models drawn as horizontal lines")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    log = out.with_suffix(".jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    records = [{"mode": "sentence", **r} for r in records if "step" in r]  # older logs scored sentences only
    valid = head(args.valid, args.lines)
    for run in map(Path, args.runs):
        records += score_run(run, valid, args.mode, {(r["run"], r["step"], r["mode"]) for r in records})
    references = [r for name in args.reference for r in score_reference(name, valid, args.mode)]
    fits = {} if args.budget <= 0 else {
        name: fit([r for r in records if r["run"] == name and r["mode"] == "sentence"], args.fit_from, args.budget)
        for name in sorted({r["run"] for r in records})}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        for r in sorted(records, key=lambda r: (r["run"], r["step"])):
            f.write(json.dumps(r) + "\n")
        for name, result in fits.items():
            f.write(json.dumps({"run": name, "fit": result}) + "\n")
        for r in references:
            f.write(json.dumps(r) + "\n")
    plot(records, fits, references, out)
    for name, result in fits.items():
        print(name, json.dumps(result))


if __name__ == "__main__":
    main()
