"""Peak RSS of `elmo embed` for 10k, 100k and 200k lines: memory is bounded by the batch, not the file.

    python benchmarks/embed_memory.py [--sizes 10000 100000 200000] [--max-tokens 8]

Lines are the first N of ../shared/data/wiki_corpus/train.txt.gz, cut to --max-tokens tokens so
the tiny fixture model (../shared/fixtures/allennlp-elmo) gets through 100k lines in minutes on a
CPU; the sentences stay distinct, so the one structure that does grow, the `sentence_to_index`
dict, grows as it would on a real corpus. Each run is its own subprocess (peak RSS per run), once
with the default output and once with --forget-sentences (no dict). Prints a table.

Two bounded caches fill during the first ~100k lines and then stay flat: the token -> character-id
cache of elmo.chars (65,536 tokens, ~40 MB) and HDF5's metadata cache while joining (~35 MB).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
CORPUS = SHARED / "data" / "wiki_corpus" / "train.txt.gz"
MODEL = SHARED / "fixtures" / "allennlp-elmo"

# Runs `elmo embed` in this process and prints its own peak RSS, so the number is this run's alone.
CHILD = """
import json, resource, sys, time
from elmo.cli import main
t = time.perf_counter()
code = main(sys.argv[1:])
print(json.dumps({"code": code, "seconds": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_lines(path: Path, n: int, max_tokens: int) -> int:
    tokens = 0
    with gzip.open(CORPUS, "rt", encoding="utf-8") as src, open(path, "w", encoding="utf-8") as out:
        for _, line in zip(range(n), src):
            words = line.split()[:max_tokens]
            tokens += len(words)
            out.write(" ".join(words) + "\n")
    return tokens


def run(corpus: Path, out: Path, flags: list[str]) -> dict:
    cmd = [sys.executable, "-c", CHILD, "embed", str(corpus), str(out), "--options", str(MODEL / "options.json"),
           "--weights", str(MODEL / "lm_weights.hdf5"), "--overwrite", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode != 0:
        sys.exit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 200_000])
    p.add_argument("--max-tokens", type=int, default=8)
    args = p.parse_args()
    for need in (CORPUS, MODEL):
        if not need.exists():
            sys.exit(f"needs {need} (the project's shared data beside the checkout)")
    print(f"{'lines':>8} {'tokens':>9} {'output':<20} {'peak RSS MB':>11} {'seconds':>8} {'file MB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            corpus = Path(tmp) / f"{n}.txt"
            tokens = write_lines(corpus, n, args.max_tokens)
            for label, flags in (("default", []), ("--forget-sentences", ["--forget-sentences"])):
                out = Path(tmp) / f"{n}.hdf5"
                r = run(corpus, out, flags)
                print(f"{n:>8} {tokens:>9} {label:<20} {r['peak_rss_mb']:>11.0f} {r['seconds']:>8.1f} "
                      f"{out.stat().st_size / 2**20:>8.1f}", flush=True)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"total {time.time() - t0:.0f} s", file=sys.stderr)
