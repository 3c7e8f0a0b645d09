"""simple_elmo (TensorFlow) beside elmo.simple_elmo, on the shared fixtures and an NLPL-shaped zip.

Two steps, because simple_elmo needs TensorFlow and this package needs torch (docs/tensorflow.md):

  # 1. in simple_elmo's venv (../shared/tools/tensorflow-peer-venv.sh VENV), outside the repo's venv:
  TF_USE_LEGACY_KERAS=1 VENV/bin/python scripts/compare_simple_elmo.py run-simple-elmo --work DIR
  # 2. in this package's venv:
  .venv/bin/python scripts/compare_simple_elmo.py compare --work DIR

Step 1 builds the models in DIR (each fixture as options.json + model.hdf5 + vocab.txt, and the
allennlp fixture zipped as NLPL publishes its models) and writes simple_elmo's outputs to
DIR/simple_elmo.npz; simple_elmo runs with limit=None, so that its vocabulary-limit bug (measured on
its own in the last line) does not blur the state comparison; step 2 computes ours and prints the
table. Sentences: the fixtures' 30, in their batch order (batch i = sentence i of each of the 3 lists),
batches of 3.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = {"allennlp": SHARED / "fixtures" / "allennlp-elmo", "bilm-tf": SHARED / "fixtures" / "bilm-tf-model"}
BATCH = 3


def sentences() -> list[list[str]]:
    lists = json.loads((FIXTURES["allennlp"] / "sentences.json").read_text(encoding="utf-8"))
    return [lists[k][i].split() for i in range(10) for k in range(3)]


def limit_sentence() -> list[list[str]]:
    """A sentence with the 100th word of the allennlp fixture's vocabulary, whose </S> is on line 225."""
    words = (FIXTURES["allennlp"] / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    return [["The", words[99], "went", "."]]


def build_models(work: Path) -> dict[str, str]:
    """The model references both sides load: two folders and one NLPL-shaped zip."""
    refs = {}
    for name, fixture in FIXTURES.items():
        d = work / name
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(fixture / "options.json", d / "options.json")
        shutil.copy(fixture / "lm_weights.hdf5", d / "model.hdf5")
        shutil.copy(fixture / "vocab_test.txt", d / "vocab.txt")
        refs[name] = str(d)
    archive = work / "nlpl.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("options.json", "model.hdf5", "vocab.txt"):
            z.write(work / "allennlp" / name, name)
    refs["nlpl-zip"] = str(archive)
    return refs


def run_simple_elmo(work: Path) -> None:
    import tensorflow as tf
    from simple_elmo import ElmoModel

    texts, arrays = sentences(), {}
    for name, ref in build_models(work).items():
        tf.compat.v1.reset_default_graph()  # one simple_elmo model per TensorFlow graph
        model = ElmoModel()
        model.load(ref, max_batch_size=BATCH, limit=None)  # its default limit=100 corrupts a word (see below)
        arrays[f"{name}/first"] = model.get_elmo_vectors(texts[:BATCH], warmup=False, layers="all")
        arrays[f"{name}/cold"] = model.get_elmo_vectors(texts, warmup=False, layers="all")
        arrays[f"{name}/warm"] = model.get_elmo_vectors(texts, warmup=True, layers="all")
        arrays[f"{name}/average"] = model.get_elmo_vector_average(texts[:BATCH], warmup=False)
    for limit in (100, None):
        tf.compat.v1.reset_default_graph()
        model = ElmoModel()
        model.load(str(work / "allennlp"), max_batch_size=BATCH, limit=limit)
        arrays[f"limit-{limit}"] = model.get_elmo_vectors(limit_sentence(), warmup=False, layers="all")
    np.savez(work / "simple_elmo.npz", **arrays)
    print(f"wrote {work / 'simple_elmo.npz'}")


def max_diff(ours: np.ndarray, theirs: np.ndarray, texts: list[list[str]]) -> float:
    """Largest difference over the real tokens (simple_elmo leaves the token layer at padded positions)."""
    return max(float(np.abs(ours[r, :, : len(t)] - theirs[r, :, : len(t)]).max()) for r, t in enumerate(texts))


def compare(work: Path) -> None:
    from elmo.simple_elmo import ElmoModel

    theirs = np.load(work / "simple_elmo.npz")
    texts = sentences()
    refs = {"allennlp": work / "allennlp", "bilm-tf": work / "bilm-tf", "nlpl-zip": work / "nlpl.zip"}
    print("| model | first batch, warmup=False | 30 sentences, warmup=False | warmup=True | "
          "ours stateless vs theirs warmup=True | sentence averages |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ref in refs.items():
        stateless, stateful = ElmoModel(), ElmoModel()
        stateless.load(str(ref), max_batch_size=BATCH)
        stateful.load(str(ref), max_batch_size=BATCH, stateful=True)
        first = max_diff(stateless.get_elmo_vectors(texts[:BATCH], warmup=False, layers="all"), theirs[f"{name}/first"],
                         texts[:BATCH])
        cold = max_diff(stateful.get_elmo_vectors(texts, warmup=False, layers="all"), theirs[f"{name}/cold"], texts)
        warm = max_diff(stateful.get_elmo_vectors(texts, warmup=True, layers="all"), theirs[f"{name}/warm"], texts)
        default = max_diff(stateless.get_elmo_vectors(texts, layers="all"), theirs[f"{name}/warm"], texts)
        averages = float(np.abs(stateless.get_elmo_vector_average(texts[:BATCH], warmup=False)
                                - theirs[f"{name}/average"]).max())
        print(f"| {name} | {first:.1e} | {cold:.1e} (stateful=True) | {warm:.1e} (stateful=True) | {default:.2f} "
              f"| {averages:.1e} |")
    ours = ElmoModel()
    ours.load(str(refs["allennlp"]), max_batch_size=BATCH, limit=100)
    mine = ours.get_elmo_vectors(limit_sentence(), warmup=False, layers="all")
    print(f"\nlimit=100, a sentence with the vocabulary's 100th word: simple_elmo limit=100 vs limit=None "
          f"{np.abs(theirs['limit-100'] - theirs['limit-None']).max():.2f}; ours vs simple_elmo limit=None "
          f"{np.abs(mine - theirs['limit-None']).max():.1e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["run-simple-elmo", "compare"])
    parser.add_argument("--work", type=Path, required=True, help="a scratch folder outside the repo")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    run_simple_elmo(args.work) if args.step == "run-simple-elmo" else compare(args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
