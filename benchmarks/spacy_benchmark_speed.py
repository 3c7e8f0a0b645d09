"""What `spacy benchmark speed` reports for a pipeline with the `elmo.ELMoEmbed.v1` layer (docs/integrations.md).

Builds examples/spacy/ner-elmo.cfg's pipeline (initialized, untrained: the speed does not depend on the weights)
and a DocBin of the first N distinct sentences of CoNLL-2003's test set (../shared), then runs spaCy's own command
twice per round: as spaCy runs it by default (3 warm-up passes over the data, then batches drawn from the same texts:
every sentence is in the layer's cache) and with `--warmup 0 --no-shuffle` over exactly N sentences (every
sentence new). Torch on one thread, as the layer's default.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONLL = REPO.parent / "shared" / "data" / "conll2003" / "eng.testb.gz"


def sentences(n: int) -> list[list[str]]:
    """The first n distinct sentences of 5 or more tokens."""
    found, words, seen = [], [], set()
    with gzip.open(CONLL, "rt", encoding="utf-8") as lines:
        for line in lines:
            parts = line.split()
            if parts and parts[0] != "-DOCSTART-":
                words.append(parts[0])
                continue
            if len(words) >= 5 and " ".join(words) not in seen:
                seen.add(" ".join(words))
                found.append(words)
            words = []
    return found[:n]


def build(folder: Path, n: int) -> int:
    import spacy
    from spacy.tokens import Doc, DocBin
    from spacy.training import Example

    nlp = spacy.util.load_model_from_config(spacy.util.load_config(REPO / "examples/spacy/ner-elmo.cfg"), auto_fill=True)
    docs = [Doc(nlp.vocab, words=words) for words in sentences(n)]
    nlp.initialize(lambda: [Example.from_dict(d, {"entities": ["O"] * len(d)}) for d in docs[:8]])
    nlp.to_disk(folder / "pipeline")
    DocBin(docs=docs).to_disk(folder / "data.spacy")
    return sum(len(d) for d in docs)


def spacy_speed(folder: Path, batch_size: int, batches: int, extra: list[str]) -> float:
    command = [sys.executable, "-m", "spacy", "benchmark", "speed", str(folder / "pipeline"), str(folder / "data.spacy"),
               "--batch-size", str(batch_size), "--batches", str(batches), *extra]
    out = subprocess.run(command, capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout
    return float(re.search(r"Mean: ([\d.]+) words/s", out)[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--batches", type=int, default=30, help="spaCy's minimum is 30")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    n = args.batch_size * args.batches  # --no-shuffle then times each sentence once
    with tempfile.TemporaryDirectory() as tmp:
        words = build(Path(tmp), n)
        rounds = []
        for _ in range(args.rounds):
            cached = spacy_speed(Path(tmp), args.batch_size, args.batches, [])
            new = spacy_speed(Path(tmp), args.batch_size, args.batches, ["--warmup", "0", "--no-shuffle"])
            rounds.append({"default_warmup_words_per_s": cached, "warmup0_noshuffle_words_per_s": new})
            print(f"spacy benchmark speed: default {cached:,.0f} words/s (cached); --warmup 0 --no-shuffle "
                  f"{new:,.0f} words/s (every sentence new)", flush=True)
    result = {"sentences": n, "words": words, "batch_size": args.batch_size, "batches": args.batches,
              "config": "examples/spacy/ner-elmo.cfg (initialized, untrained)", "rounds": rounds}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
