"""How close int8 vectors are to float32: per layer, the cosine of each token's two vectors.

    python scripts/int8_accuracy.py [--models bundled,original] [--sentences 500] [--out FILE.json]

Embeds the first --sentences lines of ../shared/data/wiki_corpus/test.txt with each model twice,
float32 and `int8=True`, and prints per layer the mean, minimum and 0.1th percentile over tokens of cos(int8, float32),
against the targets mean >= 0.999 and minimum >= 0.99 (issue #49). `bundled` is the bundled default
model; `original` is a biLM of the published ELMo's shapes (2x4096_512_2048cnn_2xhighway) with
random weights (bilm-tf's initialisation, `torch.manual_seed(--seed)`), since the published weights
are not part of the repository. See docs/performance.md#int8-on-cpu.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from elmo import Embedder, load_model  # noqa: E402
from elmo.model.bilm import BiLM  # noqa: E402
from elmo.model.int8 import token_cosines  # noqa: E402
from elmo.model.options import BiLMConfig  # noqa: E402
from elmo.training.presets import preset_options  # noqa: E402

SHARED = Path(os.environ.get("ELMO_SHARED", REPO.parent / "shared"))
TEST = SHARED / "data" / "wiki_corpus" / "test.txt"
TARGET_MEAN, TARGET_MIN = 0.999, 0.99


def random_bilm(preset: str, seed: int) -> BiLM:
    """A biLM of a training preset's shapes with fresh bilm-tf-style weights, the same for a seed."""
    torch.manual_seed(seed)
    options = preset_options(preset)
    options["char_cnn"]["n_characters"] = 262
    return BiLM(BiLMConfig.from_options({key: options[key] for key in ("lstm", "char_cnn")}))


def measure(bilm: BiLM, sentences: list[list[str]], batch_size: int, name: str) -> list[dict]:
    """Per layer: tokens, mean, minimum and 0.1th percentile of the cosine of int8 to float32 vectors."""
    fp32 = Embedder(bilm, batch_size=batch_size)
    int8 = Embedder(copy.deepcopy(bilm), batch_size=batch_size, int8=True)
    pairs = zip(fp32.embed_sentences(sentences), int8.embed_sentences(sentences))
    cos = np.concatenate([token_cosines(a, b) for a, b in tqdm(pairs, total=len(sentences), desc=name, unit="sent")],
                         axis=1)
    return [{"layer": k, "tokens": cos.shape[1], "mean": float(cos[k].mean()), "min": float(cos[k].min()),
             "p0.1": float(np.percentile(cos[k], 0.1)), "below_0.995": int((cos[k] < 0.995).sum())}
            for k in range(cos.shape[0])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bundled,original", help="bundled and/or original (random weights)")
    p.add_argument("--sentences", type=int, default=None, help="first N lines of test.txt (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random `original` weights")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out", help="write the numbers as JSON too")
    args = p.parse_args()
    if not TEST.exists():
        sys.exit(f"needs {TEST} (the project's shared data beside the checkout)")
    torch.set_num_threads(args.threads)
    lines = TEST.read_text(encoding="utf-8").splitlines()[: args.sentences]
    sentences = [line.split() for line in lines]
    results = {"sentences": len(sentences), "source": str(TEST.relative_to(SHARED)), "seed": args.seed, "models": {}}
    for name in [m for m in args.models.split(",") if m]:
        if name not in ("bundled", "original"):
            sys.exit(f"--models: expected bundled and/or original, found {name!r}")
        bilm = load_model("default") if name == "bundled" else random_bilm("original", args.seed)
        start = time.perf_counter()
        results["models"][name] = measure(bilm, sentences, args.batch_size, name)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(f"{len(sentences)} sentences of {results['source']}; target mean >= {TARGET_MEAN}, min >= {TARGET_MIN}\n")
    print("| model | layer | tokens | mean cosine | min cosine | 0.1th percentile | tokens < 0.995 | target met |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, rows in results["models"].items():
        label = "bundled default" if name == "bundled" else f"original shapes, random weights (seed {args.seed})"
        for r in rows:
            met = "yes" if r["mean"] >= TARGET_MEAN and r["min"] >= TARGET_MIN else "no"
            print(f"| {label} | {r['layer']} | {r['tokens']:,} | {r['mean']:.5f} | {r['min']:.5f} | {r['p0.1']:.5f} "
                  f"| {r['below_0.995']} | {met} |")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
