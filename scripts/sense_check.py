"""Do a model's layers separate the senses of hand-written homonyms?

    python scripts/sense_check.py [--model NAME|DIR] [--set tests/data/homonyms.json] [--json]
    python scripts/sense_check.py --random [--seed 0]    # same architecture, fresh random weights
    python scripts/sense_check.py --semcor ../shared/data/wsd_raganato/Training_Corpora/SemCor
    python scripts/sense_check.py --lab-examples          # the lab's presets, "bank" first (docs/lab.md)

For each word: margin = mean cosine distance between different-sense occurrences minus that between
same-sense occurrences (elmo.tasks.contextuality); a word separates at a layer when its margin is
> 0. Prints, per layer, the words that separate out of all, the mean margin and the words that do
not. --random gives the baseline a trained model has to beat: an untrained biLM of the model's
architecture, built from the same options.json. --semcor takes the model card's 57 SemCor words
(4 occurrences per sense) instead of a hand-written set. --lab-examples prints, per layer, the mean
cosine distance between and within senses for each of the lab's preset words, as its first panel
shows them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from elmo import Embedder  # noqa: E402
from elmo.formats.weights import load_bilm  # noqa: E402
from elmo.lab.examples import AMBIGUOUS  # noqa: E402
from elmo.lab.inputs import tokenize  # noqa: E402
from elmo.lab.panels_words import sense_distances  # noqa: E402
from elmo.models import resolve  # noqa: E402
from elmo.tasks.contextuality import (  # noqa: E402
    read_sense_set,
    sense_margins,
    sense_occurrences,
    separation_summary,
)

DEFAULT_SET = REPO / "tests" / "data" / "homonyms.json"


def make_embedder(model: str, random: bool, seed: int) -> Embedder:
    """The model as given, or (random=True) its architecture with seeded fresh weights."""
    if not random:
        return Embedder.from_model(model)
    torch.manual_seed(seed)
    return Embedder(load_bilm(resolve(model).original_files().options_file, None))


def render(summary: dict[int, dict]) -> str:
    lines = ["layer  separating  mean margin  not separating"]
    for layer, s in summary.items():
        lines.append(f"{layer:>5}  {s['separating']:>4} / {s['words']:<3}  {s['mean_margin']:>+11.4f}  "
                     f"{', '.join(s['not_separating']) or '-'}")
    return "\n".join(lines)


def lab_examples(embedder: Embedder) -> list[str]:
    """Between- and within-sense distances of the lab's preset words, per layer (panel 1's numbers)."""
    lines = ["word  layer  between  within  separates"]
    for word, pairs in AMBIGUOUS.items():
        sentences, senses = [tokenize(text) for _, text in pairs], [sense for sense, _ in pairs]
        arrays = list(embedder.embed_sentences(sentences))
        for layer in range(arrays[0].shape[0]):
            vectors = np.stack([a[layer, [t.lower() for t in s].index(word)] for a, s in zip(arrays, sentences)])
            d = sense_distances(vectors, senses)
            lines.append(f"{word:<5} {layer:>5}  {d['between']:.4f}  {d['within']:.4f}  "
                         f"{'yes' if d['between'] > d['within'] else 'no'}")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="bundled model name or model directory (default: default)")
    p.add_argument("--set", dest="sense_set", type=Path, default=DEFAULT_SET, help="homonym file (JSON)")
    p.add_argument("--semcor", type=Path, help="SemCor folder (semcor.data.xml.gz, semcor.gold.key.txt.gz) instead of --set")
    p.add_argument("--lab-examples", action="store_true", help="also the lab's preset words, between vs within")
    p.add_argument("--random", action="store_true", help="fresh random weights of the model's architecture")
    p.add_argument("--seed", type=int, default=0, help="seed for --random")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args()
    if args.semcor:
        args.sense_set = args.semcor
        occurrences = sense_occurrences(str(args.semcor / "semcor.data.xml.gz"), str(args.semcor / "semcor.gold.key.txt.gz"))
    else:
        occurrences = read_sense_set(args.sense_set)
    embedder = make_embedder(args.model, args.random, args.seed)
    summary = separation_summary(sense_margins(embedder, occurrences))
    if args.json:
        print(json.dumps({"model": args.model, "random": args.random, "seed": args.seed if args.random else None,
                          "set": str(args.sense_set), "layers": summary}, indent=2))
    else:
        weights = f"random weights, seed {args.seed}" if args.random else "trained weights"
        print(f"model {args.model} ({weights}), set {args.sense_set}: {len(occurrences)} words")
        print(render(summary))
        if args.lab_examples:
            print("\n".join(lab_examples(embedder)))


if __name__ == "__main__":
    main()
