"""Do a model's layers separate the senses of hand-written homonyms?

    python scripts/sense_check.py [--model NAME|DIR] [--set tests/data/homonyms.json] [--json]
    python scripts/sense_check.py --random [--seed 0]    # same architecture, fresh random weights

For each word: margin = mean cosine distance between different-sense occurrences minus that between
same-sense occurrences (elmo.tasks.contextuality); a word separates at a layer when its margin is
> 0. Prints, per layer, the words that separate out of all, the mean margin and the words that do
not. --random gives the baseline a trained model has to beat: an untrained biLM of the model's
architecture, built from the same options.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from elmo import Embedder  # noqa: E402
from elmo.models import resolve_model  # noqa: E402
from elmo.tasks.contextuality import read_sense_set, sense_margins, separation_summary  # noqa: E402
from elmo.weights import load_bilm  # noqa: E402

DEFAULT_SET = REPO / "tests" / "data" / "homonyms.json"


def make_embedder(model: str, random: bool, seed: int) -> Embedder:
    """The model as given, or (random=True) its architecture with seeded fresh weights."""
    if not random:
        return Embedder.from_model(model)
    torch.manual_seed(seed)
    return Embedder(load_bilm(resolve_model(model).options_file, None))


def render(summary: dict[int, dict]) -> str:
    lines = ["layer  separating  mean margin  not separating"]
    for layer, s in summary.items():
        lines.append(f"{layer:>5}  {s['separating']:>4} / {s['words']:<3}  {s['mean_margin']:>+11.4f}  "
                     f"{', '.join(s['not_separating']) or '-'}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="bundled model name or model directory (default: default)")
    p.add_argument("--set", dest="sense_set", type=Path, default=DEFAULT_SET, help="homonym file (JSON)")
    p.add_argument("--random", action="store_true", help="fresh random weights of the model's architecture")
    p.add_argument("--seed", type=int, default=0, help="seed for --random")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args()
    occurrences = read_sense_set(args.sense_set)
    summary = separation_summary(sense_margins(make_embedder(args.model, args.random, args.seed), occurrences))
    if args.json:
        print(json.dumps({"model": args.model, "random": args.random, "seed": args.seed if args.random else None,
                          "set": str(args.sense_set), "layers": summary}, indent=2))
    else:
        weights = f"random weights, seed {args.seed}" if args.random else "trained weights"
        print(f"model {args.model} ({weights}), set {args.sense_set}: {len(occurrences)} words")
        print(render(summary))


if __name__ == "__main__":
    main()
