"""Peak RSS of `elmo embed`: memory is bounded by the batch, not the file, and one long line costs its output.

    python benchmarks/embed_memory.py [--sizes 10000 100000 200000] [--max-tokens 8]
    python benchmarks/embed_memory.py --one-line 1000 10000 100000 [--before OLD_CHECKOUT/src]

Many lines (the default): the first N lines of ../shared/data/wiki_corpus/train.txt.gz, cut to
--max-tokens tokens so the tiny fixture model (../shared/fixtures/allennlp-elmo) gets through 100k
lines in minutes on a CPU; the sentences stay distinct, so the one structure that does grow, the
`sentence_to_index` dict, grows as it would on a real corpus. Each size runs once with the default
output and once with --forget-sentences (no dict). Two bounded caches fill during the first ~100k
lines and then stay flat: the token -> character-id cache of elmo.model.chars (65,536 tokens, ~40 MB) and
HDF5's metadata cache while joining (~35 MB).

One line (`--one-line N ...`, #56 item 5): a single line of N tokens (the corpus's sentences joined)
through the bundled default model, whose output is (3 layers) x 512 x 4 bytes = 6 KB per token. With
`--before SRC` each size also runs on the code in SRC (e.g. a `git worktree` of an older commit's
src/), which embeds a long line in one piece. A 10-token line gives the fixed cost (interpreter,
torch, the model). Each run is its own subprocess, so each peak RSS is that run's alone.
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

from benchlib import PEAK_RSS_MB

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELMO_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "data" / "wiki_corpus" / "train.txt.gz"
MODEL = SHARED / "fixtures" / "allennlp-elmo"
BUNDLED = REPO / "src" / "elmo" / "bundled" / "default"

# Runs `elmo embed` in this process and prints its own peak RSS (VmHWM), so the number is this run's alone.
CHILD = """
import json, sys, time
import elmo
from elmo.cli import main
t = time.perf_counter()
code = main(sys.argv[1:])
print(json.dumps({"code": code, "seconds": time.perf_counter() - t, "elmo": elmo.__file__,
                  "peak_rss_mb": PEAK}))
""".replace("PEAK", PEAK_RSS_MB)


def write_lines(path: Path, n: int, max_tokens: int) -> int:
    tokens = 0
    with gzip.open(CORPUS, "rt", encoding="utf-8") as src, open(path, "w", encoding="utf-8") as out:
        for _, line in zip(range(n), src):
            words = line.split()[:max_tokens]
            tokens += len(words)
            out.write(" ".join(words) + "\n")
    return tokens


def write_one_line(path: Path, n: int) -> None:
    """One line of exactly n tokens: the corpus's sentences joined, from the first."""
    words: list[str] = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as src:
        for line in src:
            words += line.split()
            if len(words) >= n:
                break
    path.write_text(" ".join(words[:n]) + "\n", encoding="utf-8")


def run(corpus: Path, out: Path, model: Path, flags: list[str], src: str | None = None) -> dict:
    """`elmo embed corpus out` in a child process (on the code in `src` if given) -> its JSON line."""
    weights = model / ("lm_weights.hdf5" if (model / "lm_weights.hdf5").exists() else "weights.hdf5")
    cmd = [sys.executable, "-c", CHILD, "embed", str(corpus), str(out), "--options", str(model / "options.json"),
           "--weights", str(weights), "--overwrite", *flags]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def many_lines(sizes: list[int], max_tokens: int, tmp: Path) -> None:
    print(f"{'lines':>8} {'tokens':>9} {'output':<20} {'peak RSS MB':>11} {'seconds':>8} {'file MB':>8}")
    for n in sizes:
        corpus = tmp / f"{n}.txt"
        tokens = write_lines(corpus, n, max_tokens)
        for label, flags in (("default", []), ("--forget-sentences", ["--forget-sentences"])):
            out = tmp / f"{n}.hdf5"
            r = run(corpus, out, MODEL, flags)
            print(f"{n:>8} {tokens:>9} {label:<20} {r['peak_rss_mb']:>11.0f} {r['seconds']:>8.1f} "
                  f"{out.stat().st_size / 2**20:>8.1f}", flush=True)


def one_line(sizes: list[int], before: str | None, tmp: Path) -> None:
    codes = [("before", before)] if before else []
    codes.append(("after", None))
    print(f"{'tokens':>8} {'code':<7} {'peak RSS MB':>11} {'over 10 tokens':>14} {'output MB':>9} {'seconds':>8}  elmo")
    base: dict[str, float] = {}
    for n in [10, *sizes]:
        line = tmp / f"line-{n}.txt"
        write_one_line(line, n)
        for label, src in codes:
            out = tmp / f"line-{n}.hdf5"
            r = run(line, out, BUNDLED, [], src)
            base.setdefault(label, r["peak_rss_mb"])
            print(f"{n:>8} {label:<7} {r['peak_rss_mb']:>11.0f} {r['peak_rss_mb'] - base[label]:>14.0f} "
                  f"{out.stat().st_size / 2**20:>9.0f} {r['seconds']:>8.1f}  {r['elmo']}", flush=True)
            out.unlink()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 200_000], help="lines (many-lines mode)")
    p.add_argument("--max-tokens", type=int, default=8, help="tokens per line (many-lines mode)")
    p.add_argument("--one-line", type=int, nargs="+", metavar="TOKENS", help="one line of each of these lengths")
    p.add_argument("--before", help="with --one-line: also run on the code in this src/ folder (an older checkout)")
    args = p.parse_args()
    for need in (CORPUS, MODEL):
        if not need.exists():
            sys.exit(f"needs {need} (the project's shared data beside the checkout)")
    with tempfile.TemporaryDirectory() as tmp:
        if args.one_line:
            one_line(args.one_line, args.before, Path(tmp))
        else:
            many_lines(args.sizes, args.max_tokens, Path(tmp))


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"total {time.time() - t0:.0f} s", file=sys.stderr)
